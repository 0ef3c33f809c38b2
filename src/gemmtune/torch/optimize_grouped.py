"""optimize()'s grouped sites: each GroupedLinear (an MoE layer's experts) captured with the offsets the example
run gave it, timed against torch's grouped GEMM on those offsets, planned, saved and reloaded.

A grouped site is one GroupedLinear: its GroupedSpec (groups, total_m, N, K, dtype, bias/relu/gelu epilogue or
swiglu) and the rows each group held in the example forward (the group-size distribution its timing uses).
gemmtune's side is gemmtune.torch.grouped_mm with the kernel it builds for the spec (optimize() tunes no grouped
config: the plan records the one grouped.launch picks, and a reload checks it still picks it), torch's side what the module runs otherwise (torch_grouped_linear). Routing a site
sets the module's `use_gemmtune` (and `torch_under_compile` where its kernel lost inside CUDA graphs); the
end-to-end choice among unrouted / faster alone / every site is optimize_model's, over Linear and grouped
sites together.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import GemmtuneError, SpecError
from ..grouped.spec import GroupedSpec, group_sizes
from ..input_files import InputFileError
from .experts import GroupedLinear, torch_grouped_linear
from .site_timing import SiteTiming

__all__ = ["GroupedSite", "GroupedPlan", "GroupedTrace", "grouped_spec", "plan_grouped", "set_grouped",
           "check_grouped_fits", "time_grouped", "launched_config"]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# --- the site ---------------------------------------------------------------------------------------
def _spec_json(spec: GroupedSpec) -> dict:
    return {"groups": spec.groups, "total_m": spec.total_m, "n": spec.n, "k": spec.k, "dtype": spec.dtype,
            "epilogue": str(spec.epilogue), "swiglu": spec.swiglu}


def _spec_from_json(data: dict) -> GroupedSpec:
    return GroupedSpec(data["groups"], data["total_m"], data["n"], data["k"], data["dtype"], data["epilogue"],
                       data["swiglu"])


@dataclass(frozen=True)
class GroupedSite:
    """One GroupedLinear of the model: the grouped GEMM it runs, the rows each group held in the example run,
    calls per forward and the module name."""

    name: str
    spec: Optional[GroupedSpec]  # None: not a grouped GEMM gemmtune runs (see note)
    rows: tuple[int, ...] = ()
    calls: int = 1
    routable: bool = True
    note: str = ""

    @property
    def activation(self) -> Optional[str]:
        """As gemmtune.torch.grouped_mm and GroupedLinear take it: swiglu, relu, gelu or None."""
        if self.spec is None:
            return None
        if self.spec.swiglu:
            return "swiglu"
        return next((op for op in self.spec.epilogue.ops if op in ("relu", "gelu")), None)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The cumulative row ends (offs) of `rows`."""
        return tuple(int(end) for end in np.cumsum(self.rows, dtype=np.int64))

    def short(self) -> str:
        """One cell of the report: groups, total_m×N×K, dtype, epilogue, and the spread of rows per group."""
        if self.spec is None:
            return "—"
        s, empty = self.spec, sum(r == 0 for r in self.rows)
        epi = " swiglu" if s.swiglu else ("" if s.epilogue.is_identity else f" {s.epilogue}")
        spread = f"rows {min(self.rows)}–{max(self.rows)}" + (f", {empty} empty" if empty else "") if self.rows else ""
        return f"{s.groups} groups {s.total_m}x{s.n}x{s.k} {s.dtype}{epi} ({spread})"

    def to_json(self) -> dict:
        return {"name": self.name, "grouped_spec": _spec_json(self.spec) if self.spec else None, "rows": list(self.rows),
                "calls": self.calls, "routable": self.routable, "note": self.note}

    @staticmethod
    def from_json(data: dict) -> "GroupedSite":
        spec = _spec_from_json(data["grouped_spec"]) if data["grouped_spec"] else None
        return GroupedSite(data["name"], spec, tuple(int(r) for r in data["rows"]), data["calls"], data["routable"],
                           data["note"])


