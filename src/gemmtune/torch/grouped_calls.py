"""GroupedLinear's call path (issues 68 and 69): a launch plan per call shape, so a call of a shape seen before
writes pointers and launches.

    y = grouped_linear(x, weight, offs, bias, "swiglu", config)   # weight stored (G, rows, K), as GroupedLinear keeps it

What gemmtune.torch.grouped_mm did on every call, and what this path does once per (tokens' shape and dtype,
weight shape, bias, activation, config, GPU) in `_plan_for`: the checks of every operand's rank, shapes and
dtypes, the epilogue's text, GroupedSpec's construction and validation, the config lookup (tuned.chosen_config:
two frozen dataclasses hashed a call), the kernel cache's lock, two transposed views of the weight and its
contiguity check, the bindings dict and its key, torch.cuda.current_stream's Stream object (~4 µs) and
cuCtxSetCurrent through cuda-python on every launch; before that, torch.library.custom_op's Python dispatch
(it checks aliasing on each call). Now a plain eager call (CUDA tensors, no autograd needed, no torch.compile,
torch function or dispatch mode) costs one dict lookup, a few attribute reads, D's allocation, the raw stream
handle and the bound launch (`_GroupedPlan.launch`: packed arguments and tensor maps by pointers and stream,
as operators._Plan). Torch's path pays three ops (torch._grouped_mm, silu, mul) and two slicing views for
SwiGLU.

Everything else (torch.compile, make_fx, fake tensors, autograd, odd strides) goes through the operator
`gemmtune::grouped_linear`, a torch.library definition with a fake implementation (so torch.compile(fullgraph=
True) traces it as one node) whose CUDA implementation runs the same plans. Neither path reads offs on the host,
so a captured CUDA graph replays with whatever offs then hold.

`config`: a GroupedConfig as JSON text (what optimize() planned for the module), or None/"" for the spec's tuned
config (grouped.tuned.chosen_config: the tuning database's fastest for its key, else the default). A planned
config that does not fit another call shape (another total_m) gives way to that shape's own.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import SpecError
from ..grouped.config import rejections
from ..grouped.launch import build
from ..grouped.spec import GroupedSpec
from ..grouped.tuned import chosen_config
from ..invoke import BoundLaunches
from .operators import _current_device, _on_device, _raw_stream

__all__ = ["grouped_linear", "grouped_plan_stats", "ACTIVATIONS"]

ACTIVATIONS = ("relu", "gelu", "swiglu")
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
BOUND_PER_PLAN = 64  # bound launches a plan keeps (by pointers and stream); the oldest goes first
PLANS_KEPT = 256  # call shapes remembered; the oldest goes first


class _GroupedPlan:
    """One grouped kernel on one GPU and what its calls need besides pointers: D's shape and type, the
    operands' expected dtype and shapes, and bound launches by (A, W, offs, D, bias, stream)."""

    __slots__ = ("spec", "config", "loaded", "out_shape", "out_type", "groups", "has_bias", "launches")

    def __init__(self, spec: GroupedSpec, kernel: Any, out_type: torch.dtype):
        self.spec, self.config, self.loaded = spec, kernel.config, kernel.loaded
        self.out_shape, self.out_type = (spec.total_m, spec.n), out_type
        self.groups, self.has_bias = spec.groups, spec.has_bias
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
def _check(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str]) -> tuple:
    """(epilogue text, swiglu, D's columns), or a one-line SpecError saying what does not fit."""
    if activation not in (None, *ACTIVATIONS):
        raise SpecError(f"grouped_linear: activation {activation!r} unsupported; use relu, gelu or swiglu")
    if x.dim() != 2 or weight.dim() != 3 or offs.dim() != 1 or weight.shape[2] != x.shape[1] \
            or offs.shape[0] != weight.shape[0]:
        raise SpecError(f"grouped_linear: x {tuple(x.shape)}, weight {tuple(weight.shape)}, offs {tuple(offs.shape)}; "
                        "expected x (M, K), weight (G, N, K), offs (G,)")
    if x.dtype not in _DTYPES or weight.dtype != x.dtype or offs.dtype != torch.int32:
        raise SpecError(f"grouped_linear: x, weight {x.dtype}, {weight.dtype} (bf16 or fp16, the same) and offs "
                        f"{offs.dtype} (int32)")
    rows = weight.shape[1]
    if activation == "swiglu":
        if bias is not None:
            raise SpecError("grouped_linear: swiglu takes no bias")
        if rows % 2:
            raise SpecError(f"grouped_linear: swiglu needs weight (G, 2F, K), gate rows then up; {rows} rows is odd")
        return "none", True, rows // 2
    if bias is not None and (tuple(bias.shape) != (weight.shape[0], rows) or bias.dtype != x.dtype):
        raise SpecError(f"grouped_linear: bias {tuple(bias.shape)} {bias.dtype}; expected (G, N) {x.dtype}")
    ops = ([] if bias is None else ["bias"]) + ([activation] if activation else [])
    return "+".join(ops) or "none", False, rows


def _spec(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str]) -> GroupedSpec:
    epilogue, swiglu, columns = _check(x, weight, offs, bias, activation)
    return GroupedSpec(weight.shape[0], x.shape[0], columns, x.shape[1], _DTYPES[x.dtype], epilogue, swiglu)


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


