"""Verbs `space` (size of the search space and why configs are rejected) and `tune` (the auto-tuner)."""
from __future__ import annotations

import argparse
import re
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Callable

from ..errors import SpecError
from ..lifeline import Interrupted, stop_signals
from ..spec import GemmSpec, refuse_fp8
from .common import (add_db_argument, add_family_argument, add_spec_arguments, console, family_from_args,
                     spec_from_args)

DEFAULT_TRIALS = 100  # when neither --trials nor --time is given
_TRIAL_WORD = re.compile(r"^t=(.*)$", re.IGNORECASE)


def register(subparsers) -> None:
    space = subparsers.add_parser("space", help="size of the tuning search space and rejection counts by reason",
                                  description="Enumerate the family's search space for a GEMM and count the configs "
                                              "each constraint rejects (no GPU needed).")
    add_spec_arguments(space)
    add_family_argument(space)
    space.add_argument("--arch", help="target arch (default: the GPU's, else sm_90)")
    space.set_defaults(run=run_space)

    tune = subparsers.add_parser("tune", help="auto-tune a GEMM on the GPU and store every trial in the database",
                                 description="Search the config space, verifying and timing each candidate in a "
                                             "watched worker process. Re-running the same command resumes. "
                                             "The trial budget may also be given as the size word t=N.")
    add_spec_arguments(tune)
    tune.add_argument("--trials", type=int, help=f"total trials for this spec and GPU (default {DEFAULT_TRIALS} "
                                                 "unless --time is given)")
    tune.add_argument("--time", type=float, dest="time_s", metavar="SECONDS",
                      help="wall-clock budget of this run, set-up included (the leaders' final comparison comes after)")
    tune.add_argument("--strategy", default="evolutionary", choices=("exhaustive", "random", "evolutionary"),
                      help="search strategy (default evolutionary: guided by a learned cost model)")
    add_db_argument(tune)
    tune.add_argument("--seed", type=int, default=0, help="random seed of the strategy (default 0)")
    tune.add_argument("--batch", type=int, default=8, help="configs per round between model updates (default 8)")
    tune.add_argument("--lookahead", action="store_true",
                      help="ask the next round before this one is measured and compile it meanwhile (the "
                           "search learns a round later)")
    tune.add_argument("--top", type=int, default=5, help="re-measure and show this many best configs (default 5)")
    tune.add_argument("--timeout", type=float, default=60.0, help="seconds before a measurement counts as hung")
    add_family_argument(tune)
    tune.add_argument("--no-transfer", action="store_true", help="do not seed from the nearest tuned shapes")
    tune.add_argument("--chooser-seeds", type=int, default=4, metavar="N",
                      help="measure the config chooser's N best picks first (default 4; 0: none)")
    tune.add_argument("--simulate", type=Path, metavar="CSV",
                      help="replay a recorded table (src/gemmtune/data/*.csv) instead of measuring: no GPU needed")
    tune.add_argument("--backend", default="native", choices=("native", "tvm", "tvm-manual"),
                      help="native: gemmtune's own CUDA templates (default); tvm: MetaSchedule's own space; "
                           "tvm-manual: the tile sizes of the manual TVM schedule")
    from .tvm_cmds import add_tvm_tune_arguments

    add_tvm_tune_arguments(tune)
    tune.set_defaults(run=run_tune)


