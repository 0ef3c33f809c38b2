"""optimize(model, example_inputs): each nn.Linear to gemmtune where its kernel beats what torch runs.

    report = optimize(model, (x,), budget=120)         # capture, tune 120 s in all, time, route, save a plan
    report = optimize(model, (x,), plan="plan.json")   # the plan exists: reloaded, no tuning, no timing
    print(report.table())

Capture runs the model once with hooks: every nn.Linear call becomes a GemmSpec (bias_col when it has a
bias), and an nn.ReLU / nn.GELU module whose every call reads a Linear's output that nothing else reads
is fused into that Linear's epilogue. The kernels' GELU is the tanh form; an exact-erf nn.GELU() is fused
only when the caller accepts `erf_gelu_atol` >= ERF_GAP (the largest |tanh-GELU - erf-GELU| on any input),
else the Linear is routed alone and the GELU stays. The distinct GEMMs are tuned by tune-many (Dask when several GPUs are visible), each
layer is timed against torch (F.linear + the activation, eager ops) inside CUDA graphs, so both sides
count kernel time alone. Then the model itself decides, eagerly and end to end, in alternating rounds:
unrouted, the layers faster alone routed, or every layer gemmtune runs right routed (an eager block is
often host-bound, and a routed call costs less host time than F.linear's). A layer routed although its
kernel lost inside CUDA graphs runs torch's ops under torch.compile, where no call pays host time.
Residual adds after a Linear and SwiGLU (silu(gate(x)) * up(x)) in forward code are fused sites (fusion.py,
fused_sites.py): found with torch.fx, each one GEMM, timed against the torch ops it replaces, and routed by
rewriting the traced module's forward; a fused site supersedes the Linear sites it holds.
GroupedLinear modules (MoE experts) are sites too (optimize_grouped.py): captured with the rows each group
held, tuned on them within the same budget (a share in proportion to their FLOPs, by the grouped tuner, in the
same database), timed against torch's grouped GEMM on them, and in the end-to-end choice with the Linear sites.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Protocol, Sequence

import torch
from torch import nn

from ..epilogue import Epilogue
from ..errors import GemmtuneError, SpecError
from ..input_files import InputFileError, read_json_object
from ..spec import GemmSpec
from ..workload import Workload, WorkloadShape
from .fused_sites import FusedPlan, FusedSite, find_fused, model_output, plan_fused, reload_fused, set_fused, supersede
from .operators import linear as _linear
from .optimize_grouped import (GroupedPlan, GroupedSite, GroupedTrace, GroupedTune, build_planned, check_grouped_fits,
                               gpu_tunes, grouped_tunes, plan_grouped, planned_config, set_grouped, split_budget,
                               time_grouped)
from .site_timing import KernelPlan, SiteTiming, timed_kernel

__all__ = ["optimize", "OptimizeReport", "LayerPlan", "Site", "SiteTiming", "RoutedLinear", "capture_sites", "capture",
           "GroupedSite", "GroupedPlan", "GpuBackend", "graph_seconds", "eager_seconds", "interleaved_seconds"]

ERF_GAP = 4.74e-4  # max over x of |gelu_tanh(x) - gelu_erf(x)| (float64, at x = ±2.70)
PLAN_VERSION = 1
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


# --- capture ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Site:
    """One nn.Linear of the model: the GEMM it runs (with the fused activation), calls per forward, the
    activation as torch ran it (relu, gelu_tanh, gelu_erf) and the module name that ran it."""

    name: str
    spec: Optional[GemmSpec]  # None: not a GEMM gemmtune runs (see note)
    calls: int = 1
    activation: Optional[str] = None
    activation_module: Optional[str] = None
    routable: bool = True
    note: str = ""

    @property
    def fused(self) -> Optional[str]:
        """The epilogue op the kernel runs for the activation."""
        return None if self.activation is None else self.activation.split("_")[0]

    def to_json(self) -> dict:
        return {"name": self.name, "spec": self.spec.to_json() if self.spec else None, "calls": self.calls,
                "activation": self.activation, "activation_module": self.activation_module,
                "routable": self.routable, "note": self.note}

    @staticmethod
    def from_json(data: dict) -> "Site":
        spec = GemmSpec.from_json(data["spec"]) if data["spec"] else None
        return Site(data["name"], spec, data["calls"], data["activation"], data["activation_module"],
                    data["routable"], data["note"])


def _letter(t: torch.Tensor) -> str:
    """The layout letter gemmtune.torch reads `t` with (its _as_stored): 'n' row-major (or a copy), 't' a transpose."""
    return "t" if not t.is_contiguous() and t.t().is_contiguous() else "n"


def _gemm_dtype(x: torch.Tensor) -> str:
    if x.dtype not in _DTYPES:
        raise SpecError(f"{x.dtype} input (gemmtune takes float16, bfloat16, float32)")
    tf32 = x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return "tf32" if tf32 else _DTYPES[x.dtype]  # as gemmtune.torch.linear will compute it


def linear_spec(x: torch.Tensor, linear: nn.Linear, activation: Optional[str] = None) -> GemmSpec:
    """The spec gemmtune.torch.linear(x, weight, bias, activation) builds its kernel for."""
    flat = x.reshape(-1, x.shape[-1])
    ops = (["bias_col"] if linear.bias is not None else []) + ([activation] if activation else [])
    layout = _letter(flat) + _letter(linear.weight.t())
    return GemmSpec(flat.shape[0], linear.out_features, linear.in_features, layout=layout, dtype=_gemm_dtype(x),
                    epilogue=Epilogue.parse("+".join(ops) or "none"))


def _activation_kind(module: nn.Module) -> Optional[str]:
    if isinstance(module, nn.ReLU):
        return "relu"
    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu_erf"
    return None


@dataclass
class _Trace:
    """What one forward showed: each Linear's calls, each activation module's inputs, reads per output."""

    linear_calls: dict = field(default_factory=lambda: defaultdict(list))  # name -> [(input, spec or error)]
    outputs: dict = field(default_factory=dict)  # id(output) -> (linear name, output): kept alive, ids stay unique
    reads: Counter = field(default_factory=Counter)  # id(output) -> ops that read it
    fed: dict = field(default_factory=lambda: defaultdict(list))  # activation name -> [linear name or None]

    def linear_hook(self, name: str) -> Callable:
        def hook(module: nn.Linear, args: tuple, out: torch.Tensor) -> None:
            try:
                spec: Any = linear_spec(args[0], module)
            except GemmtuneError as err:
                spec = str(err)
            self.linear_calls[name].append(spec)
            self.outputs[id(out)] = (name, out)
        return hook

    def activation_hook(self, name: str) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            source = self.outputs.get(id(args[0])) if args else None
            self.fed[name].append(source[0] if source is not None and source[1] is args[0] else None)
        return hook

    def count_reads(self, args: tuple, kwargs: dict) -> None:
        for leaf in torch.utils._pytree.tree_leaves((args, kwargs)):
            seen = self.outputs.get(id(leaf))
            if seen is not None and seen[1] is leaf:
                self.reads[id(leaf)] += 1


def _reads_mode(trace: _Trace) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Reads(TorchDispatchMode):  # every aten op sees the real tensors: count who reads a Linear's output
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            trace.count_reads(args, kwargs or {})
            return func(*args, **(kwargs or {}))
    return Reads()


def _run_traced(model: nn.Module, inputs: tuple) -> tuple[_Trace, dict[str, str], GroupedTrace]:
    """One forward under hooks; returns the trace, {activation module name: its kind} and the GroupedLinear calls."""
    trace, kinds, grouped = _Trace(), {}, GroupedTrace()
    handles = grouped.register(model)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(trace.linear_hook(name)))
        elif _activation_kind(module) is not None:
            kinds[name] = _activation_kind(module)
            handles.append(module.register_forward_pre_hook(trace.activation_hook(name)))
    try:
        with torch.no_grad(), _reads_mode(trace):
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return trace, kinds, grouped


def _pairs(trace: _Trace, kinds: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{linear name: (activation module, kind)} where each call of the activation reads an output of
    that one Linear, once for each of its calls, and nothing else reads those outputs: fusing changes no
    other reader, and replacing the module by Identity drops no other caller's activation."""
    pairs = {}
    for act, sources in trace.fed.items():
        linear = sources[0]
        outs = [key for key, (name, _) in trace.outputs.items() if name == linear]
        if (linear is not None and all(s == linear for s in sources) and len(sources) == len(outs)
                and all(trace.reads[key] == 1 for key in outs)):
            pairs[linear] = (act, kinds[act])
    return pairs


