"""Tuning a whole workload: every shape under a total budget split by its share of GEMM time.

The single-shape tuner (tuner.tune) stays the unit. Each shape gets its family (the registry's
pick for it, or the one asked for), its part of the budget, and a runner from `runner_for`: the GPU
pipeline, a replayed table, or a DaskRunner that spreads the shape's trials over a cluster
(tune/distributed.py). Shapes run one after another; every trial goes to the one database as it
comes back, so a rerun resumes where an interrupted run stopped.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import GemmtuneError
from ..spec import GemmSpec
from ..workload import Workload, WorkloadShape
from .db import TuningDB
from .trial import TrialResult, TuneContext
from .tuner import Runner, TuneOptions, TuneOutcome, TuneProgress, tune

RunnerFor = Callable[[GemmSpec, str], Runner]  # (spec, family) -> a runner for that shape
MIN_TRIALS = 4  # a shape with a tiny share still gets its chooser seeds measured


@dataclass(frozen=True)
class ShapeBudget:
    shape: WorkloadShape
    share: float
    trials: int | None
    time_s: float | None


@dataclass(frozen=True)
class ShapeOutcome:
    budget: ShapeBudget
    family: str
    outcome: TuneOutcome | None  # None when the shape could not be tuned
    error: str = ""
    wall_s: float = 0.0
    untuned: TrialResult | None = None  # the config gemmtune.build picks with no tuning database

    @property
    def tuned_s(self) -> float | None:
        best = self.outcome.best if self.outcome is not None else None
        return best.median_s if best is not None else None

    @property
    def untuned_s(self) -> float | None:
        return self.untuned.median_s if self.untuned is not None and self.untuned.ok else None


def budgets(workload: Workload, total_trials: int | None = None, total_time_s: float | None = None) -> list[ShapeBudget]:
    """Each shape's share of the trials and/or seconds (at least MIN_TRIALS trials, 1 s)."""
    shares = workload.shares()
    trials = ([max(MIN_TRIALS, round(t)) for t in workload.split(total_trials)] if total_trials is not None
              else [None] * len(shares))
    seconds = workload.split(total_time_s, floor=1.0) if total_time_s is not None else [None] * len(shares)
    return [ShapeBudget(shape, share, n, s) for shape, share, n, s in zip(workload.shapes, shares, trials, seconds)]


def overlapped_times(plan: list[ShapeBudget], total_time_s: float | None, at_once: int) -> list[ShapeBudget]:
    """With shapes tuned `at_once` at a time, a time budget is shared by that many at every moment:
    each shape's seconds scale by that many (never past the total), so the run still lasts about
    `total_time_s` instead of a fraction of it. Trial budgets need no change."""
    if total_time_s is None:
        return plan
    scale = min(at_once, len(plan))
    return [replace(b, time_s=min(total_time_s, b.time_s * scale)) for b in plan]


def family_of(spec: GemmSpec, arch: str, family: str | None) -> str:
    from ..kernels import family_for

    return family_for(spec, arch, family).name


def workload_families(workload: Workload, arch: str, family: str | None) -> list[tuple[str, GemmSpec]]:
    """(family, spec) of every shape some family runs (the others fail later, as their own outcome)."""
    found = []
    for shape in workload.shapes:
        try:
            found.append((family_of(shape.spec, arch, family), shape.spec))
        except GemmtuneError:
            continue
    return found


def tune_shape(budget: ShapeBudget, family: str, runner_for: RunnerFor, db: TuningDB, options: TuneOptions,
               on_trial: Callable[[TuneProgress], None] | None = None) -> ShapeOutcome:
    """One shape of the workload, its failure (a shape no family can run, a broken runner) a value."""
    spec, started = budget.shape.spec, time.monotonic()
    shape_options = replace(options, family=family, trials=budget.trials, time_s=budget.time_s)
    try:
        runner = runner_for(spec, family)
    except GemmtuneError as err:
        return ShapeOutcome(budget, family, None, str(err))
    try:
        untuned = untuned_trial(context_of(spec, family, runner), runner, db)  # measured first: the search knows it
        outcome = tune(spec, runner, db, shape_options, on_trial)
    except GemmtuneError as err:
        return ShapeOutcome(budget, family, None, str(err), time.monotonic() - started)
    finally:
        runner.close()
    return ShapeOutcome(budget, family, outcome, "", time.monotonic() - started, untuned)


