"""The tuning loop: ask the strategy, measure through a runner, record every trial, tell the results.

A runner is the GPU pipeline (tune.pipeline.MeasurePipeline) or the simulation runner; the loop is
the same. Trials already in the database for this context are told to the strategy first and never
measured again, so re-running an interrupted tune resumes it. `trials` is the total for the context,
counting the ones a previous run left.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median
from typing import Any, Callable, Iterable, Protocol, Sequence

from ..spec import GemmSpec
from .db import TuningDB
from .space import CandidateSet, candidate_set, space_for
from .strategies import Strategy, make_strategy
from .strategies.outside import with_outside_seeds
from .transfer import transfer_seeds
from .trial import Environment, Status, TrialResult, TuneContext


class Runner(Protocol):
    environment: Environment

    def restrict(self, candidates: CandidateSet) -> CandidateSet: ...

    def run(self, configs: Sequence[Any]) -> Iterable[TrialResult]: ...

    def remeasure(self, configs: Sequence[Any]) -> Iterable[TrialResult]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TuneOptions:
    family: str = "simt"
    strategy: str = "evolutionary"
    trials: int | None = None  # total for this context, counting trials already in the database
    time_s: float | None = None  # wall-clock budget of this run
    seed: int = 0
    batch: int = 8  # configs per ask: the model is refit between batches
    remeasure_top: int = 5
    transfer: bool = True
    chooser_seeds: int = 4  # the chooser's top picks measured first (0: none)
    twins: bool = True  # each new leader's twin of tile width fitted to N measured next (wgmma)
    # Ask the next batch before the current one is measured, so a runner that compiles (the GPU
    # pipeline's `prefetch`) compiles it while the GPU measures: the strategy then learns one
    # batch later. Off by default for one shape (the single-GPU pipeline's gain is unmeasured);
    # tune-many turns it on with a cluster (2 x H200, 2026-11-26: bench/results/2026-11-26-h200x2-tune-many-scaling.md).
    lookahead: bool = False
    # time.monotonic() when `time_s` began (the tune command's start, its set-up counted); None: the search's
    started: float | None = None


@dataclass(frozen=True)
class TuneProgress:
    done: int
    budget: int | None
    failures: int
    best: TrialResult | None
    last: TrialResult


@dataclass(frozen=True)
class TuneOutcome:
    context: TuneContext
    candidates: int
    trials: int
    new_trials: int
    failures: int
    top: tuple[TrialResult, ...]
    stop_reason: str

    @property
    def best(self) -> TrialResult | None:
        return self.top[0] if self.top else None


class Tally:
    """Running counts of a tune, the previous run's trials included."""

    def __init__(self, previous: Sequence[TrialResult], budget: int | None):
        self.done, self.new, self.budget = 0, 0, budget
        self.failures, self.best = 0, None
        for result in previous:
            self.add(result, new=False)

    def add(self, result: TrialResult, new: bool = True) -> None:
        self.done += 1
        self.new += int(new)
        self.failures += int(not result.ok)
        if result.ok and (self.best is None or result.median_s < self.best.median_s):
            self.best = result

    def progress(self, last: TrialResult) -> TuneProgress:
        return TuneProgress(self.done, self.budget, self.failures, self.best, last)


def chooser_seeds(spec: GemmSpec, environment, family: str, count: int) -> list:
    """The chooser's `count` best-predicted configs for the spec (the strategy keeps those in its space)."""
    if count <= 0:
        return []
    from ..chooser import rank

    return [p.config for p in rank(spec, environment.arch, environment.sm_count, family)[:count]]


def _twin_follower(spec: GemmSpec, measurable: Callable[[Any], bool]) -> Callable[[Any], Any]:
    """config -> its twin of tile width fitted to N (chooser.candidates.fitted_twin) where the runner
    can measure it, else None."""
    from ..chooser.candidates import fitted_twin

    def follow(config: Any) -> Any:
        twin = fitted_twin(spec, config)
        return twin if twin is not None and measurable(twin) else None
    return follow


