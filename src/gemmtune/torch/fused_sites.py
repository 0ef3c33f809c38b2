"""optimize()'s fused sites: a residual add after a Linear, or SwiGLU over two Linears, found in forward code
(fusion.py), each one GEMM: planned, timed, checked, routed, saved and reloaded beside the Linear sites.

A fused site is one fusion.Pattern with the GemmSpec its kernel runs: the Linear's spec with `add` appended to
its epilogue (add: D = x·Wᵀ (+bias) + r), or the gated spec (swiglu: GemmSpec(m, n, k, "nt", dtype, gated=True)).
It supersedes the Linear sites it holds (optimize_model marks them "in fused site ..."), unless gemmtune cannot
run it (no kernel, wrong output, or the rewritten model gives another output than the model): then the Linears
are sites of their own again. Timing: gemmtune's one kernel against the torch ops it replaces (F.linear + add;
F.linear twice, silu, mul) inside CUDA graphs. Before a site may be routed, the model is run with it routed
alone and compared with the model's own output (check_rewrite). Reloading a plan scans the model again: a
routed site whose pattern is no longer there stays unrouted, with a warning line in the report.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch
from torch import nn

from ..epilogue import Epilogue
from ..errors import GemmtuneError, SpecError
from ..spec import GemmSpec
from . import fusion
from .site_timing import KernelPlan, SiteTiming, timed_kernel

__all__ = ["FusedSite", "FusedPlan", "find_fused", "supersede", "time_fused", "check_rewrite", "set_fused",
           "reload_fused", "model_output"]


@dataclass(frozen=True)
class FusedSite:
    """One fusable pattern: its traced module (owner, "" = the model), kind (add, swiglu), the Linears' full
    names, the GEMM its kernel runs, calls per forward (1), whether gemmtune may route it and why not."""

    owner: str
    kind: str
    linears: tuple[str, ...]
    spec: Optional[GemmSpec]
    calls: int = 1
    routable: bool = True
    note: str = ""

    @property
    def name(self) -> str:
        """The report's label: "o_proj +add", "mlp: gate_proj+up_proj swiglu"."""
        if self.kind == "add":
            return f"{self.linears[0]} +add"
        parent = self.linears[0].rpartition(".")[0]
        children = "+".join(n.rpartition(".")[2] for n in self.linears)
        return f"{parent + ': ' if parent else ''}{children} swiglu"

    def pattern_key(self) -> tuple:
        """fusion.Pattern.key: (owner, kind, Linear targets inside the owner)."""
        cut = len(self.owner) + 1 if self.owner else 0
        return (self.owner, self.kind, tuple(n[cut:] for n in self.linears))

    def to_json(self) -> dict:
        return {"fused": self.kind, "owner": self.owner, "linears": list(self.linears),
                "spec": self.spec.to_json() if self.spec else None, "calls": self.calls, "routable": self.routable,
                "note": self.note}

    @staticmethod
    def from_json(data: dict) -> "FusedSite":
        spec = GemmSpec.from_json(data["spec"]) if data["spec"] else None
        return FusedSite(data["owner"], data["fused"], tuple(data["linears"]), spec, data["calls"], data["routable"],
                         data["note"])


@dataclass(frozen=True)
class FusedPlan(KernelPlan):
    """A fused site's kernel (family, config JSON), both times, and the decision."""

    site: FusedSite
    site_type: ClassVar[type] = FusedSite


# --- finding --------------------------------------------------------------------------------------------
def _gated_spec(m: int, n: int, k: int, dtype: str) -> GemmSpec:
    try:
        return GemmSpec(m, n, k, layout="nt", dtype=dtype, gated=True)
    except TypeError as err:  # a GemmSpec without the gated field
        raise SpecError(f"no gated GemmSpec in this gemmtune ({err})") from None


