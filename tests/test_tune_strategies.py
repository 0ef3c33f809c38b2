"""Strategies against the simulation runner: the ask/tell contract, and whether the model helps.

The headline test: over 10 seeds, the model-guided evolutionary search reaches a config within 95%
of the best (time <= best / 0.95) in at most 25% of the evaluations exhaustive search needs (all of
them: it must measure every candidate to know the best), by the median; and on average it needs
fewer evaluations than random search. A deliberately bad strategy is shown to fail the same check.
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from gemmtune.spec import GemmSpec
from gemmtune.tune.simulation import SimulationRunner, SimulationTable, replay, trials_to_reach
from gemmtune.tune.space import CandidateSet, candidate_set, space_for
from gemmtune.tune.strategies import SearchBase, make_strategy
from gemmtune.tune.trial import Status, TrialResult
from test_tune_simulation import strategy_tables, synthetic_table

SEEDS = range(10)
SHARE_OF_EXHAUSTIVE = 0.25
WITHIN = 0.95


def setup(table: SimulationTable) -> tuple[SimulationRunner, CandidateSet]:
    runner = SimulationRunner(table)
    space = space_for(table.family)
    return runner, runner.restrict(candidate_set(space, table.spec, table.environment.arch))


def trials_needed(name: str, seed: int, table: SimulationTable, budget: int) -> int:
    """Evaluations until a config within 95% of the best; budget + 1 when it never got there."""
    runner, candidates = setup(table)
    target = table.best_s / WITHIN
    strategy = make_strategy(name, candidates, seed=seed, sm_count=table.environment.sm_count)
    reached = trials_to_reach(replay(strategy, runner, budget, target_s=target), target)
    return budget + 1 if reached is None else reached


def meets_budget(counts: list[int], budget: int) -> bool:
    return statistics.median(counts) <= budget


class SlowestFirst(SearchBase):
    """An adversary that knows the table and proposes the slowest configs first."""

    name = "slowest-first"

    def __init__(self, candidates: CandidateSet, table: SimulationTable):
        super().__init__(candidates)
        times = [table.rows[c].median_s or 0.0 for c in candidates.configs(range(len(candidates)))]
        self.order = list(np.argsort(times)[::-1])

    def ask(self, n: int) -> list:
        chosen = [int(p) for p in self.order if not self.spent[p]][:n]
        return self.candidates.configs(self.spend(chosen))


@pytest.fixture(scope="module", params=strategy_tables(), ids=lambda entry: entry[0])
def table(request: pytest.FixtureRequest) -> SimulationTable:
    return request.param[1]()


# A budget of a quarter of a table this small is fewer trials than the strategy spends learning the
# space (the mma table of 64 sampled rows: 16 trials); such tables are still replayed and loaded.
MIN_ROWS_FOR_THE_BUDGET_RACE = 200


def test_evolutionary_beats_the_exhaustive_budget_and_random(table: SimulationTable) -> None:
    if len(table.rows) < MIN_ROWS_FOR_THE_BUDGET_RACE:
        pytest.skip(f"{len(table.rows)} rows: a quarter of them is too small a budget to race strategies on")
    runner, candidates = setup(table)
    exhaustive = replay(make_strategy("exhaustive", candidates), runner, budget=len(candidates) + 1)
    assert len(exhaustive) == len(candidates)
    assert min(r.median_s for r in exhaustive if r.ok) == table.best_s
    budget = math.ceil(SHARE_OF_EXHAUSTIVE * len(exhaustive))
    evolutionary = [trials_needed("evolutionary", seed, table, budget) for seed in SEEDS]
    random = [trials_needed("random", seed, table, budget) for seed in SEEDS]
    report = f"budget {budget}: evolutionary {evolutionary}, random {random}"
    assert meets_budget(evolutionary, budget), report
    assert statistics.mean(evolutionary) < statistics.mean(random), report


def test_the_budget_check_can_fail() -> None:
    """The criterion is not vacuous: a strategy that proposes the slowest first fails it."""
    table = synthetic_table(GemmSpec(1024, 1024, 1024), rows=400, seed=2)
    runner, candidates = setup(table)
    budget = math.ceil(SHARE_OF_EXHAUSTIVE * len(candidates))
    target = table.best_s / WITHIN
    reached = trials_to_reach(replay(SlowestFirst(candidates, table), runner, budget, target_s=target), target)
    assert not meets_budget([budget + 1 if reached is None else reached] * len(SEEDS), budget)


# --- the ask/tell contract -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def small() -> tuple[SimulationTable, SimulationRunner, CandidateSet]:
    table = synthetic_table(GemmSpec(512, 512, 512), rows=150, seed=4)
    runner, candidates = setup(table)
    return table, runner, candidates


@pytest.mark.parametrize("name", ["exhaustive", "random", "evolutionary"])
def test_every_candidate_once_then_empty(name: str, small) -> None:
    table, runner, candidates = small
    results = replay(make_strategy(name, candidates, seed=1), runner, budget=10_000, batch=16)
    configs = [r.config for r in results]
    assert len(configs) == len(set(configs)) == len(candidates)
    strategy = make_strategy(name, candidates, seed=1)
    strategy.tell(results)
    assert strategy.ask(8) == []


@pytest.mark.parametrize("name", ["exhaustive", "random", "evolutionary"])
def test_told_configs_are_never_asked_and_seeds_come_first(name: str, small) -> None:
    table, runner, candidates = small
    everything = candidates.configs(range(len(candidates)))
    previous = list(runner.run(everything[:40]))
    seeds = [everything[-1], everything[0], everything[-2]]  # everything[0] was already measured
    strategy = make_strategy(name, candidates, seed=5, seeds=seeds)
    strategy.tell(previous)
    first = strategy.ask(2)
    assert first == [everything[-1], everything[-2]]
    later = replay(strategy, runner, budget=10_000)
    asked = first + [r.config for r in later]
    assert not set(asked) & set(everything[:40])
    assert len(asked) == len(set(asked)) == len(candidates) - 40


def test_unknown_configs_and_failures_are_told_safely(small) -> None:
    table, runner, candidates = small
    strategy = make_strategy("evolutionary", candidates, seed=0)
    outsider = space_for("simt").config_type(bm=256, bn=256, tm=16, tn=16)  # not a candidate
    failures = [TrialResult(c, Status.COMPILE_ERROR, error="x") for c in candidates.configs(range(20))]
    strategy.tell([TrialResult(outsider, Status.OK, 1e-3)] + failures)
    batch = strategy.ask(8)
    assert len(batch) == 8 and not set(batch) & {r.config for r in failures}


def test_random_order_depends_only_on_the_seed(small) -> None:
    table, runner, candidates = small
    one = make_strategy("random", candidates, seed=9).ask(30)
    two = make_strategy("random", candidates, seed=9).ask(30)
    other = make_strategy("random", candidates, seed=10).ask(30)
    assert one == two and one != other


def test_unknown_strategy_is_a_config_error(small) -> None:
    from gemmtune.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown strategy"):
        make_strategy("annealing", small[2])


# --- the tensor-core family's space ---------------------------------------------------------------
def _synthetic_wgmma_seconds(c, spec: GemmSpec) -> float:
    """A smooth made-up landscape over the wgmma parameters (wide tiles, deep rings, the TMA store and
    a persistent grid help; ping-pong costs): enough to check the search runs on this space."""
    rate = (700e12 * (c.bm * c.bn / (128 * 256)) ** 0.3 * (1 - 0.5 / c.stages) * (1.06 if c.tma_store else 1.0)
            * (1.1 if c.persistent else 1.0) * (0.9 if c.pingpong else 1.0) * (1 + 0.01 * c.group_m / 16))
    return spec.flops / rate


@pytest.mark.parametrize("name", ["random", "evolutionary"])
def test_strategies_search_the_wgmma_space(name: str) -> None:
    """The tuner's strategies and cost model take the wgmma family's space (bool and int parameters,
    its constraints): distinct valid candidates, and the model-guided search finds the best of a
    smooth landscape within 150 of its 1,700 candidates."""
    from test_tune_simulation import SYNTHETIC_ENV

    from gemmtune.tune.simulation import TableRow

    spec = GemmSpec(1024, 1024, 1024, "nt", "bf16")
    space = space_for("wgmma")
    valid = candidate_set(space, spec, SYNTHETIC_ENV.arch)
    rows = {c: TableRow(Status.OK, _synthetic_wgmma_seconds(c, spec)) for c in valid.configs(range(len(valid)))}
    table = SimulationTable("wgmma", space.version, spec, SYNTHETIC_ENV, rows, {"source": "synthetic"})
    runner = SimulationRunner(table)
    candidates = runner.restrict(candidate_set(space, spec, SYNTHETIC_ENV.arch))
    assert len(candidates) > 1000
    results = replay(make_strategy(name, candidates, seed=0, sm_count=132), runner, 150, batch=16)
    configs = [r.config for r in results]
    assert len(configs) == len(set(configs)) == 150
    assert all(c in rows for c in configs)  # only valid candidates are asked
    if name == "evolutionary":
        assert min(r.median_s for r in results) == table.best_s
