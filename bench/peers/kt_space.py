"""gemmtune's simt search space, said in kernel_tuner's terms (the peer in kernel_tuner_peer.py).

Nothing here is new search-space knowledge: every piece is read from gemmtune.
- tune_params: each simt parameter whose domain has more than one value (kernels/simt/space.py),
  plus `block_size_x`, the block's thread count. kernel_tuner takes the block size from a tunable
  (block_size_names); in gemmtune it is derived (SimtConfig.threads), so a tie constraint keeps
  block_size_x == threads. Parameters with one value stay at their fixed default.
- restrictions: one python-constraint Constraint per gemmtune Rule, over that rule's footprint
  (Rule.reads, the parameters it reads), so the solver prunes partial assignments the way
  gemmtune's broadcast tables do. A family rule is asked only where the structural rules inside
  its footprint pass (gemmtune's analysis does the same: the family predicates may divide by a warp
  size of zero elsewhere); where one fails, the config is rejected anyway.
- kernel source: a callable that renders the config with gemmtune's own renderer, so kernel_tuner
  compiles the very text gemmtune compiles (kernel_tuner is told to add no #defines).
- grid: problem_size (N, M, split_k) divided by (bn, bm, 1) — the grid the simt tiled kernel
  launches (render.py: ceil(N/bn), ceil(M/bm), split_k).

Imports kernel_tuner's solver package (python-constraint2) only in `restrictions()`, so the
translation is testable where the peer extra is not installed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any, Callable

from gemmtune.kernels import get_family
from gemmtune.kernels.simt.config import SimtConfig
from gemmtune.kernels.simt.space import SIMT_READS
from gemmtune.spec import GemmSpec
from gemmtune.tune.space import Rule, SearchSpace, space_for, verdict

BLOCK = "block_size_x"  # kernel_tuner's default name for the block's x extent
THREAD_COUNTS = (32, 64, 128, 256, 512, 1024)  # a block of the simt family is 1-D, one to 32 warps


@dataclass(frozen=True, eq=False)
class PeerSpace:
    """The simt space for one spec and arch, as kernel_tuner's arguments."""

    spec: GemmSpec
    arch: str
    space: SearchSpace

    # --- parameters ---------------------------------------------------------------------------
    @functools.cached_property
    def tuned(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.space.params if len(p.domain) > 1)

    @functools.cached_property
    def fixed(self) -> dict[str, Any]:
        return {p.name: p.domain[0] for p in self.space.params if len(p.domain) == 1}

    @property
    def tune_params(self) -> dict[str, list]:
        params = {p.name: list(p.domain) for p in self.space.params if p.name in self.tuned}
        params[BLOCK] = list(THREAD_COUNTS)
        return params

    def config_of(self, params: dict) -> SimtConfig:
        """The gemmtune config of a kernel_tuner parameter dict (extra keys such as times ignored)."""
        return SimtConfig(**{**self.fixed, **{name: params[name] for name in self.tuned}})

    def params_of(self, config: SimtConfig) -> dict:
        params = {name: getattr(config, name) for name in self.tuned}
        params[BLOCK] = config.threads
        return params

    # --- restrictions --------------------------------------------------------------------------
    def rule_checks(self) -> list[tuple[str, tuple[str, ...], Callable[..., bool]]]:
        """(name, footprint over the tuned parameters, accept(*values)) per gemmtune rule, plus the
        block-size tie; a rule whose footprint is all fixed is checked here once."""
        checks = []
        for rule in self.space.rules:
            reads = tuple(n for n in rule.reads if n in self.tuned)
            accept = self._acceptor(rule, reads)
            if not reads:
                if not accept():
                    raise ValueError(f"rule {rule.name} rejects every config of {self.spec.short()} on {self.arch}")
                continue
            checks.append((rule.name, reads, accept))
        tie = tuple(n for n in self.space.names if n in self.tuned and n in SIMT_READS["threads"]) + (BLOCK,)
        checks.append(("block_size", tie, self._tie(tie)))
        return checks

    def _guards(self, reads: tuple[str, ...], rule: Rule | None = None) -> list[Rule]:
        inside = set(reads) | set(self.fixed)
        return [g for g in self.space.rules if g.structural and g is not rule and set(g.reads) <= inside]

    def _acceptor(self, rule: Rule, reads: tuple[str, ...]) -> Callable[..., bool]:
        guards = self._guards(reads, rule)

        @functools.lru_cache(maxsize=None)
        def accept(*values: Any) -> bool:
            config = SimtConfig(**{**self.fixed, **dict(zip(reads, values))})
            if any(g.check(config, self.spec, self.arch) for g in guards):
                return False  # a structural rule rejects it (and is a constraint of its own)
            return rule.check(config, self.spec, self.arch) is None
        return accept

    def _tie(self, reads: tuple[str, ...]) -> Callable[..., bool]:
        guards = self._guards(reads[:-1])

        @functools.lru_cache(maxsize=None)
        def accept(*values: Any) -> bool:
            config = SimtConfig(**{**self.fixed, **dict(zip(reads[:-1], values[:-1]))})
            if any(g.check(config, self.spec, self.arch) for g in guards):
                return False
            return config.threads == values[-1]
        return accept

    def restrictions(self) -> list:
        """kernel_tuner restrictions: python-constraint Constraints, one per footprint."""
        from constraint import Constraint

        class Footprint(Constraint):
            """Decides once every parameter it reads is assigned (the solver passes them all)."""

            def __init__(self, name: str, reads: tuple[str, ...], accept: Callable[..., bool]):
                self.name, self.reads, self.accept = name, reads, accept

            def __call__(self, variables, domains, assignments, forwardcheck=False, *rest):
                try:
                    values = tuple(assignments[n] for n in self.reads)
                except KeyError:
                    return True
                return self.accept(*values)

            def preProcess(self, variables, domains, constraints, vconstraints):
                # kernel_tuner registers a Constraint over every parameter; narrow it to its footprint
                # (python-constraint's hook for this), so it is asked only when those are assigned
                # and the solver orders variables by the constraints that really read them.
                reads = list(self.reads)
                constraints[constraints.index((self, variables))] = (self, reads)
                for name in variables:
                    vconstraints[name].remove((self, variables))
                for name in reads:
                    vconstraints[name].append((self, reads))
                super().preProcess(reads, domains, constraints, vconstraints)  # prunes a one-parameter rule

            def __deepcopy__(self, memo):  # kernel_tuner deep-copies restrictions; the checks are pure
                return self

            def __repr__(self) -> str:
                return f"gemmtune rule {self.name} over {', '.join(self.reads)}"

        return [Footprint(*check) for check in self.rule_checks()]

    def valid(self, params: dict) -> bool:
        """gemmtune's own verdict on a kernel_tuner parameter dict (every rule, block size tied)."""
        config = self.config_of(params)
        if verdict(self.space, config, self.spec, self.arch) is not None:  # structural rules first
            return False
        return params.get(BLOCK, config.threads) == config.threads

    # --- launch and code -----------------------------------------------------------------------
    @property
    def problem_size(self) -> tuple[int, int, int]:
        return (self.spec.n, self.spec.m, self.fixed.get("split_k", 1))

    @property
    def grid_div(self) -> dict[str, list[str] | int]:
        return {"grid_div_x": ["bn"], "grid_div_y": ["bm"], "grid_div_z": 1}

    def render(self, params: dict):
        """gemmtune's KernelSource for a kernel_tuner parameter dict."""
        return get_family("simt").render(self.spec, self.config_of(params), self.arch)

    def kernel_source(self, params: dict) -> str:
        """kernel_tuner's code generator: called with the instance's parameter dict."""
        return self.render(params).code

    @property
    def kernel_name(self) -> str:
        from gemmtune.kernels.simt.render import entry_name

        return entry_name(self.spec)


def peer_space(spec: GemmSpec, arch: str) -> PeerSpace:
    space = space_for("simt")
    names = {f.name for f in fields(SimtConfig)}
    if set(space.names) != names:
        raise ValueError("the simt space no longer names every SimtConfig field")
    if space.params[space.axis("kind")].domain != ("tiled",):
        raise ValueError("the peer's grid assumes the tiled kernel only")
    return PeerSpace(spec, arch, space)