def _site(name: str, calls: list, pair: Optional[tuple[str, str]], erf_gelu_atol: Optional[float]) -> Site:
    first, count = calls[0], len(calls)
    if isinstance(first, str):
        return Site(name, None, count, routable=False, note=f"not a gemmtune GEMM: {first}")
    if any(c != first for c in calls):
        return Site(name, first, count, routable=False, note="called with several shapes in one forward")
    if pair is not None and pair[1] == "gelu_erf" and not (erf_gelu_atol or 0.0) >= ERF_GAP:
        return Site(name, first, count, note="erf GELU not fused (kernels' GELU: tanh)")
    if pair is None:
        return Site(name, first, count)
    ops = "+".join(list(first.epilogue.ops) + [pair[1].split("_")[0]])
    spec = GemmSpec(first.m, first.n, first.k, layout=first.layout, dtype=first.dtype, epilogue=Epilogue.parse(ops))
    return Site(name, spec, count, pair[1], pair[0])


def capture(model: nn.Module, inputs: Sequence[Any],
            erf_gelu_atol: Optional[float] = None) -> tuple[tuple[Site, ...], tuple[GroupedSite, ...]]:
    """Every nn.Linear `model(*inputs)` calls, in call order, with the activation fused where it may be, and
    every GroupedLinear with the rows its groups held (one forward; runs on any device, CPU included)."""
    trace, kinds, grouped = _run_traced(model, tuple(inputs))
    pairs = _pairs(trace, kinds)
    linears = tuple(_site(name, calls, pairs.get(name), erf_gelu_atol) for name, calls in trace.linear_calls.items())
    return linears, grouped.sites()


