"""Exhaustive search: every candidate once, in the space's enumeration order (seeds first)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import SearchBase


class ExhaustiveSearch(SearchBase):
    name = "exhaustive"

    def ask(self, n: int) -> list[Any]:
        chosen = self.take_seeds(n)
        # Positions ascend in grid order, so the unspent ones in order are the enumeration order.
        rest = self.unspent()[: n - len(chosen)]
        chosen += self.spend(rest.tolist())
        return self.candidates.configs(np.asarray(chosen, dtype=np.int64))
