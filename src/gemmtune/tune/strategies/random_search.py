"""Random search: candidates in one seeded random order (seeds first).

The order is fixed by the seed alone, so a resumed run continues the same permutation and any
prefix of it is a uniform sample of the space.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..space import CandidateSet
from .base import SearchBase


class RandomSearch(SearchBase):
    name = "random"

    def __init__(self, candidates: CandidateSet, seed: int = 0, seeds: Sequence[Any] = ()):
        super().__init__(candidates, seed, seeds)
        self.order = self.rng.permutation(len(candidates))
        self.cursor = 0

    def ask(self, n: int) -> list[Any]:
        chosen = self.take_seeds(n)
        while len(chosen) < n and self.cursor < len(self.order):
            position = int(self.order[self.cursor])
            self.cursor += 1
            if not self.spent[position]:
                chosen += self.spend([position])
        return self.candidates.configs(chosen)
