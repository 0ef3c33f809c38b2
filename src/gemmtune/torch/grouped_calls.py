"""The torch entry points of the grouped kernel and their one call path (issues 68 and 69): a launch plan per call
shape, so a call of a shape seen before writes pointers and launches.

    y = grouped_linear(x, weight, offs, None, "swiglu", config)   # weight stored (G, rows, K), as GroupedLinear has it
    y = grouped_mm(a, w.transpose(1, 2), offs, bias, "relu")      # torch._grouped_mm: b (G, K, N) a view of w (G, N, K)
    y = grouped_mm_masked(a3, w.transpose(1, 2), counts)          # a3 (G, capacity, K), counts (G,) on the device
    y = bmm(a, b)                                                 # (B, M, K) @ (B, K, N) as B equal groups

Each entry point is a `_Form` (how it takes its operands: A two- or three-dimensional, the weight stored (G, N, K)
or its (G, K, N) view) over one set of functions: the checks, the spec, the plan cache, the operator's CUDA work
and the eager fast path. What the first call of a shape does, and a later one does not, in `_plan_for`: the checks
of every operand's rank, shapes and dtypes, the epilogue's text, GroupedSpec's construction and validation, the
config lookup (tuned.chosen_config: two frozen dataclasses hashed a call), the kernel cache's lock; besides, the
fast path skips weight views and their contiguity check (b's strides are compared with the plan's), the bindings
dict and its key, torch.cuda.current_stream's Stream object (~4 µs) and cuCtxSetCurrent through cuda-python on
every launch, and the operator's dispatch. A plain eager call (CUDA tensors, no autograd needed, no
torch.compile, torch function or dispatch mode) of a shape seen before costs one dict lookup, a few attribute
reads, D's allocation, the raw stream handle and the bound launch (`_GroupedPlan.launch`: packed arguments and
tensor maps by pointers and stream, as operators._Plan); new pointers bind once more (argument packing; tensor
maps come from the loaded kernel's cache by pointer).

Everything else (torch.compile, make_fx, fake tensors, autograd, odd strides such as a (G, K, N) b that is not
the view of stored weights, which is copied) goes through the operators `gemmtune::grouped_linear`,
`gemmtune::grouped_mm` and `gemmtune::grouped_mm_masked`: torch.library definitions with fake implementations (so
torch.compile(fullgraph=True) traces each as one node) whose CUDA implementation runs the same plans. None has an
autograd formula. Nothing reads offs (counts) on the host, so a captured CUDA graph replays with whatever they
then hold.

`config` (grouped_linear): a GroupedConfig as JSON text (what optimize() planned for the module), or None/"" for
the spec's tuned config (grouped.tuned.chosen_config: the tuning database's fastest for its key, else the
default). A planned config that does not fit another call shape (another total_m) gives way to that shape's own.
Plans are dropped when the tuned configs are (tuned.use_database, tuned.forget), so a later call looks again.
"""
from __future__ import annotations

import json
import threading
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor

from ..errors import SpecError
from ..grouped import tuned
from ..grouped.config import rejections
from ..grouped.launch import build
from ..grouped.spec import GroupedSpec
from ..grouped.tuned import chosen_config
from ..invoke import BoundLaunches
from .operators import _current_device, _on_device, _raw_stream

__all__ = ["grouped_linear", "grouped_mm", "grouped_mm_masked", "bmm", "grouped_plan_stats", "forget_plans",
           "ACTIVATIONS"]

ACTIVATIONS = ("relu", "gelu", "swiglu")
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
BOUND_PER_PLAN = 64  # bound launches a plan keeps (by pointers and stream); the oldest goes first
PLANS_KEPT = 256  # call shapes remembered; the oldest goes first


class _Form(NamedTuple):
    """How an entry point takes its operands: A (M, K) with offs, or (G, capacity, K) with counts (masked); the
    weight stored (G, rows, K), or b (G, K, rows), the transposed view of such weights (torch._grouped_mm's)."""

    op: str
    masked: bool
    transposed: bool
    names: tuple[str, str, str]  # A, the weight, the group rows, as errors name them
    expected: str