def _fused_site(pattern: fusion.Pattern, by_name: dict) -> Optional[FusedSite]:
    """The pattern as a site, from its Linears' captured sites; None where one of them is not a plain routable
    site called once (called elsewhere too, with an activation fused, not a gemmtune GEMM)."""
    names = tuple(pattern.full(t) for t in pattern.linears)
    linears = [by_name.get(n) for n in names]
    if any(s is None or not s.routable or s.calls != 1 or s.activation is not None for s in linears):
        return None
    first = linears[0].spec
    if first.m != pattern.rows:
        return None
    if pattern.kind == "add":
        ops = "+".join(list(first.epilogue.ops) + ["add"])
        spec = GemmSpec(first.m, first.n, first.k, layout=first.layout, dtype=first.dtype, epilogue=Epilogue.parse(ops))
        return FusedSite(pattern.owner, "add", names, spec)
    why = fusion.gated_available()
    try:
        if first.layout != "nt":
            raise SpecError(f"the gated GEMM reads x row-major (layout nt), this one is {first.layout}")
        spec = _gated_spec(first.m, first.n, first.k, first.dtype)
    except GemmtuneError as err:
        return FusedSite(pattern.owner, "swiglu", names, None, routable=False, note=str(err))
    if why is not None:
        return FusedSite(pattern.owner, "swiglu", names, spec, routable=False, note=why)
    return FusedSite(pattern.owner, "swiglu", names, spec)


def find_fused(model: nn.Module, inputs: tuple, sites: Sequence[Any]) -> tuple[FusedSite, ...]:
    """The fused sites of `model` (fusion.scan), each over Linear sites of `sites` (capture's)."""
    by_name = {s.name: s for s in sites}
    found, taken = [], set()
    for pattern in fusion.scan(model, inputs).patterns:
        site = _fused_site(pattern, by_name)
        if site is None or taken & set(site.linears):
            continue  # a Linear is inside one fused site at most (the first found)
        taken |= set(site.linears)
        found.append(site)
    return tuple(found)


def supersede(sites: Sequence[Any], fused: Sequence[FusedSite]) -> list[Any]:
    """The Linear sites with those inside a routable fused site made unroutable ("in fused site ...")."""
    inside = {n: f.name for f in fused if f.routable for n in f.linears}
    return [replace(s, routable=False, note=f"in fused site {inside[s.name]}") if s.name in inside else s
            for s in sites]


