"""Verbs `shapes` (a model's GEMMs as a workload file) and `tune-many` (tune every shape of one)."""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import closing, nullcontext
from pathlib import Path
from typing import Any, Callable

from ..lifeline import Interrupted, stop_signals
from ..spec import GemmSpec
from .common import add_db_argument, console

MAX_SHAPES_AT_ONCE = 32  # client threads, one per shape in flight


def register(subparsers) -> None:
    shapes = subparsers.add_parser("shapes", help="a model's GEMMs as a workload file (from torch, or check one)",
                                   description="Write or show a workload: the GEMMs a model runs, with counts and "
                                               "shares of GEMM time, for tune-many.")
    verbs = shapes.add_subparsers(dest="shapes_verb", metavar="WHAT")
    capture = verbs.add_parser("from-torch", help="record the GEMMs a torch model runs",
                               description="Run a torch model once under a dispatch mode and record every matmul, "
                                           "linear, addmm and bmm: shape, layout, dtype, and the epilogue where the "
                                           "next op fuses (bias, relu, tanh-gelu).")
    capture.add_argument("model", metavar="FILE.py:FACTORY", help="a Python file and a function in it that returns the model")
    capture.add_argument("--input", action="append", required=True, metavar="DIMSxDIMS[:DTYPE]",
                         help="an input tensor, e.g. 8x4096:bf16 (repeat for several)")
    capture.add_argument("--device", default="cpu", help="where the model runs while recording (default cpu)")
    capture.add_argument("--out", type=Path, required=True, metavar="FILE.json", help="the workload file to write")
    capture.set_defaults(run=run_from_torch)
    joined = verbs.add_parser("merge", help="one workload of several (a model captured at several batch sizes)")
    joined.add_argument("workloads", type=Path, nargs="+", metavar="WORKLOAD")
    joined.add_argument("--out", type=Path, required=True, metavar="FILE.json", help="the workload file to write")
    joined.set_defaults(run=run_merge)
    show = verbs.add_parser("show", help="check a workload file and print its shapes and shares")
    show.add_argument("workload", type=Path, metavar="WORKLOAD")
    show.set_defaults(run=run_show)

    many = subparsers.add_parser("tune-many", help="tune every shape of a workload under one budget, on one GPU or a Dask cluster",
                                 description="Tune every shape of a workload file (gemmtune shapes from-torch, or JSON/CSV "
                                             "by hand) under a total budget split by each shape's share of GEMM time. "
                                             "With the dask extra and --workers/--scheduler, trials run on a Dask cluster "
                                             "and the client alone writes the database; rerunning resumes.")
    many.add_argument("workload", type=Path, metavar="WORKLOAD")
    many.add_argument("--trials", type=int, help="total trials over all shapes (default 100 per shape unless --time)")
    many.add_argument("--time", type=float, dest="time_s", metavar="SECONDS", help="total wall-clock budget")
    add_db_argument(many)
    many.add_argument("--family", default=None, help="one family for every shape (default: the registry's pick per shape)")
    many.add_argument("--simulate", type=Path, metavar="DIR",
                      help="replay recorded tables (DIR/<family>_<spec>.csv, as bench/record_space.py writes them)")
    many.add_argument("--workers", type=int, default=None,
                      help="start a local Dask cluster of this many process workers, pinned round-robin to the "
                           "visible GPUs (default: one per GPU when several are visible and the dask extra is "
                           "installed, else tune in this process)")
    many.add_argument("--scheduler", default=None, metavar="ADDRESS",
                      help="use the Dask cluster at this address, e.g. tcp://host:8786")
    many.add_argument("--seed", type=int, default=0, help="random seed of each shape's strategy (default 0)")
    many.add_argument("--batch", type=int, default=8, help="configs per round between model updates (default 8)")
    many.add_argument("--lookahead", action=argparse.BooleanOptionalAction, default=None,
                      help="ask each shape's next round before this one is measured: on a cluster it is submitted "
                           "at once, so workers never wait for a round's slowest trial (the search learns a round "
                           "later; default: on with a cluster, off without)")
    many.add_argument("--shapes-at-once", type=int, default=None, metavar="N",
                      help="shapes tuned at the same time on a cluster (default: all of them, up to 32, with a "
                           "trial budget; one per worker with --time alone; 1 without a cluster); seeding a "
                           "shape from the shapes tuned before it is then off")
    many.add_argument("--top", type=int, default=3, help="re-measure this many best configs per shape (default 3)")
    many.add_argument("--timeout", type=float, default=60.0, help="seconds before a measurement counts as hung")
    many.add_argument("--lock-log", type=Path, metavar="FILE",
                      help="record every timed section (GPU lock hold: pid, start, end, worker) in FILE, overwritten, "
                           "and report overlapping sections and each worker's busy time at the end")
    many.add_argument("--task-log", type=Path, metavar="FILE",
                      help="on a cluster: record every task (worker, kind, shape, start, stop) in FILE as JSON lines, "
                           "and summarise where the workers' time went at the end")
    many.set_defaults(run=run_tune_many)


