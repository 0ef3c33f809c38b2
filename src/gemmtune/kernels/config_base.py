"""What every family's Config shares: JSON round trip, hash key, `with_`, and the constraint loop.

A family's Config is a frozen dataclass that also derives from FamilyConfig and names its family in
FAMILY_LABEL (a plain class attribute, not a field).
"""
from __future__ import annotations

from dataclasses import asdict, fields, replace
from typing import Any, Callable, Mapping

from ..spec import GemmSpec, stable_hash


STATIC_SMEM_LIMIT = 48 * 1024  # bytes of static shared memory a block may declare (every arch)


def arch_number(arch: str) -> int:
    """'sm_90a' -> 90."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0


class FamilyConfig:
    FAMILY_LABEL = "family"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Any:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown {cls.FAMILY_LABEL} config keys: {sorted(unknown)}")
        return cls(**data)

    def key(self) -> str:
        return stable_hash(self.to_json())

    def with_(self, **changes) -> Any:
        return replace(self, **changes)


def rejections_by(constraints: Mapping[str, Callable[[Any, GemmSpec, str], "str | None"]], config: Any,
                  spec: GemmSpec, arch: str) -> dict[str, str]:
    """{constraint name: reason} for every constraint `config` breaks; empty when valid."""
    found = {}
    for name, rule in constraints.items():
        reason = rule(config, spec, arch)
        if reason:
            found[name] = reason
    return found


def valid_named(named: list[tuple[str, Any]], rejections: Callable[[Any, GemmSpec, str], dict[str, str]],
                spec: GemmSpec, arch: str) -> list[tuple[str, Any]]:
    """The (name, config) pairs whose config is valid for `spec` on `arch`, each config once (its
    first name), in order: a family's named candidates."""
    seen, out = set(), []
    for name, config in named:
        if config not in seen and not rejections(config, spec, arch):
            seen.add(config)
            out.append((name, config))
    return out


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for positive integers: tiles needed to cover a extent with tiles of b."""
    return -(-a // b)