def _plan_key(x: Tensor, weight: Tensor, bias: Optional[Tensor], activation: Optional[str], config: Optional[str],
              index: int) -> tuple:
    return (x.shape, x.dtype, weight.shape, bias is None, activation, config or None, index)


def _plan_for(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
              config: Optional[str], index: int) -> _GroupedPlan:
    """The plan of the call's shape: checked, its spec made, its config looked up and its kernel built (a
    disk-cached compile) on the first call of the shape, then kept."""
    key = _plan_key(x, weight, bias, activation, config, index)
    plan = _plans.get(key)
    if plan is None:
        spec = _spec(x, weight, offs, bias, activation)
        plan = _GroupedPlan(spec, build(spec, _config(spec, config, index), index), x.dtype)
        with _plans_lock:
            if len(_plans) >= PLANS_KEPT:
                _plans.pop(next(iter(_plans)), None)
            _plans[key] = plan
    return plan


def forget_plans() -> None:
    """Drop every plan (their kernels stay in grouped.launch's cache): the next call of each shape looks its
    config up again (after a tune, or a change of database)."""
    with _plans_lock:
        _plans.clear()


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


def _run(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
         config: str) -> Tensor:
    """The operator's CUDA work (and a fast-path miss's): checks, the plan, D, the launch."""
    columns = _check(x, weight, offs, bias, activation)[2]  # the fake's checks first: the same errors
    if not x.is_cuda:
        raise SpecError(f"gemmtune::grouped_linear runs on CUDA tensors; x is on {x.device}")
    index = x.get_device()
    for name, t in (("weight", weight), ("offs", offs), ("bias", bias)):
        if t is not None and t.get_device() != index:
            raise SpecError(f"grouped_linear: {name} is on {t.device} but x on {x.device}: move them to one GPU")
    out = x.new_empty((x.shape[0], columns))
    if out.numel() == 0:
        return out
    x, weight, offs, bias = _aligned(x), _aligned(weight), offs.contiguous(), _aligned(bias)
    plan = _plan_for(x, weight, offs, bias, activation, config, index)
    _launch(plan, index, x.data_ptr(), weight.data_ptr(), offs.data_ptr(), out.data_ptr(),
            0 if bias is None else bias.data_ptr())
    return out


_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while it traces
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_depth = torch._C._len_torch_dispatch_stack
_grad_enabled = torch.is_grad_enabled
_PLAIN = (Tensor, torch.nn.Parameter)
_INT32 = torch.int32


def _eager_ok(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether the call may skip the operator: plain CUDA tensors, no mode that should see the op, no autograd."""
    if _dispatch_depth() or _function_mode() or not x.is_cuda:
        return False
    if type(x) not in _PLAIN or type(weight) not in _PLAIN or type(offs) not in _PLAIN \
            or (bias is not None and type(bias) not in _PLAIN):
        return False
    return not (_grad_enabled() and (x.requires_grad or weight.requires_grad
                                     or (bias is not None and bias.requires_grad)))


def _fast(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str],
          config: Optional[str]) -> Optional[Tensor]:
    """A plain eager call of a shape seen before (planned on its first): D allocated, the kernel enqueued;
    None where the call needs the operator (which checks and says what does not fit)."""
    if not _eager_ok(x, weight, offs, bias) or not (x.is_contiguous() and weight.is_contiguous()):
        return None
    index = x.get_device()
    plan = _plans.get(_plan_key(x, weight, bias, activation, config, index))
    if plan is None:
        if not x.shape[0] or x.dim() != 2:
            return None
        plan = _plan_for(x, weight, offs, bias, activation, config, index)  # checks: a misfit raises its SpecError
    if offs.dtype is not _INT32 or offs.shape[0] != plan.groups or not offs.is_contiguous() \
            or offs.get_device() != index or weight.get_device() != index:
        return None
    pa, pw = x.data_ptr(), weight.data_ptr()
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


# D = epilogue(x · weight[g]ᵀ) over each group's rows, weight stored (G, rows, K). A torch.library definition (as
# operators' gemm): the same schema and fake as custom_op, without its per-call Python wrapper.
_LIB = torch.library.Library("gemmtune", "FRAGMENT")
_LIB.define("grouped_linear(Tensor x, Tensor weight, Tensor offs, Tensor? bias, str? activation, str config) -> Tensor")
_LIB.impl("grouped_linear", _run, "CUDA")
_LIB.impl("grouped_linear", _run, "CPU")  # CPU tensors get _run's one-line SpecError
grouped_linear_op = torch.ops.gemmtune.grouped_linear.default


def _fake(x, weight, offs, bias, activation, config):
    return x.new_empty((x.shape[0], _check(x, weight, offs, bias, activation)[2]))


torch.library.register_fake("gemmtune::grouped_linear", _fake, lib=_LIB)


def grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
                   activation: Optional[str] = None, config: Optional[str] = None) -> Tensor:
    """GroupedLinear's gemmtune path: x (M, K) sorted by group, weight (G, N, K) stored as nn.Linear stores each
    ((G, 2F, K) for swiglu: gate rows, then up), offs (G,) int32 cumulative row ends on the device, bias (G, N);
    rows past offs[-1] are left unwritten. `config`: GroupedConfig JSON text, or None for the spec's tuned one."""
    if not _is_compiling():
        out = _fast(x, weight, offs, bias, activation, config)
        if out is not None:
            return out
    return grouped_linear_op(x, weight, offs, bias, activation, config or "")
