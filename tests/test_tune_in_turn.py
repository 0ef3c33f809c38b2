"""The tuner's last word: its leaders and the chooser's pick timed in turn (tuner.compare_in_turn), so a
config that was lucky in a one-by-one measurement (the GPU's clock drifts under its power limit between
them) does not win over the untuned pick; where the runner cannot time in turn, one by one as before."""
from __future__ import annotations

from pathlib import Path

from gemmtune.chooser import choose
from gemmtune.compiler import nvrtc_version
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.trial import Environment, Status, TrialResult, TuneContext
from gemmtune.tune.tuner import IN_TURN_ROUNDS, TuneOptions, tune

H200 = Environment("NVIDIA H200", "9.0", 132, "sm_90a", "13.0", nvrtc_version())
SPEC = GemmSpec(4096, 13824, 5120, "nt", "bf16")
DRIFT = [1.0 + 0.01 * (i % 7) for i in range(IN_TURN_ROUNDS)]  # the clock, round by round


class DriftingRunner:
    """One by one, `lucky` measures 5% faster than the chooser's pick; timed in turn it is 4% slower."""

    environment = H200

    def __init__(self, lucky: dict[int, float] | None = None, in_turn: bool = True):
        self.pick = choose(SPEC, "sm_90a", 132).config
        self.order, self.lucky, self.can = [], lucky or {1: 0.95e-3}, in_turn
        self.batches, self.one_by_one = [], []

    def restrict(self, candidates):
        return candidates

    def search_s(self, config) -> float:
        if config == self.pick:
            return 1.0e-3
        rank = self.order.index(config)
        return self.lucky.get(rank, 1.0e-3 + 1e-6 * rank)

    def in_turn_s(self, config) -> float:
        return 1.0e-3 if config == self.pick else 1.04e-3 if self.search_s(config) < 1e-3 else 1.1e-3

    def run(self, configs):
        for config in configs:
            self.order.append(config)
            yield TrialResult(config, Status.OK, self.search_s(config), (self.search_s(config),))

    def remeasure(self, configs):
        self.one_by_one += list(configs)
        return [TrialResult(c, Status.OK, self.search_s(c), ()) for c in configs]

    def time_in_turn(self, configs, rounds):
        if not self.can:
            return None
        self.batches.append(list(configs))
        return {c: tuple(self.in_turn_s(c) * d for d in DRIFT[:rounds]) for c in configs}

    def close(self):
        pass


def _tune(tmp_path: Path, runner: DriftingRunner, top: int = 3):
    options = TuneOptions(trials=8, remeasure_top=top, strategy="random", family="wgmma")
    db = TuningDB(tmp_path / "t.sqlite")
    return db, tune(SPEC, runner, db, options)


def test_the_lucky_leader_loses_to_the_chooser_pick_when_timed_in_turn(tmp_path: Path):
    runner = DriftingRunner()
    db, outcome = _tune(tmp_path, runner)
    assert runner.order[0] == runner.pick and not runner.one_by_one
    assert runner.batches == [[runner.pick, runner.order[1], runner.order[2]]]  # the pick ranks 2nd one by one
    assert outcome.best.config == runner.pick and abs(outcome.best.median_s - 1.0e-3) < 1e-12
    lucky = runner.order[1]
    context = TuneContext(SPEC, H200, "wgmma", outcome.context.family_version)
    again = {r.config: r for r in db.results(context, phase="remeasure")}
    assert abs(again[lucky].median_s - 1.04e-3) < 1e-12  # its ratio to the pick, on the pick's search scale
    assert len(again[lucky].samples_s) == IN_TURN_ROUNDS


def test_a_config_that_rises_first_uncompared_is_compared_too(tmp_path: Path):
    # Two lucky ones; only the first is a leader (top 1). Timed in turn it falls to 1.1 ms on the pick's scale,
    # which puts the second (0.97 ms one by one, never compared) first: it is compared with the pick next.
    runner = DriftingRunner(lucky={1: 0.95e-3, 2: 0.97e-3})
    runner.in_turn_s = lambda c: 1.0e-3 if c == runner.pick else 1.1e-3  # noqa: E731
    db, outcome = _tune(tmp_path, runner, top=1)
    assert runner.batches == [[runner.pick, runner.order[1]], [runner.pick, runner.order[2]]]
    assert outcome.best.config == runner.pick


def test_without_timing_in_turn_the_leaders_are_measured_one_by_one(tmp_path: Path):
    runner = DriftingRunner(in_turn=False)
    db, outcome = _tune(tmp_path, runner)
    assert len(runner.one_by_one) == 3 and outcome.best.config == runner.order[1]


def test_a_time_budget_stops_the_search_inside_a_batch(tmp_path: Path, monkeypatch):
    """--time: the deadline is checked after every trial, not only between batches (a batch of a large shape's
    trials took 10-20 s); the batch's rest is not measured."""
    import gemmtune.tune.tuner as tuner

    clock = [0.0]
    monkeypatch.setattr(tuner.time, "monotonic", lambda: clock[0])
    runner = DriftingRunner(in_turn=False)
    measured = runner.run

    def run(configs):
        for result in measured(configs):
            clock[0] += 10.0  # each trial takes 10 s
            yield result
    runner.run = run
    options = TuneOptions(time_s=25.0, batch=8, remeasure_top=0, strategy="random", family="wgmma")
    with TuningDB(tmp_path / "t.sqlite") as db:
        outcome = tune(SPEC, runner, db, options)
    assert outcome.new_trials == 3 and outcome.stop_reason == "time budget reached"


def test_slow_leaders_are_timed_in_fewer_rounds(tmp_path: Path):
    """Rounds in turn are cut to IN_TURN_BUDGET_S of kernel time (not below IN_TURN_MIN_ROUNDS): a tune of
    second-long kernels does not spend minutes, or the measuring child's timeout, on its last word."""
    from gemmtune.tune.tuner import IN_TURN_MIN_ROUNDS

    runner = DriftingRunner()
    asked = []
    timed = runner.time_in_turn
    runner.time_in_turn = lambda configs, rounds: asked.append(rounds) or timed(configs, rounds)  # noqa: E731
    search_s = runner.search_s
    runner.search_s = lambda config: 1000 * search_s(config)  # ~1 s kernels
    _tune(tmp_path, runner)
    assert asked == [IN_TURN_MIN_ROUNDS]