# --- planning -------------------------------------------------------------------------------------------
def model_output(model: nn.Module, inputs: tuple) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*inputs)
    return [t.detach().clone() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        if w.is_floating_point():
            worst = max(worst, float((g.float() - w.float()).norm() / w.float().norm().clamp_min(1e-30)))
        elif not torch.equal(g, w):
            return float("inf")
    return worst


def rewrite_tolerance(spec: GemmSpec) -> float:
    from ..verify import tolerance

    return 2 * tolerance(spec.dtype, spec.k, roundings=3)


def set_fused(model: nn.Module, plan: FusedPlan, routed: bool) -> None:
    """Route the plan's pattern (torch's ops under torch.compile where its kernel lost inside CUDA graphs) or
    put it back."""
    pattern = _pattern(model, plan.site)
    fusion.set_routed(model, pattern, routed, torch_under_compile=routed and not plan.timing.gemmtune_faster)


def _pattern(model: nn.Module, site: FusedSite) -> fusion.Pattern:
    owner = model.get_submodule(site.owner)
    return fusion._OWNERS[owner].patterns[site.pattern_key()]


def check_rewrite(model: nn.Module, inputs: tuple, want: list[torch.Tensor], plan: FusedPlan) -> str:
    """Run the model with the plan's site routed alone, compare with `want` (the model's own output); put it
    back. Returns "" where within the kernel's tolerance, else why not."""
    set_fused(model, replace(plan, timing=SiteTiming(1.0, 2.0)), True)
    try:
        error = _relative_error(model_output(model, inputs), want)
    except Exception as err:  # noqa: BLE001 - a rewrite that does not run is refused, with why
        return f"the rewritten model fails ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    finally:
        set_fused(model, plan, False)
    limit = rewrite_tolerance(plan.site.spec)
    return "" if error <= limit else f"the rewritten model differs (relative error {error:.2e} > {limit:.2e})"


# --- on the GPU -------------------------------------------------------------------------------------------
def _operands(spec: GemmSpec, index: int) -> dict:
    kind = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(spec.dtype, torch.float32)
    make = lambda *shape, scale=1.0: (torch.rand(*shape, device=f"cuda:{index}").mul_(2).sub_(1)  # noqa: E731
                                      .mul_(scale).to(kind))
    x = make(spec.m, spec.k)
    out = {"x": x, "w": make(spec.n, spec.k, scale=spec.k ** -0.5)}
    if spec.gated:
        out["w_up"] = make(spec.n, spec.k, scale=spec.k ** -0.5)
    else:
        out["r"] = make(spec.m, spec.n)
        out["b"] = make(spec.n) if "bias_col" in spec.epilogue.ops else None
    return out


def time_fused(site: FusedSite, index: int, graph_seconds: Callable[[Callable[[], Any]], float]) -> SiteTiming:
    """The fused call against the torch ops it replaces, each checked (relative error within the kernel's
    tolerance) and timed by `graph_seconds` (inside CUDA graphs)."""
    from ..verify import tolerance

    ops = _operands(site.spec, index)
    x, w = ops["x"], ops["w"]
    if site.kind == "add":
        r, b = ops["r"], ops["b"]
        ours = lambda: fusion.linear_add(x, w, b, r)  # noqa: E731
        theirs = lambda: nn.functional.linear(x, w, b) + r  # noqa: E731
        roundings = 2
    else:
        fusion.gated_available()
        w_up = ops["w_up"]
        w_gu = fusion._GATED["interleave_gate_up"](w, w_up).contiguous()
        ours = lambda: fusion.swiglu(x, w_gu, w, w_up)  # noqa: E731
        theirs = lambda: nn.functional.silu(nn.functional.linear(x, w)) * nn.functional.linear(x, w_up)  # noqa: E731
        roundings = 3
    got, want = ours().float(), theirs().float()
    error = float((got - want).norm() / want.norm().clamp_min(1e-30))
    if not error <= 2 * tolerance(site.spec.dtype, site.spec.k, roundings=roundings):
        return SiteTiming(None, graph_seconds(theirs), f"wrong output (relative error {error:.2e})")
    return SiteTiming(graph_seconds(ours), graph_seconds(theirs))


# --- reload ---------------------------------------------------------------------------------------------
def reload_fused(model: nn.Module, inputs: tuple, plans: Sequence[FusedPlan], sites: Sequence[Any],
                 install: Callable[[FusedPlan], None]) -> tuple[list[FusedPlan], list[str]]:
    """Route each routed plan whose pattern the model still has (scanned again; its kernel installed first), and
    check the rewrite; the others come back unrouted with a warning line each. Returns (plans, warnings)."""
    if not any(p.routed for p in plans):
        return list(plans), []
    found = {s.pattern_key(): s for s in find_fused(model, inputs, sites)}
    want = model_output(model, inputs)
    out, warnings = [], []
    for plan in plans:
        if not plan.routed:
            out.append(plan)
            continue
        now = found.get(plan.site.pattern_key())
        why = ""
        if now is None or not now.routable or now.spec != plan.site.spec:
            why = "its pattern no longer matches the model" if now is None or now.spec != plan.site.spec else now.note
        else:
            install(plan)
            why = check_rewrite(model, inputs, want, plan)
        if why:
            warnings.append(f"warning: fused site {plan.site.name} not routed: {why}")
            out.append(replace(plan, routed=False, reason=f"not routed at reload: {why}"))
        else:
            set_fused(model, plan, True)
            out.append(plan)
    return out, warnings


# --- the plan of one site -----------------------------------------------------------------------------
def plan_fused(site: FusedSite, backend: Any, db_path: Any, tuned: bool, memo: dict, model: nn.Module,
               inputs: tuple, want: list[torch.Tensor]) -> FusedPlan:
    """Time the site (its kernel planned and installed as a Linear's; a GEMM timed before is not timed again),
    check the rewritten model against `want`, and decide: gemmtune only where faster and right. A site whose
    rewrite differs comes back unroutable (its Linears are then sites of their own again)."""
    if not site.routable:
        return FusedPlan(site, "", {}, SiteTiming(None, None), False, site.note)
    # (a gated spec's config is tune-many's best, else build's pick, as a plain GEMM's)
    family, config, timing = timed_kernel(memo, ("fused", site.kind, site.spec), site.spec, backend, db_path, tuned,
                                          lambda: backend.time_fused(site))
    plan = FusedPlan(site, family, config, timing, timing.gemmtune_faster, timing.verdict)
    if timing.gemmtune_s is None:
        return plan
    why = check_rewrite(model, inputs, want, plan)
    if why:
        return replace(plan, site=replace(site, routable=False, note=why), routed=False, reason=why)
    return plan
