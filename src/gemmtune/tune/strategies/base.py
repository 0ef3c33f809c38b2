"""The ask/tell interface every strategy offers, and the bookkeeping they share (seeds first, no
config asked twice). The strategies import this module, never their package, whose make_strategy
imports them."""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from ..space import CandidateSet
from ..trial import TrialResult


class Strategy(Protocol):
    name: str

    def ask(self, n: int) -> list[Any]: ...

    def tell(self, results: Sequence[TrialResult]) -> None: ...


class SearchBase:
    """Bookkeeping shared by the strategies: which positions are spent, seeds first, results seen."""

    name = "base"

    def __init__(self, candidates: CandidateSet, seed: int = 0, seeds: Sequence[Any] = ()):
        self.candidates = candidates
        self.rng = np.random.default_rng(seed)
        self.spent = np.zeros(len(candidates), dtype=bool)
        positions = (candidates.position_of(c) for c in seeds)
        self.pending_seeds = list(dict.fromkeys(p for p in positions if p is not None))
        self.observed: dict[int, float | None] = {}  # position -> median seconds, None when failed

    def tell(self, results: Sequence[TrialResult]) -> None:
        for result in results:
            position = self.candidates.position_of(result.config)
            if position is not None:
                self.spent[position] = True
                self.observed[position] = result.median_s if result.ok else None

    def take_seeds(self, n: int) -> list[int]:
        chosen = []
        while self.pending_seeds and len(chosen) < n:
            position = self.pending_seeds.pop(0)
            if not self.spent[position]:
                chosen.append(position)
        return self.spend(chosen)

    def spend(self, positions: Sequence[int]) -> list[int]:
        self.spent[np.asarray(positions, dtype=np.int64)] = True
        return list(positions)

    def unspent(self) -> np.ndarray:
        return np.flatnonzero(~self.spent)