# --- shapes ---------------------------------------------------------------------------------------
def run_from_torch(args: argparse.Namespace) -> int:
    from ..capture import from_torch
    from ..workload import save_workload

    workload, notes = from_torch(args.model, args.input, args.device)
    for note in notes:
        print(f"gemmtune: {note}", file=sys.stderr)
    save_workload(workload, args.out)
    print_workload(workload)
    print(f"{len(workload.shapes)} shapes written to {args.out}")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from ..workload import load_workload, merge, save_workload

    workload = merge([load_workload(path) for path in args.workloads])
    save_workload(workload, args.out)
    print_workload(workload)
    print(f"{len(workload.shapes)} shapes written to {args.out}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from ..workload import load_workload

    print_workload(load_workload(args.workload))
    return 0


def print_workload(workload: Any) -> None:
    from rich.table import Table

    table = Table(title="workload")
    for column in ("shape", "count", "share"):
        table.add_column(column, justify="left" if column == "shape" else "right")
    for shape, share in zip(workload.shapes, workload.shares()):
        table.add_row(shape.spec.short(), str(shape.count), f"{100 * share:.1f}%")
    console().print(table)


# --- tune-many ------------------------------------------------------------------------------------
def runner_source(args: argparse.Namespace, shares: dict[GemmSpec, float]) -> tuple[Any, Any, Any, str]:
    """(runner_for(spec, family), cublas_for(spec, family), the Dask client or None, a line saying
    where trials run). cublas_for starts the measurement and returns a thunk that waits for its time:
    on a cluster every shape's baseline is in flight at once (the GPU lock still times one section at
    a time per GPU; before, the baselines ran one after another and left the GPUs 98% idle for the
    first 45 s of a 20-shape run); here, the thunk measures when called."""
    import json

    from ..device import visible_gpus
    from ..tune.distributed import (DaskRunner, GpuRecipe, TableRecipe, cublas_on_worker, dask_client,
                                    gpu_task_options)

    gpus = [] if args.simulate is not None or args.scheduler else visible_gpus()
    workers = local_workers(args.workers, gpus)
    client = dask_client(args.scheduler, workers, gpus) if args.scheduler is not None or workers > 1 else None
    where = (f"Dask cluster {args.scheduler}" if args.scheduler else
             cluster_line(workers, gpus) if client is not None else "this machine")

    def recipe(spec: GemmSpec, family: str) -> Any:
        if args.simulate is not None:
            return TableRecipe(str(table_for(args.simulate, family, spec)))
        return GpuRecipe(json.dumps(spec.to_json()), family, args.timeout)

    def runner_for(spec: GemmSpec, family: str) -> Any:
        made = recipe(spec, family)
        if client is None:
            return made.build()
        return DaskRunner(client, made, priority=round(1e6 * shares.get(spec, 0.0)),  # the largest shape first
                          label=spec.short().replace(" ", "/"))

    def cublas_for(spec: GemmSpec, family: str) -> Callable[[], float | None]:
        """cuBLAS's time for the spec, to be waited for: the recorded table's, or measured on a GPU
        worker (or here)."""
        if args.simulate is not None:
            recorded = recipe(spec, family).local().table.meta.get("cublas_median_s")
            return lambda: recorded
        if client is not None:
            return client.submit(cublas_on_worker, json.dumps(spec.to_json()), pure=False,
                                 **gpu_task_options(client)).result
        from .tune_cmds import cublas_seconds

        return lambda: cublas_seconds(spec)[0]
    return runner_for, cublas_for, client, where


def local_workers(asked: int | None, gpus: list[str]) -> int:
    """--workers, else one worker per visible GPU when there are several and Dask is installed
    (a local cluster pinned one worker to each), else 1 (tuning in this process)."""
    from ..errors import SpecError

    if asked is not None:
        if asked < 1:
            raise SpecError(f"--workers must be 1 or more, not {asked}")
        return asked
    if len(gpus) < 2:
        return 1
    try:
        import distributed  # noqa: F401
    except ImportError:
        print(f"gemmtune: {len(gpus)} GPUs visible, tuning on one: pip install 'gemmtune[dask]' to use them all",
              file=sys.stderr)
        return 1
    return len(gpus)


def cluster_line(workers: int, gpus: list[str]) -> str:
    if not gpus:
        return f"a local Dask cluster of {workers} workers"
    used = gpus[:workers]
    return (f"a local Dask cluster of {workers} workers on {len(used)} GPU{'s' if len(used) > 1 else ''} "
            f"(CUDA_VISIBLE_DEVICES {','.join(used)}, {workers / len(used):g} per GPU)")


def table_for(directory: Path, family: str, spec: GemmSpec) -> Path:
    from ..errors import SpecError
    from ..tune.simulation import sidecar, table_path

    path = table_path(family, spec, directory)
    if not path.exists() or not sidecar(path).exists():
        raise SpecError(f"no simulation table for {spec.short()} ({family}) at {path}")
    return path


def run_tune_many(args: argparse.Namespace) -> int:
    from ..build import target_arch
    from ..tune.db import TuningDB, default_db_path
    from ..tune.many import tune_many, workload_families
    from ..tune.priming import primed_candidates
    from ..tune.tuner import TuneOptions
    from ..workload import load_workload

    workload = load_workload(args.workload)
    if args.lock_log is not None:
        start_lock_log(args.lock_log)
    total_trials = args.trials if args.trials is not None or args.time_s is not None else 100 * len(workload.shapes)
    arch = "sm_90" if args.simulate is not None else target_arch(None)
    started = time.monotonic()
    runner_for, cublas_for, client, where = runner_source(args, dict(zip((s.spec for s in workload.shapes),
                                                                        workload.shares())))
    options = TuneOptions(strategy="evolutionary", seed=args.seed, batch=args.batch, remeasure_top=args.top,
                          lookahead=client is not None if args.lookahead is None else args.lookahead)
    db_path = args.db or default_db_path()
    out = console()
    out.print(f"tuning {len(workload.shapes)} shapes on {where}; database {db_path}")
    at_once = args.shapes_at_once or default_shapes_at_once(len(workload.shapes), client, args)
    display = ShapeProgress()
    cublas: dict[GemmSpec, float | None] = {}
    done: list = []  # the shapes tuned so far, for a summary when the run is stopped
    try:
        with stop_signals(), TuningDB(db_path) as db, closing(client) if client is not None else nullcontext(), \
                task_log(client, args.task_log), closing(display), \
                primed_candidates(workload_families(workload, arch, args.family), arch):
            out.print("cuBLAS first, " + ("from the tables" if args.simulate else
                                          "every shape at once on the cluster" if client is not None else
                                          "one shape at a time"))
            cublas = cublas_times(workload, cublas_for, arch, args.family)
            outcomes = tune_many(workload, runner_for, db, arch, options, total_trials, args.time_s, args.family,
                                 on_shape=display.start, shapes_at_once=at_once, on_done=done.append)
    except Interrupted as stop:
        if done:
            out.print(f"{len(done)} of {len(workload.shapes)} shapes were tuned when the run stopped:")
            print_summary(list(done), [cublas.get(o.budget.shape.spec) for o in done], out, len(workload.shapes))
        out.print(f"stopped after {wall_text(started, where)}", highlight=False)
        if args.lock_log is not None:
            report_lock_log(args.lock_log, out)
        report_task_log(args.task_log if client is not None else None, out)
        print(f"gemmtune: stopped by {stop.name}; every finished trial is saved in {db_path}", file=sys.stderr)
        return stop.exit_code
    print_summary(outcomes, [cublas.get(o.budget.shape.spec) for o in outcomes], out)
    out.print(f"{len(outcomes)} shapes, {sum(o.outcome.trials for o in outcomes if o.outcome)} trials, "
              f"in {wall_text(started, where)}", highlight=False)
    lock_ok = report_lock_log(args.lock_log, out) if args.lock_log is not None else True
    report_task_log(args.task_log if client is not None else None, out)
    return 0 if lock_ok and all(o.outcome is not None for o in outcomes) else 1


def wall_text(started: float, where: str) -> str:
    """'123.4 s wall on <where>': the run's wall time since `started` (time.monotonic)."""
    return f"{time.monotonic() - started:.1f} s wall on {where}"


def cublas_times(workload: Any, cublas_for: Any, arch: str, family: str | None) -> dict[GemmSpec, float | None]:
    """cuBLAS's time per shape, taken before tuning (no tuning trial shares the GPU then, and a run
    stopped later still has them): every shape started first (cublas_for returns a thunk), then each
    waited for; None where it could not be measured."""
    from ..errors import GemmtuneError
    from ..tune.many import family_of

    pending: dict[GemmSpec, Any] = {}
    for shape in workload.shapes:
        try:
            pending[shape.spec] = cublas_for(shape.spec, family_of(shape.spec, arch, family))
        except Exception as err:  # a shape the registry refuses: reported when it is tuned
            pending[shape.spec] = _raiser(err)
    times: dict[GemmSpec, float | None] = {}
    for spec, wait in pending.items():
        try:
            times[spec] = wait()
        except GemmtuneError:
            times[spec] = None  # the shape's own problem is reported when it is tuned
        except Exception as err:  # torch or the cluster failing the baseline must not stop the tuning
            print(f"gemmtune: no cuBLAS time for {spec.short()}: {type(err).__name__}: {err}".splitlines()[0],
                  file=sys.stderr)
            times[spec] = None
    return times


def _raiser(err: Exception) -> Callable[[], float | None]:
    """A thunk that raises `err` (a baseline that failed to start fails where it is waited for)."""
    def wait() -> float | None:
        raise err
    return wait


def start_lock_log(path: Path) -> None:
    """Timed sections of this process and of every worker it starts (they inherit the environment)
    go to `path`, emptied first."""
    import os

    from ..gpu_lock import LOCK_LOG_ENV

    path.write_text("")
    os.environ[LOCK_LOG_ENV] = str(path.resolve())


def report_lock_log(path: Path, out: Any) -> bool:
    """Print the lock log's report; False when timed sections of different processes overlapped."""
    from ..gpu_lock import lock_report, read_intervals

    report = lock_report(read_intervals(path))
    for line in report.lines():
        out.print(line, highlight=False)
    if report.overlapping_pairs:
        print(f"gemmtune: {report.overlapping_pairs} pairs of timed sections overlapped (see {path})", file=sys.stderr)
    return report.overlapping_pairs == 0


def task_log(client: Any, path: Path | None) -> Any:
    """The cluster's task stream recorded into `path` while the run lasts (nothing without a cluster:
    tuning in this process runs no tasks; the lock log still shows its timed sections)."""
    if path is None or client is None:
        if path is not None:
            print("gemmtune: --task-log records a cluster's tasks; this run tunes in this process", file=sys.stderr)
        return nullcontext()
    from ..tune.task_log import TaskLog

    return TaskLog(client, path)


def report_task_log(path: Path | None, out: Any) -> None:
    if path is None or not path.exists():
        return
    from ..tune.task_log import read_intervals, summary_lines

    for line in summary_lines(read_intervals(path)):
        out.print(line, highlight=False)


def default_shapes_at_once(shapes: int, client: Any, args: argparse.Namespace) -> int:
    """1 without a cluster. On one, with a trial budget: every shape at once, so a worker that one
    shape's round leaves idle takes another shape's trial; Dask runs the tasks of the shapes with the
    larger share of time first (DaskRunner's priority), so the long shapes still start first. With
    a time budget alone: one shape per worker, since each shape's seconds are then shared by the
    shapes running beside it (tune.many.overlapped_times)."""
    if client is None:
        return 1
    if args.trials is None and args.time_s is not None:
        return min(shapes, worker_count(client, args))
    return min(shapes, MAX_SHAPES_AT_ONCE)


def worker_count(client: Any, args: argparse.Namespace) -> int:
    return len(client.scheduler_info().get("workers", {})) or (args.workers or 1)


class ShapeProgress:
    """One progress bar per shape (tune's columns), all in one live view."""

    def __init__(self) -> None:
        from .tune_cmds import trial_progress

        self.progress = trial_progress()
        self.started = False

    def start(self, budget: Any, family: str) -> Any:
        from .tune_cmds import show_trial

        if not self.started:
            self.progress.start()
            self.started = True
        spec = budget.shape.spec
        label = f"{spec.short()} ({family}, {100 * budget.share:.1f}%)"
        task = self.progress.add_task(label, total=budget.trials, failures=0, best="—")
        return lambda progress: show_trial(self.progress, task, spec, None, progress)

    def close(self) -> None:
        if self.started:
            self.progress.stop()
            self.started = False


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds else "—"


def _ratio(reference: float | None, seconds: float | None) -> str:
    return f"{reference / seconds:.2f}" if reference and seconds else "—"


def print_summary(outcomes: list, cublas: list, out: Any, shapes: int | None = None) -> None:
    """Per shape: family, share, trials, untuned and tuned times and × cuBLAS; then the workload's GEMM
    time per model step (Σ count × time) untuned, tuned and with cuBLAS. `shapes`: the workload's
    count of shapes, when `outcomes` are only those finished."""
    from rich.table import Table

    table = Table(title="tune-many: per shape (times in µs; × cuBLAS > 1 is faster)")
    for column in ("shape", "family", "share", "count", "trials", "untuned", "tuned", "cuBLAS",
                   "untuned × cuBLAS", "tuned × cuBLAS", "best config"):
        table.add_column(column, justify="left" if column in ("shape", "best config") else "right")
    for o, cublas_s in sorted(zip(outcomes, cublas), key=lambda pair: -pair[0].budget.share):
        shape = o.budget.shape
        best = o.outcome.best if o.outcome is not None else None
        table.add_row(shape.spec.short(), o.family, f"{100 * o.budget.share:.1f}%", str(shape.count),
                      str(o.outcome.trials) if o.outcome else "—", _us(o.untuned_s), _us(o.tuned_s), _us(cublas_s),
                      _ratio(cublas_s, o.untuned_s), _ratio(cublas_s, o.tuned_s),
                      best.config.describe() if best else (o.error or "no successful trial"))
    out.print(table)
    line = workload_time_line(outcomes, cublas, shapes or len(outcomes))
    if line:
        out.print(line, highlight=False)


def workload_time_line(outcomes: list, cublas: list, shapes: int) -> str:
    """The workload's GEMM time per model step (Σ count × time) tuned, and untuned and with cuBLAS
    where every tuned shape has those, each against cuBLAS; over the tuned shapes ('' when none is)."""
    tuned = [(o.budget.shape.count, o.tuned_s, o.untuned_s, c) for o, c in zip(outcomes, cublas) if o.tuned_s]
    if not tuned:
        return ""
    totals = {name: sum(row[0] * row[i] for row in tuned) if all(row[i] for row in tuned) else None
              for i, name in ((2, "untuned"), (1, "tuned"), (3, "cuBLAS"))}
    over = "" if len(tuned) == shapes else f" (over the {len(tuned)} of {shapes} shapes tuned)"
    parts = [f"{name} {seconds * 1e3:.3f} ms" if seconds else f"{name} —" for name, seconds in totals.items()]
    line = f"workload GEMM time per model step (Σ count × time){over}: " + ", ".join(parts)
    if totals["cuBLAS"] is None:
        return line
    ratios = [f"{name} {totals['cuBLAS'] / seconds:.2f}" for name, seconds in totals.items()
              if seconds and name != "cuBLAS"]
    return line + "; × cuBLAS " + ", ".join(ratios)
