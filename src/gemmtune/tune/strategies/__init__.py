"""Search strategies behind one small ask/tell interface.

    strategy = make_strategy("evolutionary", candidates, seed=0, seeds=transfer_configs)
    strategy.tell(previous_results)          # resume: these are never asked again
    while batch := strategy.ask(8):          # [] once the space is exhausted
        strategy.tell(measure(batch))

`ask` never returns a config twice, nor one already told. `seeds` (e.g. best configs of nearby
shapes) are asked first, in order, when they are candidates.
"""
from __future__ import annotations

from typing import Any, Sequence

from ...errors import ConfigError
from ..space import CandidateSet
from .base import SearchBase, Strategy
from .evolutionary import EvolutionarySearch
from .exhaustive import ExhaustiveSearch
from .random_search import RandomSearch

__all__ = ["STRATEGIES", "SearchBase", "Strategy", "make_strategy"]


def make_strategy(name: str, candidates: CandidateSet, seed: int = 0, seeds: Sequence[Any] = (),
                  sm_count: int | None = None) -> Strategy:
    """`sm_count`: the GPU's, for the evolutionary search's cost model (None: the arch table's for the
    candidates' arch)."""
    if name == "exhaustive":
        return ExhaustiveSearch(candidates, seed, seeds)
    if name == "random":
        return RandomSearch(candidates, seed, seeds)
    if name == "evolutionary":
        return EvolutionarySearch(candidates, seed, seeds, sm_count=sm_count)
    raise ConfigError(f"unknown strategy '{name}'; choose one of {', '.join(STRATEGIES)}")


STRATEGIES = ("exhaustive", "random", "evolutionary")
