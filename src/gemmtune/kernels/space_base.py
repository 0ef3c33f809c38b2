"""What a family declares about its search space: the parameters with their domains and the named
rules that prune them. Each family's ``space.py`` builds a SearchSpace from these; ``tune.space``
analyses it (rule tables broadcast over the grid, the valid configs). They live here, below both,
so that a family never imports the tuner and the tuner asks the registry for a family's space.

A config's code is its flat index in the grid (C order, last parameter fastest).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..spec import GemmSpec

Check = Callable[[Any, "GemmSpec", str], "str | None"]


@dataclass(frozen=True)
class Parameter:
    name: str
    domain: tuple


@dataclass(frozen=True)
class Rule:
    """A named predicate returning a reason when it rejects a config; `reads` is its footprint."""

    name: str
    reads: tuple[str, ...]
    check: Check
    structural: bool = False  # the space's own canonical-form rule, checked before the family's


@dataclass(frozen=True)
class SearchSpace:
    family: str
    version: str
    config_type: type
    params: tuple[Parameter, ...]
    rules: tuple[Rule, ...]  # structural rules first, then the family's constraints in their order

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(p.domain) for p in self.params)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def axis(self, name: str) -> int:
        return self.names.index(name)

    def config_at(self, indices: Sequence[int]) -> Any:
        values = {p.name: p.domain[int(i)] for p, i in zip(self.params, indices)}
        return self.config_type(**values)

    def code_of(self, config: Any) -> int | None:
        """Grid code of a config, or None when a value lies outside the domains."""
        indices = []
        for p in self.params:
            value = getattr(config, p.name)
            if value not in p.domain:
                return None
            indices.append(p.domain.index(value))
        return int(np.ravel_multi_index(tuple(indices), self.shape))


def fixed_defaults(config_type: type, domains: tuple[tuple[str, tuple], ...]) -> tuple[Parameter, ...]:
    """The tuned parameters, then every other config field pinned to its default (a domain of one),
    so the space names every field and a field the family adds later is not silently lost."""
    tuned = dict(domains)
    defaults = config_type()
    return tuple(Parameter(f.name, tuned.get(f.name, (getattr(defaults, f.name),))) for f in fields(config_type))