def tune(spec: GemmSpec, runner: Runner, db: TuningDB, options: TuneOptions = TuneOptions(),
         on_trial: Callable[[TuneProgress], None] | None = None) -> TuneOutcome:
    space = space_for(options.family)
    space_set = candidate_set(space, spec, runner.environment.arch)
    candidates = runner.restrict(space_set)
    context = TuneContext(spec, runner.environment, space.family, space.version)
    previous = db.results(context)
    seeds = chooser_seeds(spec, runner.environment, space.family, options.chooser_seeds)
    seeds += transfer_seeds(db, context, candidates) if options.transfer else []
    strategy = make_strategy(options.strategy, candidates, options.seed, seeds, runner.environment.sm_count)
    # The chooser's picks the space cannot hold (widths fitted to N, split-K forms) are measured first
    # all the same, and each new leader's fitted twin next, where the runner can measure them (a
    # replay only knows its table's configs).
    measurable = getattr(runner, "measurable", lambda config: True)
    outside = [c for c in seeds if space_set.position_of(c) is None and measurable(c)]
    strategy = with_outside_seeds(strategy, outside, _twin_follower(spec, measurable) if options.twins else None)
    strategy.tell(previous)
    tally = Tally(previous, options.trials)
    reason = search(strategy, runner, db, context, options, tally, on_trial)
    reference = next((c for c in seeds[:1] if measurable(c)), None)  # the chooser's pick: the untuned kernel
    top = remeasure(runner, db, context, options.remeasure_top, again=tally.new > 0, reference=reference)
    return TuneOutcome(context, len(candidates), tally.done, tally.new, tally.failures, top, reason)


def search(strategy: Strategy, runner: Runner, db: TuningDB, context: TuneContext, options: TuneOptions,
           tally: Tally, on_trial: Callable[[TuneProgress], None] | None) -> str:
    """Run batches until a budget is spent or the strategy has nothing left; returns why it stopped."""
    begun = options.started if options.started is not None else time.monotonic()
    deadline = begun + options.time_s if options.time_s is not None else None
    queued: list = []  # with lookahead: the batch asked while the one before it was measured
    while True:
        if options.trials is not None and tally.done >= options.trials:
            return "trial budget reached"
        if deadline is not None and time.monotonic() >= deadline:
            return "time budget reached"
        configs = queued or strategy.ask(_wanted(options, tally.done))
        if not configs:
            return "search space exhausted"
        queued = _ask_ahead(strategy, runner, options, tally.done + len(configs)) if options.lookahead else []
        told = []
        for result in runner.run(configs):
            db.record(context, result)
            tally.add(result)
            told.append(result)
            if on_trial is not None:
                on_trial(tally.progress(result))
            if deadline is not None and time.monotonic() >= deadline:
                # Mid-batch: a batch of large shapes' trials takes 10-20 s, which `--time 60` overran by as
                # much (H200, 2026-11-29); the batch's rest is left unmeasured (a resumed tune asks again).
                break
        strategy.tell(told)


def _wanted(options: TuneOptions, done: int) -> int:
    return options.batch if options.trials is None else max(0, min(options.batch, options.trials - done))


def _ask_ahead(strategy: Strategy, runner: Runner, options: TuneOptions, done_after: int) -> list:
    """The next batch, asked now and handed to the runner's `prefetch` (when it has one) to compile
    while the current batch is measured; none past the trial budget."""
    wanted = _wanted(options, done_after)
    ahead = strategy.ask(wanted) if wanted else []
    prefetch = getattr(runner, "prefetch", None)
    if ahead and prefetch is not None:
        prefetch(ahead)
    return ahead