def untuned_config(spec: GemmSpec, arch: str, family: str):
    """What gemmtune.build picks for `spec` with no tuning database: a shipped known config, the
    chooser's pick, else the family's default."""
    from ..export.config_source import NEAR_SHAPE, from_chooser, from_known_configs
    from ..kernels import get_family

    chosen = get_family(family)
    found = (from_known_configs(spec, arch, None, family=family, max_distance=NEAR_SHAPE)
             or from_chooser(spec, arch, None, chosen))
    return found.config if found is not None else chosen.default_config(spec, arch)


def context_of(spec: GemmSpec, family: str, runner: Runner) -> TuneContext:
    from .space import space_for

    space = space_for(family)
    return TuneContext(spec, runner.environment, space.family, space.version)


def untuned_trial(context: TuneContext, runner: Runner, db: TuningDB) -> TrialResult | None:
    """The untuned pick's trial: from the database when an earlier run measured it, else measured
    now and recorded (the search then starts from it, and the summary says what tuning gained)."""
    config = untuned_config(context.spec, context.environment.arch, context.family)
    for result in db.results(context):
        if result.config == config:
            return result
    result = next(iter(runner.run([config])), None)
    if result is not None:
        db.record(context, result)
    return result


def tune_many(workload: Workload, runner_for: RunnerFor, db: TuningDB, arch: str, options: TuneOptions,
              total_trials: int | None = None, total_time_s: float | None = None, family: str | None = None,
              on_shape: Callable[[ShapeBudget, str], Callable[[TuneProgress], None] | None] | None = None,
              shapes_at_once: int = 1, on_done: Callable[[ShapeOutcome], None] | None = None) -> list[ShapeOutcome]:
    """Tune every shape of `workload` under the split budget, largest share first; `on_shape` is told
    of each shape as it starts and may return its on_trial callback, `on_done` of each as it ends (so
    a caller that is interrupted still has the shapes already tuned).

    With shapes_at_once > 1 that many shapes are tuned at the same time, each from its own client
    thread and database connection (SQLite serialises the writes), so a cluster with more workers
    than one shape's batch has work for all of them. Seeding a shape from the shapes tuned before it
    (transfer) is then off: which shapes are done first would depend on timing, and a seeded run
    must ask the same configs every time."""
    plan = sorted(budgets(workload, total_trials, total_time_s), key=lambda b: -b.share)
    if shapes_at_once > 1:
        options = replace(options, transfer=False)
        plan = overlapped_times(plan, total_time_s, shapes_at_once)

    def tuned(budget: ShapeBudget) -> ShapeOutcome:
        try:
            chosen = family_of(budget.shape.spec, arch, family)
        except GemmtuneError as err:
            return ShapeOutcome(budget, family or "-", None, str(err))
        on_trial = on_shape(budget, chosen) if on_shape is not None else None
        if shapes_at_once == 1:
            return tune_shape(budget, chosen, runner_for, db, options, on_trial)
        with TuningDB(db.path) as own:
            return tune_shape(budget, chosen, runner_for, own, options, on_trial)

    def one(budget: ShapeBudget) -> ShapeOutcome:
        outcome = tuned(budget)
        if on_done is not None:
            on_done(outcome)
        return outcome

    if shapes_at_once == 1:
        return [one(budget) for budget in plan]
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(shapes_at_once)
    try:
        return list(pool.map(one, plan))
    finally:  # on an interrupt the shapes not started are dropped (a `with` would tune them all first)
        pool.shutdown(wait=False, cancel_futures=True)