# --- space ----------------------------------------------------------------------------------------
def run_space(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..build import target_arch
    from ..tune.space import analyze, space_for

    spec = spec_from_args(args)
    arch = target_arch(args.arch)
    family = family_from_args(args, spec, arch)  # ConfigError where no family runs the spec
    if spec.fp8:
        return print_fp8_candidates(spec)
    space = space_for(family.name)
    report = analyze(space, spec, arch)
    console = Console(soft_wrap=True)
    console.print(f"{space.family} v{space.version} search space for {spec.short()} on {report.arch}: "
                  f"{report.total:,} combinations, [bold]{report.valid:,} valid[/bold]")
    console.print("parameters: " + ", ".join(f"{p.name} {_domain_text(p.domain)}" for p in space.params))
    console.print("rejections by rule, checked in this order. first: configs for which the rule is the first "
                  "to fail (these add up to the total). any: every config the rule rejects among those that "
                  "pass the structural rules.")
    table = Table()
    for column in ("rule", "first", "any", "example reason"):
        table.add_column(column, justify="right" if column in ("first", "any") else "left")
    for count in report.counts:
        name = f"{count.name} (structural)" if count.structural else count.name
        table.add_row(name, f"{count.first:,}", f"{count.any:,}", count.example or "—")
    table.add_row("[bold]valid[/bold]", f"{report.valid:,}", "", "")
    console.print(table)
    return 0


def print_fp8_candidates(spec: GemmSpec) -> int:
    """An fp8 GEMM has no combinatorial space: `tune` times the grouped kernel's candidate list for one group
    of M rows (grouped.config.candidates), the default first. Print that list."""
    from ..grouped.as_gemm import Fp8GemmConfig
    from ..grouped.config import candidates
    from ..tune.grouped_tuner import spec_for_gemm

    grouped, _ = spec_for_gemm(spec)
    found = candidates(grouped)
    out = console()
    out.print(f"fp8_grouped candidates for {spec.short()}: {len(found)}, timed in this order by "
              f"'gemmtune tune' (the first is the default; t=N times the first N)")
    for index, config in enumerate(found, 1):
        out.print(f"  {index:2d}  {Fp8GemmConfig.of(config).describe()}")
    return 0


def _domain_text(domain: tuple) -> str:
    return "{" + ",".join(str(int(v) if isinstance(v, bool) else v) for v in domain) + "}"


# --- tune -----------------------------------------------------------------------------------------
def split_trial_word(words: list[str]) -> tuple[list[str], int | None]:
    """Take the trial budget word `t=N` out of the size words."""
    rest, trials = [], None
    for word in words:
        match = _TRIAL_WORD.match(word.strip())
        if not match:
            rest.append(word)
            continue
        if trials is not None or not match.group(1).isdigit() or int(match.group(1)) < 1:
            raise SpecError(f"cannot read '{word}': give the trial budget once, as t=N with N >= 1")
        trials = int(match.group(1))
    return rest, trials


def trial_budget(flag: int | None, word: int | None, time_s: float | None) -> int | None:
    if flag is not None and word is not None:
        raise SpecError("the trial budget is given both as --trials and as t=N")
    trials = flag if flag is not None else word
    if trials is not None and trials < 1:
        raise SpecError(f"--trials must be at least 1, got {trials}")
    if time_s is not None and time_s <= 0:
        raise SpecError(f"--time must be positive, got {time_s}")
    return DEFAULT_TRIALS if trials is None and time_s is None else trials


def run_tune(args: argparse.Namespace) -> int:
    if args.backend != "native":
        from .tvm_cmds import run_tvm_tune

        return run_tvm_tune(args)
    from ..tune.db import TuningDB, default_db_path
    from ..tune.tuner import TuneOptions, tune

    started = time.monotonic()  # --time counts the set-up (device, cuBLAS, the measuring process) too
    words, word_trials = split_trial_word(args.sizes)
    spec = spec_from_args(argparse.Namespace(**{**vars(args), "sizes": words}))
    if spec.fp8:
        return run_tune_fp8(args, spec, word_trials)
    trials = trial_budget(args.trials, word_trials, args.time_s)
    family = tuned_family(args, spec)
    options = TuneOptions(family, args.strategy, trials, args.time_s, args.seed, args.batch, args.top,
                          not args.no_transfer, args.chooser_seeds, args.lookahead, started=started)
    runner, cublas_s, note = simulation_runner(args.simulate, spec) if args.simulate else gpu_runner(spec, args)
    db_path = args.db or default_db_path()
    seen = SeenTrials()
    before = None  # trials in the database when this run began
    try:
        with stop_signals(), closing(runner), TuningDB(db_path) as db:
            before = db.row_count()
            with TuneDisplay(spec, trials, cublas_s, note) as display:
                outcome = tune(spec, runner, db, options, on_trial=seen.watching(display.update))
                pace = seen.rate()
    except Interrupted as stop:  # every trial is committed as it is measured: say so, and stop
        if before is not None:  # a trial committed after its last report (the signal came between)
            with TuningDB(db_path) as db:
                seen.settle(db.row_count() - before)
        print(f"gemmtune: stopped by {stop.name}; {seen.describe()} saved in {db_path}", file=sys.stderr)
        return stop.exit_code
    print_outcome(outcome, cublas_s, db_path)
    console().print(f"search: {pace}")
    return 0


FP8_ROUNDS = 30  # timed rounds of each fp8 candidate and torch's call (tune-grouped's default)


def run_tune_fp8(args: argparse.Namespace, spec: GemmSpec, word_trials: int | None) -> int:
    """An fp8 GEMM (issue 70) tuned as the grouped fp8 kernel's one group of M rows: tune-grouped's candidates,
    verified against the dequantized operands' float64 product, timed against torch._scaled_mm, stored under the
    key gemmtune.torch.scaled_mm then looks up (grouped/tuned.py). The budget (--trials, t=N): the first N
    candidates (default all, a dozen or so); search options do not apply."""
    from ..tune.db import default_db_path
    from ..tune.grouped_tuner import spec_for_gemm
    from .grouped_cmds import print_outcome, tune_spec

    if args.simulate:
        raise SpecError("--simulate replays single-GEMM tables; fp8 GEMMs are tuned on an sm_90a GPU only")
    if args.time_s is not None:
        raise SpecError("fp8 GEMMs time each grouped candidate (a dozen or so): give --trials N, or no budget for all")
    if args.family is not None:
        family_from_args(args, spec, "sm_90a")  # ConfigError where that family cannot run the spec
    limit = trial_budget(args.trials, word_trials, None) if (args.trials or word_trials) else None
    grouped, rows = spec_for_gemm(spec)
    db_path = args.db or default_db_path()
    from ..tune.grouped_measure import WorkerMeasurer

    measurer = WorkerMeasurer(FP8_ROUNDS, args.timeout)  # NoDeviceError (exit 3) before the database is touched
    try:
        outcome = tune_spec(grouped, rows, measurer, db_path, limit)
    finally:
        measurer.close()
    print_outcome(outcome, db_path)
    note = gemv_note(spec)
    if note:
        console().print(note)
    return 0 if outcome.best is not None else 1


def gemv_note(spec: GemmSpec) -> str:
    """Where gemmtune.torch.scaled_mm runs this shape on the fp8 decode GEMV, not the tuned grouped kernel."""
    from ..grouped.fp8_gemv import decode_spec

    if decode_spec(spec.m, spec.n, spec.k, spec.dtype, spec.scaling, spec.out_dtype, spec.epilogue.reads_bias) is None:
        return ""
    return (f"note: gemmtune.torch.scaled_mm runs M = {spec.m} (<= 16, {spec.scaling} scales) on the fp8 decode GEMV, "
            "not on this tuned grouped kernel; build/export and scaled_grouped_mm of one group use it")


class SeenTrials:
    """What a tune reported through on_trial: how many trials this run added, the total, and when
    this run found its best (seconds from the start)."""

    def __init__(self) -> None:
        self.new, self.total = 0, None
        self.started, self.best_s, self.best_at = time.monotonic(), None, None
        self.last_at = 0.0  # seconds from the start to the last search trial

    def watching(self, show: Callable[[Any], None]) -> Callable[[Any], None]:
        def on_trial(progress: Any) -> None:
            self.new, self.total = self.new + 1, progress.done
            self.last_at = time.monotonic() - self.started
            best = progress.best.median_s if progress.best is not None else None
            if best is not None and (self.best_s is None or best < self.best_s):
                self.best_s, self.best_at = best, time.monotonic() - self.started
            show(progress)
        return on_trial

    def settle(self, saved: int) -> None:
        """The database holds `saved` rows from this run: count the ones committed but not yet
        reported (a stop signal can land between a trial's commit and its report)."""
        if saved > self.new:
            self.total = (self.total or 0) + saved - self.new
            self.new = saved

    def describe(self) -> str:
        total = "" if self.total is None else f", {self.total} in total for this spec and GPU"
        return f"{self.new} new trial{'s' if self.new != 1 else ''}{total}"

    def rate(self) -> str:
        """'N trials in T s (R/s); best after S s', the search phase's pace (re-measuring excluded)."""
        elapsed = self.last_at
        text = f"{self.new} trials in {elapsed:.1f} s ({self.new / elapsed:.2f}/s)" if elapsed > 0 else ""
        return text + (f"; best found after {self.best_at:.1f} s" if self.best_at is not None else "")


def tuned_family(args: argparse.Namespace, spec: GemmSpec, arch: str | None = None) -> str:
    """--family, checked against the spec, or the registry's choice for the spec on the target arch."""
    from ..build import target_arch

    refuse_fp8(spec, "tuning")
    return family_from_args(args, spec, arch or target_arch(None)).name


def gpu_runner(spec: GemmSpec, args: argparse.Namespace) -> tuple[Any, float | None, str]:
    """The measuring pipeline on GPU 0; NoDeviceError (exit 3) without one."""
    from ..compiler import nvrtc_version
    from ..device import query_device
    from ..tune.pipeline import MeasurePipeline
    from ..tune.trial import Environment

    device = query_device(0)
    spec.check_fits(_free_memory())
    cublas_s, note = cublas_seconds(spec)
    environment = Environment.from_device(device, nvrtc_version())
    runner = MeasurePipeline(spec, environment, family=tuned_family(args, spec, device.arch), timeout_s=args.timeout,
                             device=device)
    return runner, cublas_s, f"{device.summary()}; {note}"


def _free_memory() -> int:
    from ..device import free_memory

    return free_memory(0)


def cublas_seconds(spec: GemmSpec) -> tuple[float | None, str]:
    """cuBLAS's median for the spec, measured once, or None with the reason (torch is optional)."""
    from ..baseline import cublas_measurement
    from ..errors import GemmtuneError

    try:
        median = cublas_measurement(spec).median_s
    except GemmtuneError as err:
        return None, f"no cuBLAS baseline: {err}"
    return median, f"cuBLAS {spec.flops / median / 1e12:.1f} TFLOP/s"


def simulation_runner(path: Path, spec: GemmSpec) -> tuple[Any, float | None, str]:
    from ..tune.simulation import SimulationRunner, SimulationTable, replays, sidecar

    if not Path(path).exists() or not sidecar(path).exists():
        raise SpecError(f"no simulation table at {path} (a .csv or .csv.gz with its .json beside it)")
    table = SimulationTable.from_csv(path)
    if not replays(table, spec):
        raise SpecError(f"the table at {path} was recorded for {table.spec.short()}, not {spec.short()}")
    cublas_s = table.meta.get("cublas_median_s")
    return SimulationRunner(table), cublas_s, f"simulating {table.environment.device_name} from {path}"


# --- display ----------------------------------------------------------------------------------------
def rate_text(spec: GemmSpec, seconds: float | None, cublas_s: float | None) -> str:
    if seconds is None:
        return "—"
    text = f"{spec.flops / seconds / 1e12:.2f} TFLOP/s"
    return text + (f" ({100 * cublas_s / seconds:.0f}% of cuBLAS)" if cublas_s else "")


def trial_progress(description: str = "{task.description}") -> Any:
    """A rich Progress whose tasks are tunes: trials done of the budget, failures, best so far."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[failures]} failed"), TextColumn("best {task.fields[best]}"),
                    TimeElapsedColumn(), console=console())


def show_trial(bar: Any, task: Any, spec: GemmSpec, cublas_s: float | None, progress: Any) -> None:
    """One tune's progress (a TuneProgress) onto its task of `bar`."""
    best = progress.best.median_s if progress.best is not None else None
    bar.update(task, completed=progress.done, failures=progress.failures, best=rate_text(spec, best, cublas_s))


class TuneDisplay:
    """A rich progress bar: trials done, failures, best so far."""

    def __init__(self, spec: GemmSpec, budget: int | None, cublas_s: float | None, note: str):
        self.spec, self.budget, self.cublas_s, self.note = spec, budget, cublas_s, note
        self.progress = trial_progress("[bold]tuning {task.description}")
        self.task = None

    def __enter__(self) -> "TuneDisplay":
        self.progress.console.print(self.note)
        self.progress.start()
        self.task = self.progress.add_task(self.spec.short(), total=self.budget, failures=0, best="—")
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, progress: Any) -> None:
        show_trial(self.progress, self.task, self.spec, self.cublas_s, progress)


def print_outcome(outcome: Any, cublas_s: float | None, db_path: Path) -> None:
    from rich.table import Table

    spec = outcome.context.spec
    table = Table(title=f"best configs for {spec.short()} on {outcome.context.environment.device_name} (re-measured)")
    for column in ("#", "config", "time", "TFLOP/s", "% of cuBLAS"):
        table.add_column(column, justify="left" if column == "config" else "right")
    for rank, result in enumerate(outcome.top, start=1):
        percent = f"{100 * cublas_s / result.median_s:.0f}%" if cublas_s else "—"
        table.add_row(str(rank), result.config.describe(), f"{result.median_s * 1e6:.1f} µs",
                      f"{result.tflops(spec):.2f}", percent)
    out = console()
    out.print(table)
    out.print(f"{outcome.new_trials} new trials, {outcome.trials} in total for this spec and GPU "
                  f"({outcome.failures} failed) out of {outcome.candidates:,} candidates; "
                  f"{outcome.stop_reason}. Database: {db_path}")