LINEAR = _Form("grouped_linear", False, False, ("x", "weight", "offs"), "x (M, K), weight (G, N, K), offs (G,)")
MM = _Form("grouped_mm", False, True, ("a", "b", "offs"), "a (M, K), b (G, K, N), offs (G,)")
MASKED = _Form("grouped_mm_masked", True, True, ("a", "b", "counts"), "a (G, capacity, K), b (G, K, N), counts (G,)")


class _GroupedPlan:
    """One grouped kernel on one GPU and what its calls need besides pointers: D's shape and type, b's strides
    where it holds stored weights (no copy), and bound launches by (A, W, offs, D, bias, stream)."""

    __slots__ = ("spec", "config", "loaded", "out_shape", "out_type", "b_strides", "groups", "has_bias", "launches")

    def __init__(self, spec: GroupedSpec, kernel: Any, out_type: torch.dtype, transposed: bool):
        self.spec, self.config, self.loaded = spec, kernel.config, kernel.loaded
        columns = spec.n
        self.out_shape = (spec.groups, spec.capacity, columns) if spec.masked_layout else (spec.total_m, columns)
        self.out_type, self.groups, self.has_bias = out_type, spec.groups, spec.has_bias
        rows, k = spec.weight_rows, spec.k
        self.b_strides = (rows * k, 1, k) if transposed else (rows * k, k, 1)
        self.launches = BoundLaunches(BOUND_PER_PLAN)

    def launch(self, pa: int, pw: int, poffs: int, pd: int, pbias: int, stream: int) -> None:
        key = (pa, pw, poffs, pd, pbias, stream)
        bound = self.launches.find(key)
        if bound is None:
            bound = self.launches.get(key, lambda: self._bind(key))
        bound()

    def _bind(self, key: tuple) -> Any:
        pa, pw, poffs, pd, pbias, stream = key
        bindings = {"A": pa, "B": pw, "offs": poffs, "D": pd}
        if self.has_bias:
            bindings["bias"] = pbias
        _binds[0] += 1
        return self.loaded.bind(bindings, stream)


_plans: dict[tuple, _GroupedPlan] = {}
_plans_lock = threading.Lock()
_binds = [0]  # launches bound so far (misses: argument packing and tensor maps)


def grouped_plan_stats() -> dict[str, int]:
    """Grouped launch plans, the bound launches they keep, and the binds calls have made so far (an eager loop
    whose binds keep growing pays argument packing and tensor maps on every call)."""
    return {"plans": len(_plans), "bound": sum(len(p.launches) for p in _plans.values()), "binds": _binds[0]}


# --- the checks, the spec and the plan: once per call shape -----------------------------------------
def _weight_dims(form: _Form, b: Tensor) -> tuple[int, int]:
    """(the weight's rows, K) of b as the form takes it."""
    return (b.shape[2], b.shape[1]) if form.transposed else (b.shape[1], b.shape[2])


def _shapes_fit(form: _Form, x: Tensor, b: Tensor, offs: Tensor) -> bool:
    if b.dim() != 3 or offs.dim() != 1 or offs.shape[0] != b.shape[0]:
        return False
    k = _weight_dims(form, b)[1]
    if form.masked:
        return x.dim() == 3 and x.shape[0] == b.shape[0] and x.shape[2] == k
    return x.dim() == 2 and x.shape[1] == k


def _check(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor],
           activation: Optional[str]) -> tuple[str, bool, int]:
    """(epilogue text, swiglu, D's columns), or a one-line SpecError saying what does not fit."""
    op, (xn, bn, rn) = form.op, form.names
    if activation not in (None, *ACTIVATIONS):
        raise SpecError(f"{op}: activation {activation!r} unsupported; use relu, gelu or swiglu")
    if not _shapes_fit(form, x, b, offs):
        raise SpecError(f"{op}: {xn} {tuple(x.shape)}, {bn} {tuple(b.shape)}, {rn} {tuple(offs.shape)}; "
                        f"expected {form.expected}")
    if x.dtype not in _DTYPES or b.dtype != x.dtype or offs.dtype != torch.int32:
        raise SpecError(f"{op}: {xn}, {bn} {x.dtype}, {b.dtype} (bf16 or fp16, the same) and {rn} {offs.dtype} (int32)")
    rows = _weight_dims(form, b)[0]
    if activation == "swiglu":
        if bias is not None:
            raise SpecError(f"{op}: swiglu takes no bias")
        if rows % 2:
            raise SpecError(f"{op}: swiglu needs 2F weight rows per group, gate then up (torch.cat([w_gate, w_up], "
                            f"dim=1)); {rows} is odd")
        return "none", True, rows // 2
    if bias is not None and (tuple(bias.shape) != (b.shape[0], rows) or bias.dtype != x.dtype):
        raise SpecError(f"{op}: bias {tuple(bias.shape)} {bias.dtype}; expected (G, N) {x.dtype}")
    ops = ([] if bias is None else ["bias"]) + ([activation] if activation else [])
    return "+".join(ops) or "none", False, rows