def capture_sites(model: nn.Module, inputs: Sequence[Any], erf_gelu_atol: Optional[float] = None) -> tuple[Site, ...]:
    """capture()'s nn.Linear sites."""
    return capture(model, inputs, erf_gelu_atol)[0]


# --- the plan ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerPlan(KernelPlan):
    """An nn.Linear's kernel (family, config JSON), both times, and the decision."""

    site: Site
    site_type: ClassVar[type] = Site


Plan = LayerPlan | GroupedPlan | FusedPlan  # a site's plan: an nn.Linear's, a GroupedLinear's or a fused site's


@dataclass(frozen=True)
class OptimizeReport:
    """The plan optimize() made or reloaded: per layer, and the model's eager time before and after."""

    layers: tuple[LayerPlan, ...]
    device: str
    model_before_s: Optional[float]
    model_after_s: Optional[float]
    plan_path: Path
    tuning_s: float = 0.0
    reloaded: bool = False
    grouped: tuple[GroupedPlan, ...] = ()  # the GroupedLinear sites (MoE experts)
    fused: tuple[FusedPlan, ...] = ()  # residual adds and SwiGLU found in forward code (fused_sites.py)
    warnings: tuple[str, ...] = ()  # lines for the table (a fused site the reloaded model no longer has)

    def to_json(self) -> dict:
        return {"gemmtune_plan": PLAN_VERSION, "device": self.device, "model_before_s": self.model_before_s,
                "model_after_s": self.model_after_s, "tuning_s": self.tuning_s,
                "layers": [layer.to_json() for layer in self.layers], "grouped": [g.to_json() for g in self.grouped],
                "fused": [f.to_json() for f in self.fused]}

    def table(self) -> str:
        """Markdown: one row a layer, then the model end to end."""
        us = lambda s: f"{s * 1e6:.1f}" if s else "—"  # noqa: E731
        rows = ["| layer | GEMM | calls | torch µs | gemmtune µs | × | routed | why |",
                "|---|---|---:|---:|---:|---:|---|---|"]
        for p in (*self.fused, *self.layers, *self.grouped):
            t = p.timing
            ratio = f"{t.torch_s / t.gemmtune_s:.2f}" if t.torch_s and t.gemmtune_s else "—"
            gemm = p.site.short() if isinstance(p, GroupedPlan) else p.site.spec.short() if p.site.spec else "—"
            rows.append(f"| {p.site.name} | {gemm} | {p.site.calls} | {us(t.torch_s)} | {us(t.gemmtune_s)} | {ratio} | "
                        f"{'yes' if p.routed else 'no'} | {p.reason} |")
        b, a = self.model_before_s, self.model_after_s
        whole = f"{b * 1e3:.3f} ms → {a * 1e3:.3f} ms ({b / a:.2f}×)" if a and b else "not timed"
        how = "reloaded, no tuning or timing" if self.reloaded else f"tuned {self.tuning_s:.0f} s"
        return "\n".join(rows + ["", f"model, eager, {self.device}: {whole}; {how}; plan {self.plan_path}",
                                 *self.warnings])


def save_plan(report: OptimizeReport) -> None:
    """Written whole or not at all (os.replace)."""
    report.plan_path.parent.mkdir(parents=True, exist_ok=True)
    partial = report.plan_path.with_name(report.plan_path.name + ".partial")
    partial.write_text(json.dumps(report.to_json(), indent=1))
    os.replace(partial, report.plan_path)


