"""Evolutionary search guided by a learned cost model (after TVM MetaSchedule's evolutionary search).

Each ask: refit the boosted-tree model on every result so far; breed offspring from the fastest
measured configs (mutation of one or two parameters, uniform crossover) for a few generations,
using the model's predicted time as fitness; then hand out the offspring the model likes best, plus
a few random candidates so the model keeps learning about regions it has not seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..cost_model import BoostingParams, CostModel
from ..space import CandidateSet
from .base import SearchBase


@dataclass(frozen=True)
class EvolutionParams:
    initial: int = 16  # measurements (seeded or random) before the model is trusted
    elite: int = 8  # fastest measured configs that parent the first generation
    population: int = 64  # offspring kept per generation, by predicted time
    children: int = 256  # offspring bred per generation, before dropping invalid or spent ones
    generations: int = 3
    random_pool: int = 256  # random unspent configs scored beside the offspring
    explore: float = 0.15  # share of each batch drawn at random
    failure_penalty: float = math.log(4.0)  # failed configs count as 4x slower than the slowest success


class EvolutionarySearch(SearchBase):
    name = "evolutionary"

    def __init__(self, candidates: CandidateSet, seed: int = 0, seeds: Sequence[Any] = (), sm_count: int | None = None,
                 params: EvolutionParams = EvolutionParams(), boosting: BoostingParams = BoostingParams()):
        super().__init__(candidates, seed, seeds)
        self.params = params
        self.model = CostModel(candidates, sm_count, boosting, seed)
        self.genes = candidates.domain_indices
        self.sizes = np.asarray(candidates.space.shape)
        self.mutable = np.flatnonzero(self.sizes > 1)
        self.fitted_on = -1

    def ask(self, n: int) -> list[Any]:
        chosen = self.take_seeds(n)
        wanted = n - len(chosen)
        if wanted > 0 and self._trained():
            explore = int(round(self.params.explore * wanted))
            chosen += self.spend(self._predicted_best(wanted - explore).tolist())
        chosen += self.spend(self._random(n - len(chosen)).tolist())
        return self.candidates.configs(chosen)

    # --- the model ------------------------------------------------------------------------------
    def _trained(self) -> bool:
        """Refit when results arrived since the last fit; False while there is too little to learn."""
        good = [t for t in self.observed.values() if t is not None]
        if len(self.observed) < self.params.initial or len(good) < 2:
            return False
        if self.fitted_on != len(self.observed):
            positions = np.fromiter(self.observed, dtype=np.int64)
            worst = math.log(max(good)) + self.params.failure_penalty
            target = np.array([math.log(t) if t is not None else worst for t in self.observed.values()])
            self.model.fit(positions, target)
            self.fitted_on = len(self.observed)
        return True

    def _predicted_best(self, n: int) -> np.ndarray:
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        pool = np.union1d(self._evolve(), self._random_sample(self.params.random_pool))
        if pool.size == 0:
            return pool
        return pool[np.argsort(self.model.predict(pool), kind="stable")[:n]]

    # --- breeding -------------------------------------------------------------------------------
    def _elite(self) -> np.ndarray:
        good = sorted((t, p) for p, t in self.observed.items() if t is not None)
        return np.asarray([p for _, p in good[: self.params.elite]], dtype=np.int64)

    def _evolve(self) -> np.ndarray:
        parents, seen = self._elite(), np.zeros(0, dtype=np.int64)
        for _ in range(self.params.generations):
            kids = np.setdiff1d(self._offspring(parents), seen)
            if kids.size == 0:
                break
            seen = np.union1d(seen, kids)
            best = kids[np.argsort(self.model.predict(kids), kind="stable")[: self.params.population]]
            parents = np.union1d(self._elite(), best)
        return seen

    def _offspring(self, parents: np.ndarray) -> np.ndarray:
        """Unspent valid positions bred from `parents`: half mutants, half crossovers."""
        count = self.params.children
        genes = self.genes[parents[self.rng.integers(len(parents), size=count)]].copy()
        mates = self.genes[parents[self.rng.integers(len(parents), size=count)]]
        crossing = self.rng.random(count) < 0.5
        swap = crossing[:, None] & (self.rng.random(genes.shape) < 0.5)
        genes[swap] = mates[swap]
        mutants = genes[~crossing]
        self._mutate(mutants)
        genes[~crossing] = mutants
        codes = np.ravel_multi_index(tuple(genes.T), tuple(self.sizes))
        positions = self.candidates.positions_of_codes(codes)
        positions = positions[positions >= 0]
        return np.unique(positions[~self.spent[positions]])

    def _mutate(self, genes: np.ndarray) -> None:
        """Change one parameter of each row (a second with probability 1/2): a neighbour value or any."""
        for extra in (False, True):
            rows = np.arange(len(genes)) if not extra else np.flatnonzero(self.rng.random(len(genes)) < 0.5)
            axes = self.mutable[self.rng.integers(len(self.mutable), size=rows.size)]
            step = self.rng.choice([-1, 1], size=rows.size)
            jump = self.rng.integers(self.sizes[axes])
            near = np.clip(genes[rows, axes] + step, 0, self.sizes[axes] - 1)
            genes[rows, axes] = np.where(self.rng.random(rows.size) < 0.6, near, jump)

    # --- random picks ---------------------------------------------------------------------------
    def _random_sample(self, n: int) -> np.ndarray:
        free = self.unspent()
        return free if free.size <= n else self.rng.choice(free, size=n, replace=False)

    def _random(self, n: int) -> np.ndarray:
        return self._random_sample(n) if n > 0 else np.zeros(0, dtype=np.int64)
