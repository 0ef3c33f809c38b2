"""Schedules beyond the fixed manual one: tuned (MetaSchedule) and dlight's default.

Two search spaces, both searched by MetaSchedule's `tune_tir` into a JSON database in a work
directory (database_workload.json, database_tuning_record.json):
  space="manual": the five manual steps with their tile sizes sampled (sample_perfect_tile for
                  the splits of M, N and K, sample_categorical for the load width);
  space="auto":   MetaSchedule's own CUDA rules (multi-level tiling, auto-inline, ...).
Candidates are built and measured through gemmtune (measure.py). The best schedule's trace is
printed as an `apply_trace(sch)` function; `save_trace`/`load_trace` store it and apply it again
to a fresh schedule, which is how `tvm evaluate --tuned --trace FILE` rebuilds a tuned kernel.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, GemmtuneError, NoDeviceError
from ..spec import GemmSpec
from . import steps
from .target import cuda_target
from .tiles import Tiles
from .workloads import gemm, module

SPACES = ("auto", "manual")
TRACE_FILE = "best_trace.py"


def default_cost_model() -> str:
    """xgb when xgboost imports (MetaSchedule's default), else random (the GPU bundle has no xgboost)."""
    try:
        import xgboost  # noqa: F401
    except (ImportError, OSError, ValueError):  # missing; or its native library fails to load
        return "random"
    return "xgb"


def manual_space(sch: Any) -> None:
    """The manual schedule with sampled tiles: MetaSchedule mutates the sampling decisions."""
    i, j, k = sch.get_loops(sch.get_sblock(steps.GEMM))
    _, threads_m, thread_m = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)
    _, threads_n, thread_n = sch.sample_perfect_tile(j, n=3, max_innermost_factor=8)
    _, block_k = sch.sample_perfect_tile(k, n=2, max_innermost_factor=32)
    vector = sch.sample_categorical([1, 2, 4], [0.2, 0.2, 0.6])
    steps.apply_all(sch, Tiles(threads_m, thread_m, threads_n, thread_n, block_k, vector))


@dataclass(frozen=True)
class TuneSettings:
    space: str = "auto"
    trials: int = 64
    trials_per_iter: int = 64
    cost_model: str = ""  # "" = default_cost_model()
    strategy: str = "evolutionary"
    arch: str = "sm_90"
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.space not in SPACES:
            raise ConfigError(f"unknown TVM search space '{self.space}'; choose {' or '.join(SPACES)}")
        if self.trials < 1 or self.trials_per_iter < 1:
            raise ConfigError("trials and trials per iteration must be at least 1")


@dataclass(frozen=True)
class TuneResult:
    spec: GemmSpec
    settings: TuneSettings
    work_dir: Path
    schedule: Any  # tvm.s_tir.Schedule of the best record
    trace_text: str  # the `apply_trace(sch)` function
    seconds: dict[str, float] = field(default_factory=dict)  # where the tune's wall time went
    untimed: int = 0  # candidates the runner did not time beyond their checked run (hopeless)

    def time_split(self) -> str:
        """'total 207 s: build 40, measure 60, search and TVM overhead 107' (empty when unknown)."""
        if "total" not in self.seconds:
            return ""
        parts = [f"{k} {v:.0f}" for k, v in self.seconds.items() if k != "total"]
        other = self.seconds["total"] - sum(self.seconds.get(k, 0.0) for k in ("build", "measure"))
        untimed = f"; {self.untimed} candidates not timed past their checked run" if self.untimed else ""
        return (f"total {self.seconds['total']:.0f} s: " + ", ".join(parts + [f"search and TVM overhead {other:.0f}"])
                + untimed)

    @property
    def trace_path(self) -> Path:
        return self.work_dir / TRACE_FILE