def load_plan(path: Path) -> OptimizeReport:
    data = read_json_object(path, "a gemmtune optimize plan")
    if data.get("gemmtune_plan") != PLAN_VERSION:
        raise InputFileError(f"{path} is not a gemmtune optimize plan of version {PLAN_VERSION}")
    try:
        layers = tuple(LayerPlan.from_json(layer) for layer in data["layers"])
        grouped = tuple(GroupedPlan.from_json(site) for site in data.get("grouped", []))
        fused = tuple(FusedPlan.from_json(site) for site in data.get("fused", []))
    except (KeyError, TypeError, ValueError, GemmtuneError) as err:
        raise InputFileError(f"{path}: a layer of the plan is damaged ({type(err).__name__}: {err})") from None
    return OptimizeReport(layers, data["device"], data["model_before_s"], data["model_after_s"], path,
                          data.get("tuning_s", 0.0), reloaded=True, grouped=grouped, fused=fused)


def default_plan_path(db_path: Path, model: nn.Module, sites: Sequence[Site],
                      grouped: Sequence[GroupedSite] = (), fused: Sequence[FusedSite] = ()) -> Path:
    """Next to the database, named by the model's class and a digest of its GEMMs (grouped and fused included)."""
    gemms = [s.to_json() for s in sites] + [g.to_json() for g in grouped] + [f.to_json() for f in fused]
    digest = hashlib.sha256(json.dumps(gemms, sort_keys=True).encode()).hexdigest()[:10]
    return db_path.parent / "plans" / f"{type(model).__name__}-{digest}.json"


# --- routing ----------------------------------------------------------------------------------------
class RoutedLinear(nn.Linear):
    """An nn.Linear run by gemmtune.torch.linear, with the activation that followed it fused. It holds
    the original Parameters, so state_dict keys and shared weights stay as they were.

    `compiled_by_torch`: under torch.compile the layer runs as torch ran it (F.linear, then
    `torch_activation`: relu, gelu_tanh or gelu_erf), which inductor can fuse and autotune. optimize() sets
    it where gemmtune's kernel is the slower one inside CUDA graphs, the layer being routed only for the
    host time an eager call saves: compiled code pays no per-call host cost, so there torch's is faster."""

    def __init__(self, linear: nn.Linear, activation: Optional[str] = None, *, compiled_by_torch: bool = False,
                 torch_activation: Optional[str] = None):
        nn.Module.__init__(self)  # not nn.Linear's: that would allocate fresh weights
        self.in_features, self.out_features, self.activation = linear.in_features, linear.out_features, activation
        self.weight = linear.weight
        self.register_parameter("bias", linear.bias)
        self.compiled_by_torch, self.torch_activation = compiled_by_torch, torch_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.compiled_by_torch and torch.compiler.is_compiling():
            return _EAGER[self.torch_activation](nn.functional.linear(x, self.weight, self.bias))
        return _linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        under = ", torch under torch.compile" if self.compiled_by_torch else ""
        return super().extra_repr() + f", gemmtune, activation={self.activation}{under}"


def routed_linear(linear: nn.Linear, plan: "LayerPlan") -> RoutedLinear:
    """The RoutedLinear a plan puts in place of `linear`: torch's ops under torch.compile unless gemmtune's
    kernel was the faster inside CUDA graphs."""
    return RoutedLinear(linear, plan.site.fused, compiled_by_torch=not plan.timing.gemmtune_faster,
                        torch_activation=plan.site.activation)


