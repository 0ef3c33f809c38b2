"""Chooser picks the tuner's space cannot hold (tile widths fitted to N) are measured first all the same,
so a tuned run never ends slower than the untuned pick it started from; a resumed run skips them."""
from __future__ import annotations

from pathlib import Path

from gemmtune.compiler import nvrtc_version
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.strategies.outside import OutsideSeeds, with_outside_seeds
from gemmtune.tune.trial import Environment, Status, TrialResult
from gemmtune.tune.tuner import TuneOptions, tune

H100 = Environment("NVIDIA H100 80GB HBM3", "9.0", 132, "sm_90a", "12.8", nvrtc_version())
SPEC = GemmSpec(5000, 300, 2048, "nt", "tf32")  # the chooser's pick: 128x104 tiles (fitted to N)


class ListStrategy:
    name = "list"

    def __init__(self, configs):
        self.configs, self.told = list(configs), []

    def ask(self, n):
        first, self.configs = self.configs[:n], self.configs[n:]
        return first

    def tell(self, results):
        self.told += [r.config for r in results]


def result(config, seconds=1e-3):
    return TrialResult(config, Status.OK, seconds, (seconds,))


def test_outside_seeds_come_first_and_everything_is_told_to_the_inner_strategy():
    inner = ListStrategy(["a", "b", "c"])
    strategy = OutsideSeeds(inner, ["x", "y", "x"])
    assert strategy.ask(1) == ["x"]
    assert strategy.ask(3) == ["y", "a", "b"]
    strategy.tell([result(c) for c in ("x", "y", "a", "b")])
    assert inner.told == ["x", "y", "a", "b"] and strategy.ask(4) == ["c"]


def test_a_seed_told_before_it_is_asked_is_not_asked():
    strategy = OutsideSeeds(ListStrategy(["a"]), ["x", "y"])
    strategy.tell([result("x")])  # a resumed run's earlier trials
    assert strategy.ask(4) == ["y", "a"]
    assert with_outside_seeds(strategy.inner, []) is strategy.inner


def test_each_new_leader_queues_its_twin_next():
    inner = ListStrategy(["a", "b", "c", "d"])
    strategy = OutsideSeeds(inner, [], follow=lambda c: c.upper() if c in "ab" else None)
    assert strategy.ask(2) == ["a", "b"]
    strategy.tell([result("a", 2e-3), result("b", 3e-3)])  # b is no leader: its twin is not asked
    assert strategy.ask(2) == ["A", "c"]
    strategy.tell([result("A", 1e-3), result("c", 1e-3)])  # c ties A: no new leader
    assert strategy.ask(4) == ["d"]


class RecordingRunner:
    """Measures nothing: every config 'runs' in a time that favours narrow tiles."""

    environment = H100

    def __init__(self):
        self.measured = []

    def restrict(self, candidates):
        return candidates

    def run(self, configs):
        for config in configs:
            self.measured.append(config)
            yield result(config, 1e-5 * config.bn / 64)

    def remeasure(self, configs):
        return self.run(configs)

    def close(self):
        pass


def test_tune_measures_the_fitted_pick_first_and_not_again_on_resume(tmp_path: Path):
    from gemmtune.chooser import choose

    pick = choose(SPEC, "sm_90a", 132)
    assert pick.fitted_from and candidate_set(space_for("wgmma"), SPEC, "sm_90a").position_of(pick.config) is None
    options = TuneOptions(trials=6, remeasure_top=0, strategy="random", family="wgmma")
    with TuningDB(tmp_path / "t.sqlite") as db:
        runner = RecordingRunner()
        tune(SPEC, runner, db, options)
        assert runner.measured[0] == pick.config
        assert pick.config.bn == 104  # and the 128x128 leaders' twins were measured as they led
        again = RecordingRunner()
        tune(SPEC, again, db, TuneOptions(trials=12, remeasure_top=0, strategy="random", family="wgmma"))
        assert pick.config not in again.measured and len(again.measured) == 6
