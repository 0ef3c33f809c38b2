"""Configs outside the search space, measured beside the strategy's own asks.

The chooser may hand a shape a config the tuner's space cannot hold: a tile width fitted to N
(chooser.candidates.fitted_twin), whose widths depend on the shape while the space's domains do not.
Leaving such a seed out would let a tuned run end slower than the untuned pick it started from, so
`OutsideSeeds` asks them first. With `follow` (config -> its twin outside the space, or None), each
trial that beats every one before it also queues its twin, to be asked next: the search's leaders get
their widths fitted too. The inner strategy is told everything (it ignores configs it has no position
for); a config already told is never asked, so a resumed run skips what it measured before.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..trial import TrialResult
from .base import Strategy

Follow = Callable[[Any], Any]


class OutsideSeeds:
    def __init__(self, inner: Strategy, seeds: Sequence[Any], follow: Follow | None = None):
        self.inner = inner
        self.name = inner.name
        self.pending = list(dict.fromkeys(seeds))
        self.follow = follow
        self.told: set = set()
        self.best_s: float | None = None

    def ask(self, n: int) -> list[Any]:
        self.pending = [c for c in self.pending if c not in self.told]
        first, self.pending = self.pending[:n], self.pending[n:]
        self.told.update(first)  # asked: never asked again, whatever comes back
        return first + (self.inner.ask(n - len(first)) if n > len(first) else [])

    def tell(self, results: Sequence[TrialResult]) -> None:
        for result in results:
            self.told.add(result.config)
            if not result.ok or (self.best_s is not None and result.median_s >= self.best_s):
                continue
            self.best_s = result.median_s
            twin = self.follow(result.config) if self.follow is not None else None
            if twin is not None and twin not in self.told and twin not in self.pending:
                self.pending.insert(0, twin)
        self.inner.tell(results)


def with_outside_seeds(strategy: Strategy, seeds: Sequence[Any], follow: Follow | None = None) -> Strategy:
    return OutsideSeeds(strategy, seeds, follow) if seeds or follow is not None else strategy
