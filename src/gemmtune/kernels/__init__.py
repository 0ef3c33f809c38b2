"""Generator families as plug-ins, and the registry every verb asks.

A family is one way of writing GEMM kernels (CUDA-core fp32 templates, Hopper wgmma + TMA, mma.sync
for every tensor-core GPU, ...).
Each package under ``kernels/`` describes itself with one :class:`Family` value; build, show, bench,
tune, space, export, load and the tuning database find families here and never import one by name.

    family = family_for(spec, arch)           # the best family that supports the spec on arch
    family = family_for(spec, arch, "simt")   # that family, or a ConfigError saying why not
    source = family.render(spec, family.default_config(spec, arch), arch)
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..kernel_source import KernelSource
    from ..spec import GemmSpec
    from .space_base import SearchSpace

# Family packages, best first: family_for picks the first one that supports a spec. gemv takes
# M <= 16 and N = 1; wgmma aligned tensor-core specs on sm_90; mma every other tensor-core spec
# (sm_75+); simt fp32.
FAMILY_MODULES = ("gemv", "wgmma", "mma", "simt")
# Families of one problem kind each, outside kernels/ (a module path and the kind, a GemmSpec property):
# family_for asks them (then the general families KIND_GENERAL_FAMILIES names) for specs of their kind.
KIND_FAMILY_MODULES = (("gemmtune.grouped.as_gemm", "fp8"),)
# General families that also run a kind's specs, asked after that kind's own families: mma.sync runs fp8
# on sm_89 and the other archs without fp8 wgmma (issue 70); sm_90a keeps the grouped wgmma kernel, asked first.
KIND_GENERAL_FAMILIES = {"fp8": ("mma",)}
# Families that run gated (SwiGLU) GEMMs (GemmSpec.gated): the wgmma kernel compacts its gate/up fragment
# before the write-back. The others would compute the plain 2N-column product: family_for refuses them.
GATED_FAMILIES = ("wgmma",)


def gated_refusal(family: "Family", spec: "GemmSpec") -> str | None:
    """Why `family` cannot run `spec` for being gated (None: not gated, or a family that runs it)."""
    if getattr(spec, "gated", False) and family.name not in GATED_FAMILIES:
        return f"runs no gated (SwiGLU) GEMMs ({', '.join(GATED_FAMILIES)} on sm_90a does)"
    return None


@dataclass(frozen=True)
class Family:
    """What a generator family offers the rest of gemmtune."""

    name: str
    version: str
    config_type: type  # frozen dataclass with to_json/from_json/key/describe
    # Why this family cannot run `spec` on `arch` (None: it can). Checked before any config.
    supports: Callable[["GemmSpec", str], "str | None"]
    render: Callable[["GemmSpec", Any, str], "KernelSource"]
    ladder: Callable[[str], "list[tuple[str, Any]]"]
    default_config: Callable[["GemmSpec", str], Any]
    # {constraint name: reason} for every constraint `config` breaks on (spec, arch); empty when valid.
    rejections: Callable[[Any, "GemmSpec", str], "dict[str, str]"]
    space: Callable[[], "SearchSpace"]  # the tuner's search space (built lazily, cached by tune.space)
    description: str = ""
    # What about a spec besides its size decides how its kernels run (mma: each operand's copy width,
    # from its row alignment); a shipped known config applies only to specs of its own class. None: size alone.
    shape_class: "Callable[[GemmSpec], Any] | None" = None
    # Why family_for passes this family over for `spec` on `arch` though it supports it (a later
    # family runs it faster), or None. Asked by name, the family still runs it.
    yields: "Callable[[GemmSpec, str], str | None] | None" = None

    def config_from_json(self, data: dict) -> Any:
        return self.config_type.from_json(data)


@functools.lru_cache(maxsize=None)
def families() -> tuple[Family, ...]:
    """Every registered family, best first (a family package not written yet is skipped)."""
    found = []
    for name in FAMILY_MODULES:
        try:
            module = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":  # a missing dependency inside the family is a real error
                raise
            continue
        found.append(module.FAMILY)
    return tuple(found)


@functools.lru_cache(maxsize=None)
def kind_families() -> tuple[tuple[str, Family], ...]:
    """(kind, family) of every family that runs one kind of spec (KIND_FAMILY_MODULES)."""
    return tuple((kind, importlib.import_module(module).FAMILY) for module, kind in KIND_FAMILY_MODULES)


def _kind_of(spec: "GemmSpec") -> str | None:
    """The kind of `spec` a kind family runs, or None for the general families' specs."""
    return next((kind for _, kind in KIND_FAMILY_MODULES if getattr(spec, kind)), None)


def _every_family() -> Iterator[Family]:
    """The general families, then the kind families (imported only when the search gets to them)."""
    yield from families()
    yield from (family for _, family in kind_families())


def get_family(name: str) -> Family:
    for family in _every_family():
        if family.name == name:
            return family
    raise ConfigError(f"unknown family '{name}'; known: {', '.join(f.name for f in _every_family())}")


def family_for(spec: "GemmSpec", arch: str, name: str | None = None) -> Family:
    """The family to use for `spec` on `arch`: `name` if given (ConfigError when it cannot), else
    the first registered family that supports the spec."""
    if name:
        family = get_family(name)
        reason = gated_refusal(family, spec) or family.supports(spec, arch)
        if reason:
            raise ConfigError(f"family {family.name} cannot run {spec.short()} on {arch}: {reason}")
        return family
    kind = _kind_of(spec)
    chosen = families()
    if kind:
        general = tuple(f for f in families() if f.name in KIND_GENERAL_FAMILIES.get(kind, ()))
        chosen = tuple(f for k, f in kind_families() if k == kind) + general
    reasons = []
    for family in chosen:
        # (a gated spec runs where it can: no other family would take it in its place)
        yields = family.yields and not spec.gated and family.yields(spec, arch)
        reason = gated_refusal(family, spec) or family.supports(spec, arch) or yields
        if not reason:
            return family
        reasons.append(f"{family.name}: {reason}")
    raise ConfigError(f"no generator family supports {spec.short()} on {arch} ({'; '.join(reasons)})")


def family_of_config(config: Any) -> Family:
    """The registered family whose Config type `config` is an instance of (ConfigError otherwise)."""
    for family in _every_family():
        if isinstance(config, family.config_type):
            return family
    raise ConfigError(f"a {type(config).__name__} is no registered family's config "
                      f"(known: {', '.join(f.name for f in _every_family())})")