def _drop_unnamed_handlers() -> None:
    """tune_tir lists its logger's handlers by name in a logging dictConfig; a handler without a
    name there (seen under pytest, on the second tune in a process) makes TVM 0.27 raise."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in [h for h in logger.handlers if h.get_name() is None]:
        logger.removeHandler(handler)


def _search(spec: GemmSpec, settings: TuneSettings, work_dir: Path, builder: Any, runner: Any) -> Any:
    import tvm.s_tir.meta_schedule as ms

    _drop_unnamed_handlers()
    return ms.tune_tir(
        module(gemm(spec)), cuda_target(settings.arch), str(work_dir), max_trials_global=settings.trials,
        num_trials_per_iter=min(settings.trials_per_iter, settings.trials), builder=builder, runner=runner,
        database="json", cost_model=settings.cost_model or default_cost_model(), strategy=settings.strategy,
        space=_space(settings.space), seed=settings.seed,
        # Given as a number, MetaSchedule does not ask psutil for the physical core count; with
        # our builder and runner it needs neither psutil nor cloudpickle (its process pools).
        num_tuning_cores=os.cpu_count() or 1,
    )


def _space(name: str) -> Any:
    import tvm.s_tir.meta_schedule as ms

    if name == "auto":
        return "post-order-apply"
    # Not the bare function: tune_tir wraps a callable with no postprocessors and no mutators,
    # which would leave the cooperative-fetch annotations unapplied and never mutate the tiles.
    # ScheduleFn's defaults take both from the target (CUDA).
    return ms.space_generator.ScheduleFn(manual_space)


def tune(spec: GemmSpec, work_dir: Path, settings: TuneSettings, builder: Any = None,
         runner: Any = None) -> TuneResult:
    """Search `settings.space` for `spec`; measure through gemmtune unless builder/runner are given."""
    from ..device import gpu_available
    from .measure import make_builder, make_runner

    own_runner, own_builder = runner is None, builder is None
    if own_runner and not gpu_available():
        raise NoDeviceError("MetaSchedule measures its candidates on a GPU, and none is available")
    work_dir.mkdir(parents=True, exist_ok=True)
    builder = builder or make_builder(spec, settings.arch, work_dir / "artifacts")
    runner = runner or make_runner(spec)
    started = time.perf_counter()
    try:
        database = _search(spec, settings, work_dir, builder, runner)
    finally:
        # Read before close(): closing the runner drops its bench and with it these figures.
        measured = hasattr(runner, "phase_seconds")  # a GemmtuneRunner (tests may pass their own)
        phases = {f"measure: {k}": v for k, v in runner.phase_seconds().items()} if measured else {}
        untimed = runner.untimed() if measured else 0
        if own_runner:
            runner.close()
        if own_builder:
            builder.close()
    seconds = {"total": time.perf_counter() - started}
    for name, part in (("build", builder), ("measure", runner)):
        if isinstance(getattr(part, "seconds", None), float):
            seconds[name] = part.seconds
    seconds.update(phases)
    best = best_schedule(database, spec, settings.arch)
    result = TuneResult(spec, settings, work_dir, best, trace_function(best, spec), seconds, untimed)
    save_trace(result.trace_path, result.trace_text)
    return result


def best_schedule(database: Any, spec: GemmSpec, arch: str = "sm_90") -> Any:
    """The best measured schedule for `spec` in a MetaSchedule database, as it was measured."""
    from tvm.s_tir.meta_schedule.tir_integration import compile_tir

    sch = compile_tir(database, module(gemm(spec)), cuda_target(arch))
    if sch is None:
        raise GemmtuneError(f"the tuning database holds no valid measured schedule for {spec.short()}")
    return sch


def open_database(work_dir: Path) -> Any:
    """The JSON database a tune wrote into `work_dir`."""
    import tvm.s_tir.meta_schedule as ms

    if not (work_dir / "database_tuning_record.json").exists():
        raise GemmtuneError(f"no MetaSchedule database in {work_dir} (run a tune with --work-dir {work_dir})")
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def _records(work_dir: Path) -> list[str]:
    """The JSON lines of a work dir's tuning records, in the order MetaSchedule measured them."""
    path = work_dir / "database_tuning_record.json"
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def trial_count(work_dir: Path) -> int:
    """Measured trials in a work dir's database (0 when there is none)."""
    return len(_records(work_dir))


def best_of_first(work_dir: Path, spec: GemmSpec, trials: int, arch: str = "sm_90") -> Any:
    """The best schedule among the first `trials` records of a work dir's database: the search's
    answer after that many trials (records are appended in the order they were measured)."""
    import tempfile

    import tvm.s_tir.meta_schedule as ms

    lines = _records(work_dir)
    if len(lines) < trials:
        raise GemmtuneError(f"{work_dir} holds {len(lines)} trials, fewer than {trials}")
    with tempfile.TemporaryDirectory() as prefix:
        workloads = work_dir / "database_workload.json"
        if workloads.exists():
            (Path(prefix) / "database_workload.json").write_text(workloads.read_text())
        else:  # the one workload of a gemmtune tune: its records all point at index 0
            ms.database.JSONDatabase(work_dir=prefix).commit_workload(module(gemm(spec)))
        (Path(prefix) / "database_tuning_record.json").write_text("\n".join(lines[:trials]) + "\n")
        return best_schedule(ms.database.JSONDatabase(work_dir=prefix), spec, arch)


# --- traces ----------------------------------------------------------------------------------
def trace_function(sch: Any, spec: GemmSpec) -> str:
    """The schedule's trace as a self-contained Python `apply_trace(sch)` function."""
    body = str(sch.trace).replace("# from tvm import s_tir", "from tvm import s_tir")
    header = (f"# The tuned TVM schedule of {spec.short()} (gemmtune). Re-apply with:\n"
              f"#   sch = tvm.s_tir.Schedule(gemmtune.tvm.workloads.module(gemmtune.tvm.workloads.gemm(spec)))\n"
              f"#   apply_trace(sch)\n")
    return header + body + "\n"


def save_trace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def load_trace(text: str) -> Callable[[Any], None]:
    """The `apply_trace` function defined by a saved trace."""
    namespace: dict[str, Any] = {}
    exec(compile(text, "<apply_trace>", "exec"), namespace)  # noqa: S102 - our own saved trace
    if not callable(namespace.get("apply_trace")):
        raise ConfigError("the trace file defines no apply_trace(sch) function")
    return namespace["apply_trace"]


def apply_trace_text(spec: GemmSpec, text: str) -> Any:
    """A fresh schedule of `spec`'s workload with the saved trace applied."""
    import tvm

    sch = tvm.s_tir.Schedule(module(gemm(spec)))
    load_trace(text)(sch)
    return sch


# --- dlight ------------------------------------------------------------------------------------
def dlight_module(spec: GemmSpec, arch: str = "sm_90") -> Any:
    """TVM's default GPU schedule (dlight rules, first match wins; Fallback binds anything left)."""
    from tvm.s_tir import dlight as dl

    rules = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                    dl.gpu.GeneralReduction(), dl.gpu.Fallback())
    with cuda_target(arch):  # dlight reads the target from the scope
        return rules(module(gemm(spec)))