def _swap(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def route(model: nn.Module, layers: Sequence[LayerPlan], grouped: Sequence[GroupedPlan] = ()) -> None:
    """Swap every routed layer for a RoutedLinear and its fused activation module for Identity; route every
    routed GroupedLinear to gemmtune."""
    for plan in grouped:
        if plan.routed:
            set_grouped(model.get_submodule(plan.site.name), plan, True)
    for plan in layers:
        if plan.routed:
            _swap(model, plan.site.name, routed_linear(model.get_submodule(plan.site.name), plan))
            if plan.site.activation_module:
                _swap(model, plan.site.activation_module, nn.Identity())


def _check_fits(model: nn.Module, layers: Sequence[LayerPlan], path: Path) -> None:
    """Each routed layer of the plan is an nn.Linear of the model with the plan's sizes (one line if not)."""
    for plan in (p for p in layers if p.routed):
        spec, module = plan.site.spec, dict(model.named_modules()).get(plan.site.name)
        if not isinstance(module, nn.Linear) or (module.out_features, module.in_features) != (spec.n, spec.k):
            raise InputFileError(f"plan {path} does not fit this model: {plan.site.name} is not an "
                                 f"nn.Linear({spec.k}, {spec.n}); optimize again with another plan path")


# --- what touches the GPU: one seam, faked in tests -------------------------------------------------
class Backend(Protocol):
    def device_name(self) -> str: ...
    def tune(self, workload: Workload, budget_s: float, db_path: Path, show: bool) -> None: ...
    def config(self, spec: GemmSpec, db_path: Path, tuned: bool) -> tuple[str, dict]: ...
    def install(self, spec: GemmSpec, family: str, config: dict) -> None: ...
    def time_site(self, site: Site) -> SiteTiming: ...
    def time_fused(self, site: FusedSite) -> SiteTiming: ...  # asked only of a model with fused sites
    def time_model(self, model: nn.Module, inputs: tuple) -> float: ...
    # grouped sites (asked only of a model with GroupedLinear modules): optimize_grouped.GroupedBackend
    def grouped_config(self, spec: Any, db_path: Path, tuned: bool) -> dict: ...
    def install_grouped(self, spec: Any, config: dict) -> None: ...
    def time_grouped(self, site: GroupedSite, config: dict) -> SiteTiming: ...
    def tune_grouped(self, tunes: Sequence[GroupedTune], db_path: Path, show: bool) -> None: ...


def graph_seconds(fn: Callable[[], Any], reps: int = 20, samples: int = 15) -> float:
    """Median seconds per call of `fn` replayed in a CUDA graph of `reps` calls (kernel time, no host
    overhead), after warm-up on a side stream (builds, cuBLAS workspaces)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    return _event_median(graph.replay, samples) / reps


def eager_seconds(fn: Callable[[], Any], samples: int = 20, warmup: int = 3) -> float:
    """Median seconds of one eager call of `fn`, CUDA events around each."""
    for _ in range(warmup):
        fn()
    return _event_median(fn, samples)


def alternating_medians(names: Sequence[str], measure: Callable[[str], float], rounds: int) -> dict[str, float]:
    """The median of `measure(name)` for each of `names` over `rounds` rounds, each round measuring every
    name once in an order rotated round by round, so that drift in the host's speed over the run (eager
    blocks are often host-bound) falls on each alike."""
    names = list(names)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(measure(name))
    return {name: statistics.median(t) for name, t in times.items()}


def interleaved_seconds(fns: dict[str, Callable[[], Any]], rounds: int = 20, warmup: int = 3) -> dict[str, float]:
    """Median seconds of one eager call of each of `fns`, timed in alternating rounds (alternating_medians)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    return alternating_medians(list(fns), lambda name: event_seconds(fns[name]), rounds)


def event_seconds(fn: Callable[[], Any]) -> float:
    """Seconds between CUDA events recorded on the current stream before and after one call of `fn`."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


def _event_median(fn: Callable[[], Any], samples: int) -> float:
    return statistics.median(event_seconds(fn) for _ in range(samples))


_EAGER = {None: lambda y: y, "relu": torch.relu, "gelu_tanh": lambda y: nn.functional.gelu(y, approximate="tanh"),
          "gelu_erf": nn.functional.gelu}


@dataclass(frozen=True)
class GpuBackend:
    """The real thing, on GPU `device` (default: the current one)."""

    device: Optional[int] = None

    @property
    def index(self) -> int:
        return torch.cuda.current_device() if self.device is None else self.device

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.index)

    def tune(self, workload: Workload, budget_s: float, db_path: Path, show: bool) -> None:
        _tune_many(workload, budget_s, db_path, show)

    def config(self, spec: GemmSpec, db_path: Path, tuned: bool) -> tuple[str, dict]:
        """The tuned best from the database, else (budget 0, or no trial ran) build()'s untuned pick."""
        from ..device import query_device
        from ..kernels import family_of_config
        from ..tune.db import best_known_trial
        from ..tune.many import family_of, untuned_config

        device = query_device(self.index)
        found = best_known_trial(spec, device, db_path) if tuned else None
        config = found.result.config if found else untuned_config(spec, device.arch, family_of(spec, device.arch, None))
        return family_of_config(config).name, config.to_json()

    def install(self, spec: GemmSpec, family: str, config: dict) -> None:
        """Build the planned kernel and put it in gemmtune.torch's kernel cache, where linear() finds it
        (the cache would otherwise build from the default database, not the plan)."""
        from . import operators as gt
        from ..build import build
        from ..kernels import get_family

        kernel = build(spec, config=get_family(family).config_from_json(config), arch=gt._arch_of(self.index))
        gt.install_kernel(spec, self.index, kernel)

    def time_site(self, site: Site) -> SiteTiming:
        from . import operators as gt
        from ..verify import tolerance

        x, w, b = _operands(site.spec, self.index)
        ours = lambda: gt.linear(x, w, b, site.fused)  # noqa: E731
        theirs = lambda: _EAGER[site.activation](nn.functional.linear(x, w, b))  # noqa: E731
        got, want = ours().float(), theirs().float()
        error = float((got - want).norm() / want.norm().clamp_min(1e-30))
        if not error <= 2 * tolerance(site.spec.dtype, site.spec.k, roundings=2):
            return SiteTiming(None, graph_seconds(theirs), f"wrong output (relative error {error:.2e})")
        return SiteTiming(graph_seconds(ours), graph_seconds(theirs))

    def time_fused(self, site: FusedSite) -> SiteTiming:
        from .fused_sites import time_fused

        return time_fused(site, self.index, graph_seconds)

    def time_model(self, model: nn.Module, inputs: tuple) -> float:
        with torch.no_grad():
            return eager_seconds(lambda: model(*inputs))

    def grouped_config(self, spec: Any, db_path: Path, tuned: bool) -> dict:
        """The fastest config of the spec's key in `db_path` (tuned), else the default (optimize_grouped)."""
        return planned_config(spec, self.index, db_path, tuned)

    def install_grouped(self, spec: Any, config: dict) -> None:
        """Build and keep the planned kernel (the routed module names its config: GroupedLinear.gemmtune_config)."""
        build_planned(spec, config, self.index)

    def time_grouped(self, site: GroupedSite, config: dict) -> SiteTiming:
        return time_grouped(site, config, self.index, graph_seconds)

    def tune_grouped(self, tunes: Sequence[GroupedTune], db_path: Path, show: bool) -> None:
        gpu_tunes(tunes, self.index, db_path, show)