def _spec(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor],
          activation: Optional[str]) -> GroupedSpec:
    epilogue, swiglu, columns = _check(form, x, b, offs, bias, activation)
    groups, k, dtype = b.shape[0], x.shape[-1], _DTYPES[x.dtype]
    if form.masked:
        return GroupedSpec.masked(groups, x.shape[1], columns, k, dtype, epilogue, swiglu)
    return GroupedSpec(groups, x.shape[0], columns, k, dtype, epilogue, swiglu)


def _config(spec: GroupedSpec, config: Optional[str], index: int) -> Any:
    """The planned config where given and fitting the spec, else the spec's tuned one (chosen_config)."""
    if config:
        from ..tune.grouped_records import config_from_json

        try:
            planned = config_from_json(json.loads(config))
        except (TypeError, ValueError) as err:
            raise SpecError(f"grouped_linear: config {config!r} is not a GroupedConfig ({err})") from None
        if not rejections(planned, spec):
            return planned
    return chosen_config(spec, index)


def _plan_key(form: _Form, x: Tensor, b: Tensor, bias: Optional[Tensor], activation: Optional[str],
              config: Optional[str], index: int) -> tuple:
    return (form.op, x.shape, x.dtype, b.shape, bias is None, activation, config or None, index)


def _plan_for(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
              config: Optional[str], index: int) -> _GroupedPlan:
    """The plan of the call's shape: checked, its spec made, its config looked up and its kernel built (a
    disk-cached compile) on the first call of the shape, then kept."""
    key = _plan_key(form, x, b, bias, activation, config, index)
    plan = _plans.get(key)
    if plan is None:
        spec = _spec(form, x, b, offs, bias, activation)
        plan = _GroupedPlan(spec, build(spec, _config(spec, config, index), index), x.dtype, form.transposed)
        with _plans_lock:
            if len(_plans) >= PLANS_KEPT:
                _plans.pop(next(iter(_plans)), None)
            _plans[key] = plan
    return plan


def forget_plans() -> None:
    """Drop every plan (their kernels stay in grouped.launch's cache): the next call of each shape looks its
    config up again (after a tune, or a change of database: tuned calls this)."""
    with _plans_lock:
        _plans.clear()


tuned.on_forget(forget_plans)


# --- launching ----------------------------------------------------------------------------------------
def _launch(plan: _GroupedPlan, index: int, pa: int, pw: int, poffs: int, pd: int, pbias: int) -> None:
    """Enqueue on torch's current stream of GPU `index` (under torch.cuda.device where another GPU is current)."""
    if _current_device() != index:
        with torch.cuda.device(index):
            _launch(plan, index, pa, pw, poffs, pd, pbias)
        return
    _on_device(index)
    plan.launch(pa, pw, poffs, pd, pbias, _raw_stream(index))


def _aligned(t: Optional[Tensor]) -> Optional[Tensor]:
    """`t` row-major and 16-byte aligned, as TMA reads it (a copy only where it is not)."""
    if t is None:
        return None
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _stored(form: _Form, b: Tensor) -> Tensor:
    """The weights (G, rows, K) row-major and aligned: no copy for stored weights or their (G, K, rows) view."""
    return _aligned(b.transpose(1, 2) if form.transposed else b)


