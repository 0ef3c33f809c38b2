"""Seeds outside the search space, measured before the strategy's own asks.

The chooser may hand a shape a config the tuner's space cannot hold: a tile width fitted to N
(chooser.candidates.fitted_twin), whose widths depend on the shape while the space's domains do not.
Leaving such a seed out would let a tuned run end slower than the untuned pick it started from, so
`OutsideSeeds` asks them first and tells the inner strategy everything (it ignores configs it has no
position for). A resumed run skips those already measured.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..trial import TrialResult
from .base import Strategy


class OutsideSeeds:
    def __init__(self, inner: Strategy, seeds: Sequence[Any]):
        self.inner = inner
        self.name = inner.name
        self.pending = list(dict.fromkeys(seeds))

    def ask(self, n: int) -> list[Any]:
        first, self.pending = self.pending[:n], self.pending[n:]
        return first + (self.inner.ask(n - len(first)) if n > len(first) else [])

    def tell(self, results: Sequence[TrialResult]) -> None:
        told = {r.config for r in results}
        self.pending = [c for c in self.pending if c not in told]
        self.inner.tell(results)


def with_outside_seeds(strategy: Strategy, seeds: Sequence[Any]) -> Strategy:
    return OutsideSeeds(strategy, seeds) if seeds else strategy