def _operands(spec: GemmSpec, index: int) -> tuple:
    """x (M×K), weight (N×K), bias (N) in the spec's storage (uniform in ±1), each as the spec reads it."""
    kind = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(spec.dtype, torch.float32)
    make = lambda *shape: torch.rand(*shape, device=f"cuda:{index}").mul_(2).sub_(1).to(kind)  # noqa: E731
    x = make(spec.k, spec.m).t() if spec.layout[0] == "t" else make(spec.m, spec.k)
    w = make(spec.n, spec.k) if spec.layout[1] == "t" else make(spec.k, spec.n).t()
    return x, w, (make(spec.n) if "bias_col" in spec.epilogue.ops else None)


def _tune_many(workload: Workload, budget_s: float, db_path: Path, show: bool) -> None:
    """tune-many's own path: its runners (a local Dask cluster, one worker a GPU, when several GPUs are
    visible and the dask extra is installed), its per-shape progress bars, its priming."""
    import argparse
    from contextlib import closing, nullcontext

    from ..build import target_arch
    from ..cli.many_cmds import ShapeProgress, runner_source, worker_count
    from ..tune.db import TuningDB
    from ..tune.many import tune_many, workload_families
    from ..tune.priming import primed_candidates
    from ..tune.tuner import TuneOptions

    args = argparse.Namespace(simulate=None, scheduler=None, workers=None, timeout=60.0)
    arch = target_arch(None)
    runner_for, _, client, _ = runner_source(args, dict(zip((s.spec for s in workload.shapes), workload.shares())))
    at_once = 1 if client is None else min(len(workload.shapes), worker_count(client, args))
    options = TuneOptions(strategy="evolutionary", remeasure_top=3, lookahead=client is not None)
    display = ShapeProgress()
    with TuningDB(db_path) as db, closing(client) if client is not None else nullcontext(), closing(display), \
            primed_candidates(workload_families(workload, arch, None), arch):
        tune_many(workload, runner_for, db, arch, options, None, budget_s, None,
                  on_shape=display.start if show else None, shapes_at_once=at_once)


# --- optimize ---------------------------------------------------------------------------------------
def flop_workload(sites: Sequence[Site]) -> Workload:
    """The distinct GEMMs, each with its count and its share of the FLOPs (tune-many splits the budget
    by it, at least 1 s a GEMM)."""
    counts: Counter = Counter()
    for site in sites:
        if site.routable:
            counts[site.spec] += site.calls
    total = sum(spec.flops * n for spec, n in counts.items()) or 1
    return Workload(tuple(WorkloadShape(spec, n, spec.flops * n / total) for spec, n in counts.items()))


class _Bar:
    """The project's trial progress bar (cli.tune_cmds.trial_progress) over the layers being timed."""

    def __init__(self, total: int, show: bool):
        from ..cli.tune_cmds import trial_progress

        self.bar = trial_progress("[bold]timing {task.description}") if show and total else None
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("layers vs torch", total=total, failures=0, best="—")

    def step(self, kept: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failures=kept, best=f"{kept} kept as torch")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _plan_site(site: Site, backend: Backend, db_path: Path, tuned: bool, memo: dict) -> LayerPlan:
    """Time one layer (a GEMM seen before is not timed again) and decide: gemmtune only where faster."""
    if not site.routable:
        return LayerPlan(site, "", {}, SiteTiming(None, None), False, site.note)
    family, config, timing = timed_kernel(memo, (site.spec, site.activation), site.spec, backend, db_path, tuned,
                                          lambda: backend.time_site(site))
    return LayerPlan(site, family, config, timing, timing.gemmtune_faster,
                     timing.verdict + (f"; {site.note}" if site.note else ""))