def _run(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
         config: Optional[str]) -> Tensor:
    """An operator's CUDA work (and a fast-path miss's): checks, the plan, D, the launch."""
    columns = _check(form, x, b, offs, bias, activation)[2]  # the fake's checks first: the same errors
    if not x.is_cuda:
        raise SpecError(f"gemmtune::{form.op} runs on CUDA tensors; {form.names[0]} is on {x.device}")
    index = x.get_device()
    for name, t in ((form.names[1], b), (form.names[2], offs), ("bias", bias)):
        if t is not None and t.get_device() != index:
            raise SpecError(f"{form.op}: {name} is on {t.device} but {form.names[0]} on {x.device}: "
                            "move them to one GPU")
    out = x.new_empty((*x.shape[:-1], columns))
    if out.numel() == 0:
        return out
    x, weight, offs, bias = _aligned(x), _stored(form, b), offs.contiguous(), _aligned(bias)
    plan = _plan_for(form, x, b, offs, bias, activation, config, index)
    _launch(plan, index, x.data_ptr(), weight.data_ptr(), offs.data_ptr(), out.data_ptr(),
            0 if bias is None else bias.data_ptr())
    return out


_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while it traces
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_depth = torch._C._len_torch_dispatch_stack
_grad_enabled = torch.is_grad_enabled
_PLAIN = (Tensor, torch.nn.Parameter)
_INT32 = torch.int32