def remeasure(runner: Runner, db: TuningDB, context: TuneContext, count: int, again: bool = True,
              reference: Any = None) -> tuple[TrialResult, ...]:
    """Measure the fastest `count` again (a lucky sample should not win); best-first afterwards.
    Where the runner can time candidates in turn (compare_in_turn), they are timed so, beside
    `reference` (the chooser's pick); else one by one. With `again` False (a resumed tune that
    measured nothing new) leaders that were re-measured before are left alone: resuming a finished
    run measures nothing."""
    if count <= 0:
        return tuple(db.ranked(context, 5))
    done = set() if again else {r.config for r in db.results(context, phase="remeasure")}
    leaders = [r.config for r in db.ranked(context, count) if r.config not in done]
    if not leaders:
        return tuple(db.ranked(context, count))
    if not compare_in_turn(runner, db, context, leaders, reference):
        for result in runner.remeasure(leaders):
            db.record(context, result, phase="remeasure")
    return tuple(db.ranked(context, count))


# Rounds of the leaders' timing in turn: each round launches every leader once, L2 emptied before each;
# fewer (not below IN_TURN_MIN_ROUNDS) where slow kernels would take longer than IN_TURN_BUDGET_S.
IN_TURN_ROUNDS = 30
IN_TURN_MIN_ROUNDS = 5
IN_TURN_BUDGET_S = 10.0
IN_TURN_PASSES = 3  # the comparison again with a config that rose to first without being in one, at most


def compare_in_turn(runner: Runner, db: TuningDB, context: TuneContext, leaders: Sequence[Any],
                    reference: Any = None) -> bool:
    """The leaders and an anchor (`reference` where the search measured it, else the first leader) timed
    in turn (MeasurePipeline.time_in_turn), so that the clock drift between one-by-one measurements of
    long kernels under the GPU's power limit cannot rank them. H200, 2026-11-29
    (bench/results/2026-11-29-h200-tuned-60s.md): one by one, the 60-s tunes of three of the model suite's
    ten largest GEMMs ended 2.6-6.7% below the untuned pick; with this, tuned vs untuned geomean 1.008.
    Each is recorded as a remeasure: its median per-round time over the anchor's, times the anchor's
    median in the search, the scale every other trial stands on. A config that then ranks first without
    having been compared is compared with the anchor too (IN_TURN_PASSES). Returns False where the runner
    cannot time in turn or the timing failed (measure one by one)."""
    in_turn = getattr(runner, "time_in_turn", None)
    if in_turn is None:
        return False
    searched = {r.config: r for r in db.results(context) if r.ok}
    anchor = reference if reference in searched else leaders[0]
    compared: set = set()
    batch = list(dict.fromkeys([anchor, *leaders]))
    for _ in range(IN_TURN_PASSES):
        round_s = sum(searched[c].median_s for c in batch if c in searched)
        rounds = in_turn(batch, max(IN_TURN_MIN_ROUNDS, min(IN_TURN_ROUNDS, int(IN_TURN_BUDGET_S / max(round_s, 1e-9)))))
        if not rounds or anchor not in rounds:
            return bool(compared)
        for config in batch:
            db.record(context, _in_turn_result(config, rounds, anchor, searched), phase="remeasure")
        compared.update(batch)
        best = db.ranked(context, 1)
        if not best or best[0].config in compared:
            break
        batch = [anchor, best[0].config]
    return True


def _in_turn_result(config: Any, rounds: dict[Any, Sequence[float]], anchor: Any,
                    searched: dict[Any, TrialResult]) -> TrialResult:
    """One config's record from a timing in turn (as compare_in_turn says); a config the timing left out
    (wrong when checked, or not built) is a failed remeasure, so no winner."""
    times, found = rounds.get(config), searched.get(config)
    if times is None or found is None:
        return TrialResult(config, Status.VERIFY_ERROR, error="VerifyError: wrong or not built when timed in turn")
    ratio = median(t / a for t, a in zip(times, rounds[anchor]))
    return TrialResult(config, Status.OK, ratio * searched[anchor].median_s, tuple(times), found.compile_s,
                       found.resources, found.protocol)