def _reload(model: nn.Module, path: Path, backend: Backend, inputs: tuple) -> OptimizeReport:
    report = load_plan(path)
    here = backend.device_name()
    if here != report.device:
        raise InputFileError(f"plan {path} was made on {report.device}, this GPU is {here}: optimize again")
    _check_fits(model, report.layers, path)
    check_grouped_fits(model, report.grouped, path)
    if any(p.routed for p in report.fused):  # scanned again before any module is swapped
        install = lambda p: backend.install(p.site.spec, p.family, p.config) if p.family else None  # noqa: E731
        fused, warnings = reload_fused(model, inputs, report.fused, capture_sites(model, inputs), install)
        report = replace(report, fused=tuple(fused), warnings=tuple(warnings))
    for plan in (p for p in report.layers if p.routed):
        backend.install(plan.site.spec, plan.family, plan.config)
    for grouped in (p for p in report.grouped if p.routed):
        backend.install_grouped(grouped.site.spec, grouped.config)
    route(model, report.layers, report.grouped)
    return report


def optimize(model: nn.Module, example_inputs: Any, budget: float = 60.0, *, plan: Optional[str | Path] = None,
             db: Optional[str | Path] = None, erf_gelu_atol: Optional[float] = None, progress: bool = True,
             backend: Optional[Backend] = None) -> OptimizeReport:
    """Route `model`'s nn.Linear and GroupedLinear layers (in place) to gemmtune where its kernel is faster,
    and return the report. `budget`: seconds of tuning in all, shared by FLOPs between the Linear sites' GEMMs
    and the grouped sites (0: build()'s untuned pick and the grouped default config, timed and routed).
    `plan`: the plan file; when it exists it is reloaded (no tuning, no timing), else written there
    (default: next to the database `db`, under plans/). `erf_gelu_atol`: the error an exact-erf
    nn.GELU may take to be fused as the kernels' tanh GELU (at least ERF_GAP fuses it)."""
    backend = backend or GpuBackend()
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if plan is not None and Path(plan).exists():
        return _reload(model, Path(plan), backend, inputs)
    if budget < 0:
        raise SpecError(f"budget is seconds of tuning, 0 or more, not {budget}")
    from ..tune.db import default_db_path

    db_path = Path(db) if db is not None else default_db_path()
    sites, grouped_sites = capture(model, inputs, erf_gelu_atol)
    fused_sites = find_fused(model, inputs, sites)
    started = time.monotonic()
    tunable = [f for f in fused_sites if f.spec is not None]  # add sites' GEMMs and SwiGLU sites' gated GEMMs
    workload = flop_workload([*supersede(sites, fused_sites), *tunable])
    _tune(backend, workload, grouped_tunes(grouped_sites), float(budget), db_path, progress)
    tuning_s = time.monotonic() - started
    layers, memo, bar = [], {}, _Bar(len(sites) + len(grouped_sites) + len(fused_sites), progress)
    want = model_output(model, inputs) if fused_sites else []
    try:
        for fused_site in fused_sites:  # first: the Linears inside a fused site gemmtune runs right are not sites
            layers.append(plan_fused(fused_site, backend, db_path, budget > 0, memo, model, inputs, want))
            bar.step(sum(not p.routed for p in layers))
        for site in supersede(sites, [p.site for p in layers if _runs_right(p)]):
            layers.append(_plan_site(site, backend, db_path, budget > 0, memo))
            bar.step(sum(not p.routed for p in layers))
        for grouped_site in grouped_sites:
            layers.append(plan_grouped(grouped_site, backend, memo, db_path, budget > 0))
            bar.step(sum(not p.routed for p in layers))
    finally:
        bar.close()
    layers, before, after = _choose_end_to_end(model, inputs, layers, backend)
    linear_plans = tuple(p for p in layers if isinstance(p, LayerPlan))
    grouped_plans = tuple(p for p in layers if isinstance(p, GroupedPlan))
    fused_plans = tuple(p for p in layers if isinstance(p, FusedPlan))
    path = Path(plan) if plan is not None else default_plan_path(db_path, model, sites, grouped_sites, fused_sites)
    report = OptimizeReport(linear_plans, backend.device_name(), before, after, path, tuning_s, grouped=grouped_plans,
                            fused=fused_plans)
    save_plan(report)
    return report