def _eager_ok(x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether the call may skip the operator: plain CUDA tensors, no mode that should see the op, no autograd."""
    if _dispatch_depth() or _function_mode() or not x.is_cuda:
        return False
    if type(x) not in _PLAIN or type(b) not in _PLAIN or type(offs) not in _PLAIN \
            or (bias is not None and type(bias) not in _PLAIN):
        return False
    return not (_grad_enabled() and (x.requires_grad or b.requires_grad
                                     or (bias is not None and bias.requires_grad)))


def _fast(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
          config: Optional[str] = None) -> Optional[Tensor]:
    """A plain eager call (planned on the first of its shape): D allocated, the kernel enqueued; None where the
    call needs the operator (which checks and says what does not fit, and copies what is not row-major)."""
    if not _eager_ok(x, b, offs, bias) or not x.is_contiguous():
        return None
    index = x.get_device()
    plan = _plans.get(_plan_key(form, x, b, bias, activation, config, index))
    if plan is None:
        if not (x.numel() and b.numel()):
            return None  # an empty D: the operator returns it
        plan = _plan_for(form, x, b, offs, bias, activation, config, index)  # checks: a misfit raises its SpecError
    if b.stride() != plan.b_strides or offs.dtype is not _INT32 or offs.shape[0] != plan.groups \
            or not offs.is_contiguous() or offs.get_device() != index or b.get_device() != index:
        return None
    pa, pw = x.data_ptr(), b.data_ptr()
    if bias is None:
        pbias = 0
    else:
        if bias.dtype is not x.dtype or not bias.is_contiguous() or bias.get_device() != index:
            return None
        pbias = bias.data_ptr()
    if (pa | pw | pbias) & 15:
        return None
    out = torch.empty(plan.out_shape, dtype=plan.out_type, device=x.device)
    _launch(plan, index, pa, pw, offs.data_ptr(), out.data_ptr(), pbias)
    return out


# --- the operators: torch.library definitions (as operators' gemm), their fakes, the entry points -------------
_LIB = torch.library.Library("gemmtune", "FRAGMENT")
_LIB.define("grouped_linear(Tensor x, Tensor weight, Tensor offs, Tensor? bias, str? activation, str config) -> Tensor")
_LIB.define("grouped_mm(Tensor a, Tensor b, Tensor offs, Tensor? bias=None, str? activation=None) -> Tensor")
_LIB.define("grouped_mm_masked(Tensor a, Tensor b, Tensor counts, Tensor? bias=None, str? activation=None) -> Tensor")


def _register(form: _Form, run: Any, fake: Any) -> Any:
    """run for CUDA and CPU tensors (CPU ones get _run's one-line SpecError), fake for shapes; the op's overload."""
    _LIB.impl(form.op, run, "CUDA")
    _LIB.impl(form.op, run, "CPU")
    torch.library.register_fake(f"gemmtune::{form.op}", fake, lib=_LIB)
    return getattr(torch.ops.gemmtune, form.op).default


def _fake(form: _Form, x: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str]) -> Tensor:
    return x.new_empty((*x.shape[:-1], _check(form, x, b, offs, bias, activation)[2]))


grouped_linear_op = _register(
    LINEAR, lambda x, weight, offs, bias, activation, config: _run(LINEAR, x, weight, offs, bias, activation, config),
    lambda x, weight, offs, bias, activation, config: _fake(LINEAR, x, weight, offs, bias, activation))
grouped_mm_op = _register(
    MM, lambda a, b, offs, bias=None, activation=None: _run(MM, a, b, offs, bias, activation, None),
    lambda a, b, offs, bias=None, activation=None: _fake(MM, a, b, offs, bias, activation))
grouped_mm_masked_op = _register(
    MASKED, lambda a, b, counts, bias=None, activation=None: _run(MASKED, a, b, counts, bias, activation, None),
    lambda a, b, counts, bias=None, activation=None: _fake(MASKED, a, b, counts, bias, activation))


def grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
                   activation: Optional[str] = None, config: Optional[str] = None) -> Tensor:
    """GroupedLinear's gemmtune path: x (M, K) sorted by group, weight (G, N, K) stored as nn.Linear stores each
    ((G, 2F, K) for swiglu: gate rows, then up), offs (G,) int32 cumulative row ends on the device, bias (G, N);
    rows past offs[-1] are left unwritten. `config`: GroupedConfig JSON text, or None for the spec's tuned one."""
    if not _is_compiling():
        out = _fast(LINEAR, x, weight, offs, bias, activation, config)
        if out is not None:
            return out
    return grouped_linear_op(x, weight, offs, bias, activation, config or "")


def grouped_mm(a: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
               activation: Optional[str] = None) -> Tensor:
    """torch._grouped_mm(a, b, offs) in one gemmtune launch (sm_90a), then + bias[g] and the activation: a (M, K),
    b (G, K, N) best the transposed view of weights stored (G, N, K) (else copied per call), offs (G,) int32
    cumulative row ends on the device; rows past offs[-1] are left unwritten. activation="swiglu": b (G, K, 2F)
    the view of torch.cat([w_gate, w_up], dim=1), D (M, F) = silu(a·w_gateᵀ) * (a·w_upᵀ) per group; no bias."""
    if not _is_compiling():
        out = _fast(MM, a, b, offs, bias, activation)
        if out is not None:
            return out
    return grouped_mm_op(a, b, offs, bias, activation)


def grouped_mm_masked(a: Tensor, b: Tensor, counts: Tensor, bias: Optional[Tensor] = None,
                      activation: Optional[str] = None) -> Tensor:
    """The masked layout (decode under CUDA graphs: shapes fixed, counts change on the device): a (G, capacity,
    K), b (G, K, N), counts (G,) int32; D[g, :counts[g]] = a[g, :counts[g]] · b[g] (+ bias[g], activation as
    grouped_mm's, swiglu included). Counts are clamped to [0, capacity] on the device and never read on the host;
    D's rows past each count are left unwritten (uninitialised memory)."""
    if not _is_compiling():
        out = _fast(MASKED, a, b, counts, bias, activation)
        if out is not None:
            return out
    return grouped_mm_masked_op(a, b, counts, bias, activation)


_bmm_offsets: dict[tuple[int, int, torch.device], Tensor] = {}


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """a (B, M, K) @ b (B, K, N) as B equal groups of grouped_mm (their offs made once per shape and device)."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise SpecError(f"bmm: a {tuple(a.shape)}, b {tuple(b.shape)}; expected (B, M, K), (B, K, N)")
    batch, m = a.shape[0], a.shape[1]
    key = (batch, m, a.device)
    offs = _bmm_offsets.get(key)
    if offs is None:
        offs = _bmm_offsets[key] = torch.arange(1, batch + 1, device=a.device, dtype=torch.int32) * m
    return grouped_mm(a.reshape(batch * m, a.shape[2]), b, offs).view(batch, m, b.shape[2])