@dataclass(frozen=True)
class GroupedPlan:
    """A grouped site's kernel config (JSON), both times on its rows, and the decision."""

    site: GroupedSite
    config: dict
    timing: SiteTiming
    routed: bool
    reason: str

    def to_json(self) -> dict:
        t = self.timing
        return {**self.site.to_json(), "config": self.config, "gemmtune_s": t.gemmtune_s, "torch_s": t.torch_s,
                "error": t.error, "routed": self.routed, "reason": self.reason}

    @staticmethod
    def from_json(data: dict) -> "GroupedPlan":
        timing = SiteTiming(data["gemmtune_s"], data["torch_s"], data.get("error", ""))
        return GroupedPlan(GroupedSite.from_json(data), data["config"], timing, data["routed"], data["reason"])


# --- capture ----------------------------------------------------------------------------------------
def grouped_spec(x: torch.Tensor, module: GroupedLinear) -> GroupedSpec:
    """The spec gemmtune.torch.grouped_mm builds its kernel for when `module` runs on `x`, or a SpecError
    saying why it would not run it."""
    if x.dtype not in _DTYPES:
        raise SpecError(f"{x.dtype} tokens (gemmtune's grouped kernel takes bfloat16, float16)")
    if x.dim() != 2 or not x.is_contiguous():
        raise SpecError(f"tokens {tuple(x.shape)} must be one contiguous (total_m, K) tensor")
    act = module.activation
    ops = (["bias"] if module.bias is not None else []) + ([act] if act in ("relu", "gelu") else [])
    return GroupedSpec(module.groups, x.shape[0], module.out_features, module.in_features, _DTYPES[x.dtype],
                       "+".join(ops) or "none", act == "swiglu")