def _tune(backend: Backend, workload: Workload, tunes: Sequence[GroupedTune], budget_s: float, db_path: Path,
          show: bool) -> None:
    """`budget_s` seconds of tuning shared by FLOPs x calls between the Linear sites' GEMMs (tune-many, which
    splits its part the same way) and each grouped site's spec and rows (the grouped tuner), all in `db_path`."""
    if budget_s <= 0:
        return
    linear_flops = float(sum(shape.spec.flops * shape.count for shape in workload.shapes))
    linear_s, tunes = split_budget(budget_s, linear_flops, tunes)
    if workload.shapes:
        backend.tune(workload, linear_s, db_path, show)
    if tunes:
        backend.tune_grouped(tunes, db_path, show)


MODEL_ROUNDS = 5  # rounds of the end-to-end comparison; each times every variant once, in a rotated order


def _choose_end_to_end(model: nn.Module, inputs: tuple, layers: list[Plan],
                       backend: Backend) -> tuple[list[Plan], float, float]:
    """Route the variant of the model that runs fastest eagerly, end to end: no layer routed, the layers
    faster alone, or every layer gemmtune runs right (an eager block is often host-bound: a routed call
    costs less host time than F.linear's, so a layer a little slower on the GPU can still make the whole
    faster). The variants are timed in alternating rounds (MODEL_ROUNDS, medians), so that the host's
    drift over the run falls on each alike. Returns the plans (routed as chosen, each with why where the
    whole overrode its own timing) and the model's time without and with them."""
    variants = {"torch": [False] * len(layers), "faster": [p.routed for p in layers],
                "every": [_runs_right(p) for p in layers]}
    if variants["every"] == variants["faster"]:
        del variants["every"]
    if not any(variants["faster"]):
        del variants["faster"]
    if len(variants) == 1:
        alone = backend.time_model(model, inputs)
        return layers, alone, alone
    switches = _switches(model, layers)

    def routed_as(name: str) -> float:
        _set_routing(switches, variants[name])
        return backend.time_model(model, inputs)

    median = alternating_medians(list(variants), routed_as, MODEL_ROUNDS)
    best = min(("faster", "torch", "every"), key=lambda name: median.get(name, float("inf")))  # ties: in this order
    _set_routing(switches, variants[best])
    return _with_reasons(layers, variants[best], median), median["torch"], median[best]


def _runs_right(plan: Plan) -> bool:
    """Whether gemmtune runs the site right: routable, and its kernel timed (so its output was checked)."""
    return plan.site.routable and plan.timing.gemmtune_s is not None


def _switches(model: nn.Module, layers: Sequence[Plan]) -> list[Optional[Callable[[bool], None]]]:
    """Per plan, what routes its site (True) or puts it back as it was (False); None where gemmtune does not
    run it right. A Linear swaps modules (the original and its fused activation's, or a RoutedLinear and an
    Identity), a GroupedLinear sets its flags."""
    out: list[Optional[Callable[[bool], None]]] = []
    for p in layers:
        if not _runs_right(p):
            out.append(None)
        elif isinstance(p, GroupedPlan):
            out.append(lambda routed, m=model.get_submodule(p.site.name), p=p: set_grouped(m, p, routed))
        elif isinstance(p, FusedPlan):
            out.append(lambda routed, p=p: set_fused(model, p, routed))
        else:
            linear = model.get_submodule(p.site.name)
            swaps = [(p.site.name, linear, routed_linear(linear, p))]
            if p.site.activation_module:
                swaps.append((p.site.activation_module, model.get_submodule(p.site.activation_module), nn.Identity()))
            out.append(lambda routed, swaps=swaps: [_swap(model, name, new if routed else old) for name, old, new in swaps])
    return out


def _set_routing(switches: Sequence[Optional[Callable[[bool], None]]], flags: Sequence[bool]) -> None:
    for switch, routed in zip(switches, flags):
        if switch is not None:
            switch(routed)


def _with_reasons(layers: list[Plan], flags: Sequence[bool], median: dict[str, float]) -> list[Plan]:
    """The plans routed as the chosen variant; where that overrode a layer's own timing, the plan says why."""
    whole = ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in median.items())
    out = []
    for p, routed in zip(layers, flags):
        if routed == p.routed:
            out.append(p)
        elif routed:
            out.append(replace(p, routed=True, reason=f"routed with every layer: faster end to end ({whole})"))
        else:
            out.append(replace(p, routed=False, reason=f"kept as torch: faster end to end ({whole})"))
    return out
