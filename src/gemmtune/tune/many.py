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


def budgets(workload: Workload, total_trials: int | None = None, total_time_s: float | None = None) -> list[ShapeBudget]:
    """Each shape's share of the trials and/or seconds (at least MIN_TRIALS trials, 1 s)."""
    shares = workload.shares()
    trials = ([max(MIN_TRIALS, round(t)) for t in workload.split(total_trials)] if total_trials is not None
              else [None] * len(shares))
    seconds = workload.split(total_time_s, floor=1.0) if total_time_s is not None else [None] * len(shares)
    return [ShapeBudget(shape, share, n, s) for shape, share, n, s in zip(workload.shapes, shares, trials, seconds)]


def family_of(spec: GemmSpec, arch: str, family: str | None) -> str:
    from ..kernels import family_for

    return family_for(spec, arch, family).name


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
        outcome = tune(spec, runner, db, shape_options, on_trial)
    except GemmtuneError as err:
        return ShapeOutcome(budget, family, None, str(err), time.monotonic() - started)
    finally:
        runner.close()
    return ShapeOutcome(budget, family, outcome, "", time.monotonic() - started)


def tune_many(workload: Workload, runner_for: RunnerFor, db: TuningDB, arch: str, options: TuneOptions,
              total_trials: int | None = None, total_time_s: float | None = None, family: str | None = None,
              on_shape: Callable[[ShapeBudget, str], None] | None = None,
              on_trial: Callable[[TuneProgress], None] | None = None) -> list[ShapeOutcome]:
    """Tune every shape of `workload` in turn, largest share first, under the split budget."""
    plan = sorted(budgets(workload, total_trials, total_time_s), key=lambda b: -b.share)
    outcomes = []
    for budget in plan:
        try:
            chosen = family_of(budget.shape.spec, arch, family)
        except GemmtuneError as err:
            outcomes.append(ShapeOutcome(budget, family or "-", None, str(err)))
            continue
        if on_shape is not None:
            on_shape(budget, chosen)
        outcomes.append(tune_shape(budget, chosen, runner_for, db, options, on_trial))
    return outcomes
