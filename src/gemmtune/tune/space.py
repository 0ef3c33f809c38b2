"""Search spaces: each family's parameters with their domains, and the rules that prune them.

The declarations (Parameter, Rule, SearchSpace, fixed_defaults) live in ``kernels.space_base``, so
a family's ``space.py`` never imports the tuner; this module analyses them.

The simt space has about two million raw combinations; running the Python predicates on each takes
~10 s. So every rule declares the parameters it reads (its footprint), runs once per combination of
those parameters only, and numpy broadcasts the verdicts over the whole grid. A test checks each
footprint against direct evaluation on random configs.

A config's code is its flat index in the grid (C order, last parameter fastest), so a set of valid
configs is a sorted int64 array and membership is a binary search.
"""
from __future__ import annotations

import functools
import itertools
from concurrent.futures import Future
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from ..kernels import get_family
# The declarations (parameters, rules, the space) are the families' vocabulary, defined below them
# in kernels.space_base; they are named here too, beside the analysis that reads them.
from ..kernels.space_base import Check, Parameter, Rule, SearchSpace, fixed_defaults
from ..spec import GemmSpec

__all__ = ["Analysis", "CandidateSet", "Check", "Parameter", "Rule", "RuleCount", "SearchSpace", "SpaceReport",
           "analyze", "candidate_set", "first_failing", "fixed_defaults", "forget", "prime", "space_for",
           "valid_codes", "verdict"]


# --- rule tables and the rejection report --------------------------------------------------------
@dataclass(frozen=True)
class RuleCount:
    name: str
    first: int  # configs for which this is the first failing rule
    any: int  # configs this rule rejects (among those passing the structural rules)
    example: str
    structural: bool


@dataclass(frozen=True)
class SpaceReport:
    family: str
    spec: GemmSpec
    arch: str
    total: int
    valid: int
    counts: tuple[RuleCount, ...]


def _rule_table(space: SearchSpace, rule: Rule, spec: GemmSpec, arch: str) -> tuple[np.ndarray, str]:
    """Boolean 'rejects' over the rule's footprint, shaped to broadcast against the full grid."""
    axes = sorted(space.axis(name) for name in rule.reads)
    guards = [g for g in space.rules if g.structural and g is not rule and set(g.reads) <= set(rule.reads)]
    base = {f.name: getattr(space.config_type(), f.name) for f in fields(space.config_type)}
    table = np.zeros([len(space.params[a].domain) if a in axes else 1 for a in range(len(space.params))], bool)
    example = ""
    for combo in itertools.product(*(range(len(space.params[a].domain)) for a in axes)):
        values = {space.params[a].name: space.params[a].domain[i] for a, i in zip(axes, combo)}
        config = space.config_type(**{**base, **values})
        # A combination a structural rule already rejects is never asked of the family rule: the
        # family predicates may divide by a warp size of zero there.
        if any(g.check(config, spec, arch) for g in guards):
            continue
        reason = rule.check(config, spec, arch)
        if reason:
            chosen = dict(zip(axes, combo))
            table[tuple(chosen.get(a, 0) for a in range(len(space.params)))] = True
            example = example or reason
    return table, example


@dataclass(frozen=True, eq=False)
class Analysis:
    report: SpaceReport
    codes: np.ndarray  # sorted codes of the valid configs
    first: np.ndarray  # per grid code: index into space.rules of the first failing rule, -1 when valid


@functools.lru_cache(maxsize=16)
def _analyze(space: SearchSpace, spec: GemmSpec, arch: str) -> Analysis:
    first = np.full(space.shape, -1, dtype=np.int8)
    structural_ok = np.ones(space.shape, bool)
    counts = []
    for index, rule in enumerate(space.rules):
        table, example = _rule_table(space, rule, spec, arch)
        hit = (first < 0) & table
        first[hit] = index
        any_count = int(np.count_nonzero(table & structural_ok))
        if rule.structural:
            structural_ok &= ~table
        counts.append(RuleCount(rule.name, int(np.count_nonzero(hit)), any_count, example, rule.structural))
    first = first.ravel()
    codes = np.flatnonzero(first < 0).astype(np.int64)
    report = SpaceReport(space.family, spec, arch, space.size, int(codes.size), tuple(counts))
    return Analysis(report, codes, first)


def analyze(space: SearchSpace, spec: GemmSpec, arch: str) -> SpaceReport:
    """Size of the space and how many configs each rule rejects (first failing and any)."""
    return _analyze(space, spec, arch).report