@dataclass
class GroupedTrace:
    """Each GroupedLinear's calls in one forward: (spec or why not, rows per group)."""

    calls: dict = field(default_factory=lambda: defaultdict(list))

    def hook(self, name: str) -> Callable:
        def hook(module: GroupedLinear, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
            x = args[0] if args else kwargs["x"]
            offs = args[1] if len(args) > 1 else kwargs["offs"]
            try:
                spec: Any = grouped_spec(x, module)
            except GemmtuneError as err:
                spec = str(err)
            sizes = group_sizes(offs.detach().cpu().numpy(), x.shape[0])  # a host read: capture only
            self.calls[name].append((spec, tuple(int(r) for r in sizes)))
        return hook

    def register(self, model: nn.Module) -> list:
        return [module.register_forward_hook(self.hook(name), with_kwargs=True)
                for name, module in model.named_modules() if isinstance(module, GroupedLinear)]

    def sites(self) -> tuple[GroupedSite, ...]:
        return tuple(_site(name, calls) for name, calls in self.calls.items())


def _site(name: str, calls: list) -> GroupedSite:
    (spec, rows), count = calls[0], len(calls)
    if isinstance(spec, str):
        return GroupedSite(name, None, rows, count, routable=False, note=f"not a gemmtune grouped GEMM: {spec}")
    if any(s != spec for s, _ in calls):
        return GroupedSite(name, spec, rows, count, routable=False, note="called with several shapes in one forward")
    if any(r != rows for _, r in calls):
        return GroupedSite(name, spec, rows, count, note="timed on the first call's offsets of several")
    return GroupedSite(name, spec, rows, count)


# --- planning ---------------------------------------------------------------------------------------
class GroupedBackend(Protocol):
    def grouped_config(self, spec: GroupedSpec) -> dict: ...
    def install_grouped(self, spec: GroupedSpec, config: dict) -> None: ...
    def time_grouped(self, site: GroupedSite) -> SiteTiming: ...


def plan_grouped(site: GroupedSite, backend: GroupedBackend, memo: dict) -> GroupedPlan:
    """Time one grouped site on its rows (the same spec and rows are not timed again) and decide: gemmtune
    only where faster."""
    if not site.routable:
        return GroupedPlan(site, {}, SiteTiming(None, None), False, site.note)
    key = (site.spec, site.rows)
    if key not in memo:
        try:
            config = backend.grouped_config(site.spec)
            backend.install_grouped(site.spec, config)
            memo[key] = (config, backend.time_grouped(site))
        except GemmtuneError as err:
            memo[key] = ({}, SiteTiming(None, None, f"no kernel: {err}"))
    config, timing = memo[key]
    reason = timing.error or ("gemmtune faster" if timing.gemmtune_faster else "torch faster")
    return GroupedPlan(site, config, timing, timing.gemmtune_faster, reason + (f"; {site.note}" if site.note else ""))


def set_grouped(module: GroupedLinear, plan: GroupedPlan, routed: bool) -> None:
    """Route the module to gemmtune (torch's path under torch.compile where its kernel lost in CUDA graphs) or back."""
    module.use_gemmtune = routed
    module.torch_under_compile = routed and not plan.timing.gemmtune_faster


def check_grouped_fits(model: nn.Module, plans: Sequence[GroupedPlan], backend: GroupedBackend, path: Path) -> None:
    """Each routed grouped site of the plan is a GroupedLinear of the model with the plan's sizes, and the kernel
    gemmtune.torch.grouped_mm builds today is the one timed (one line if not)."""
    modules = dict(model.named_modules())
    for plan in (p for p in plans if p.routed):
        spec, module = plan.site.spec, modules.get(plan.site.name)
        sizes = (spec.groups, spec.k, spec.n, plan.site.activation, spec.has_bias)
        if not isinstance(module, GroupedLinear) or (module.groups, module.in_features, module.out_features,
                                                     module.activation, module.bias is not None) != sizes:
            raise InputFileError(f"plan {path} does not fit this model: {plan.site.name} is not a GroupedLinear "
                                 f"of {spec.groups} groups {spec.k} -> {spec.n}; optimize again with another plan path")
        if backend.grouped_config(spec) != plan.config:
            raise InputFileError(f"plan {path}: {plan.site.name}'s grouped kernel is no longer the one timed "
                                 "(grouped_mm now picks another config): optimize again")


# --- on the GPU -------------------------------------------------------------------------------------
def _grouped_operands(site: GroupedSite, index: int) -> tuple:
    """x (total_m, K) uniform in ±1, weight (G, rows, K) in ±1/sqrt(K) as nn.Linear's, offs on the device, bias."""
    spec, kind = site.spec, _TORCH_DTYPES[site.spec.dtype]
    make = lambda *shape, scale=1.0: (torch.rand(*shape, device=f"cuda:{index}").mul_(2).sub_(1)  # noqa: E731
                                      .mul_(scale).to(kind))
    x = make(spec.total_m, spec.k)
    weight = make(spec.groups, spec.weight_rows, spec.k, scale=spec.k ** -0.5)
    offs = torch.tensor(site.offsets, device=f"cuda:{index}", dtype=torch.int32)
    return x, weight, offs, (make(spec.groups, spec.n) if spec.has_bias else None)


def time_grouped(site: GroupedSite, index: int, graph_seconds: Callable[[Callable[[], Any]], float]) -> SiteTiming:
    """gemmtune.torch.grouped_mm against torch_grouped_linear on the site's rows, each checked (rows the groups
    hold) and timed by `graph_seconds` (optimize_model's: inside CUDA graphs)."""
    from ..verify import tolerance
    from .operators import grouped_mm

    x, weight, offs, bias = _grouped_operands(site, index)
    act, held = site.activation, sum(site.rows)
    ours = lambda: grouped_mm(x, weight.transpose(1, 2), offs, bias, act)  # noqa: E731
    theirs = lambda: torch_grouped_linear(x, weight, offs, bias, act)  # noqa: E731
    got, want = ours()[:held].float(), theirs()[:held].float()
    error = float((got - want).norm() / want.norm().clamp_min(1e-30)) if held else 0.0
    roundings = 3 if act == "swiglu" else 2  # torch's chain rounds after the product, each op after it
    if not error <= 2 * tolerance(site.spec.dtype, site.spec.k, roundings=roundings):
        return SiteTiming(None, graph_seconds(theirs), f"wrong output (relative error {error:.2e})")
    return SiteTiming(graph_seconds(ours), graph_seconds(theirs))


def launched_config(spec: GroupedSpec, index: int) -> dict:
    """The config of the kernel gemmtune.torch.grouped_mm runs for `spec` on GPU `index` (JSON): built (a
    disk-cached compile) and kept by grouped.launch, so the first routed call does not build it."""
    from ..grouped.launch import build

    return build(spec, ordinal=index).config.to_json()