def valid_codes(space: SearchSpace, spec: GemmSpec, arch: str) -> np.ndarray:
    """Sorted grid codes of the configs that pass all rules for `spec` on `arch` (analysed here)."""
    return _analyze(space, spec, arch).codes


# Codes being computed elsewhere (tune.priming's process pool), by (family, spec, arch): a future
# whose result is valid_codes' array. candidate_set waits on it instead of analysing again.
_PRIMED: dict[tuple[str, GemmSpec, str], Future] = {}


def prime(family: str, spec: GemmSpec, arch: str, codes: Future) -> None:
    _PRIMED[(family, spec, arch)] = codes


def forget(family: str, spec: GemmSpec, arch: str) -> None:
    _PRIMED.pop((family, spec, arch), None)


def candidate_set(space: SearchSpace, spec: GemmSpec, arch: str) -> "CandidateSet":
    """Every config of the space that passes all rules for `spec` on `arch`: the primed codes when
    another process computed them (any failure there: analysed here instead)."""
    primed = _PRIMED.get((space.family, spec, arch))
    if primed is not None:
        try:
            return CandidateSet(space, spec, arch, np.asarray(primed.result(), dtype=np.int64))
        except Exception:  # noqa: BLE001 - a cancelled or broken pool only costs the analysis here
            pass
    return CandidateSet(space, spec, arch, valid_codes(space, spec, arch))


def first_failing(space: SearchSpace, config: Any, spec: GemmSpec, arch: str) -> str | None:
    """Name of the first rule rejecting `config`, read from the broadcast tables; None when valid."""
    code = space.code_of(config)
    if code is None:
        return "outside the domains"
    index = int(_analyze(space, spec, arch).first[code])
    return None if index < 0 else space.rules[index].name


def verdict(space: SearchSpace, config: Any, spec: GemmSpec, arch: str) -> str | None:
    """Name of the first rule rejecting `config`, checked directly (no tables); None when valid."""
    for rule in space.rules:
        if rule.check(config, spec, arch):
            return rule.name
    return None


# --- the valid configs --------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class CandidateSet:
    """The valid configs of a space for one spec and arch, addressed by position 0..len-1."""

    space: SearchSpace
    spec: GemmSpec
    arch: str
    codes: np.ndarray  # sorted grid codes

    def __len__(self) -> int:
        return int(self.codes.size)

    @functools.cached_property
    def domain_indices(self) -> np.ndarray:
        """(len, params) matrix of each config's index into every parameter domain."""
        return np.stack(np.unravel_index(self.codes, self.space.shape), axis=1)

    @functools.cached_property
    def columns(self) -> dict[str, np.ndarray]:
        """Numeric value of each parameter per config (booleans as 0/1, strings by domain position)."""
        out = {}
        for axis, p in enumerate(self.space.params):
            numeric = [v if isinstance(v, (int, float)) else i for i, v in enumerate(p.domain)]
            out[p.name] = np.asarray(numeric, dtype=np.float64)[self.domain_indices[:, axis]]
        return out

    def config(self, position: int) -> Any:
        return self.space.config_at(np.unravel_index(int(self.codes[position]), self.space.shape))

    def configs(self, positions: Sequence[int]) -> list:
        return [self.config(p) for p in positions]

    def positions_of_codes(self, codes: np.ndarray) -> np.ndarray:
        """Position of each code in this set, -1 where the code is not a member."""
        codes = np.asarray(codes, dtype=np.int64)
        if not len(self):
            return np.full(codes.shape, -1, dtype=np.int64)
        where = np.minimum(np.searchsorted(self.codes, codes), len(self) - 1)
        return np.where(self.codes[where] == codes, where, -1)

    def position_of(self, config: Any) -> int | None:
        code = self.space.code_of(config)
        if code is None:
            return None
        position = int(self.positions_of_codes(np.array([code]))[0])
        return None if position < 0 else position

    def subset(self, configs: Sequence[Any]) -> "CandidateSet":
        codes = [self.space.code_of(c) for c in configs]
        wanted = np.unique(np.asarray([c for c in codes if c is not None], dtype=np.int64))
        kept = wanted[self.positions_of_codes(wanted) >= 0]
        return CandidateSet(self.space, self.spec, self.arch, kept)


@functools.lru_cache(maxsize=None)
def space_for(family: str) -> SearchSpace:
    """The search space of the registered family `family` (ConfigError when unknown)."""
    return get_family(family).space()
