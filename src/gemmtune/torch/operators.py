"""gemmtune kernels as PyTorch operators (gemmtune.torch re-exports them).

    import gemmtune.torch as gt
    y = gt.mm(a, b)                                 # a (M, K) @ b (K, N); transposed views read in place
    y = gt.mm(a, b, epilogue="relu+add", c=c)       # D = ReLU(A·B) + C in one kernel
    y = gt.addmm(bias, x, w.t())                    # torch.addmm semantics, the add fused
    y = gt.linear(x, w, b, activation="gelu")       # F.linear + activation, fused
    layer = gt.Linear(4096, 4096, activation="relu", device="cuda", dtype=torch.bfloat16)

Every call goes through one operator, ``gemmtune::gemm`` (a torch.library.Library definition with a
fake implementation for shapes and an autograd formula), so ``torch.compile(fullgraph=True)`` traces through it without a graph
break. Kernels are enqueued on torch's current stream, so CUDA-graph capture and side streams see
them (a kernel with state of its own, such as a split tail's partial tiles, runs one launch at a time
across streams: stream_order.py). A kernel is built (NVRTC) once per (spec, device) and kept. Autograd works: the backward is two
more gemmtune GEMMs (plus one that recomputes the pre-activation when the epilogue has relu or gelu).

The call path (issue 68): what does not change between calls is kept in a launch plan per (shape, layout,
dtype, epilogue, GPU): the loaded kernel, its operands' expected types and shapes, and its bound launches
(packed arguments, TMA descriptors, the dependent-launch configuration) by operand pointers and stream, so
a call with pointers seen before only launches. Eager calls that need no autograd and run under no
tracing or dispatch mode skip the operator's dispatcher; linear() and mm() calls of a shape seen before
(`_calls`: the plan, D's shape with x's leading dimensions, so no reshape) cost one dict lookup, a few
attribute reads, D's allocation and the launch (`_linear_fast`, `_mm_fast`); everything else (autograd,
torch.compile, make_fx, fake tensors, copies of operands that are not row-major or transposed views)
goes through the general path and `gemmtune::gemm`, which run the same plans. The context: made current
once per thread and GPU (`_on_device`); a call on another GPU than torch's current one runs under
torch.cuda.device, which switches back after. Python cost a call on a CPU (scratch harness, CUDA and the
driver faked, 2026-11-29): RoutedLinear's forward (module call included) 11.6-14.4 µs before the calls
seen were kept, 5.7-6.6 after (nn.Linear's module call with F.linear on tiny CPU tensors: 4.8-6.7);
gt.linear 8-11 → 3.6-4.1; gt.mm 10.4-10.9 → 5.1-5.4.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Optional

try:
    import torch
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    from ..errors import GemmtuneError

    raise GemmtuneError("gemmtune.torch needs PyTorch: pip install 'gemmtune[torch]'") from exc

from torch import Tensor

from ..build import Kernel, build
from ..device import ensure_context
from ..epilogue import Epilogue
from ..errors import SpecError
from ..invoke import BoundLaunches, torch_current_stream
from ..spec import GemmSpec

__all__ = ["mm", "addmm", "linear", "Linear", "kernel_for", "cached_kernels", "install_kernel"]

# torch element type -> gemmtune dtype of A and B (float32 becomes tf32 where torch allows tf32).
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_STORAGE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
_ACTIVATIONS = ("relu", "gelu")


# --- the kernel cache -------------------------------------------------------------------------------
_kernels: dict[tuple[GemmSpec, int], Kernel] = {}
_kernels_lock = threading.Lock()


def _arch_of(device_index: int) -> str:
    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm_{major}{minor}"


def kernel_for(spec: GemmSpec, device_index: int) -> Kernel:
    """The gemmtune kernel for `spec` on GPU `device_index`: built (best known config) on first use."""
    key = (spec, device_index)
    with _kernels_lock:
        if key not in _kernels:
            _kernels[key] = build(spec, arch=_arch_of(device_index))
        return _kernels[key]


def cached_kernels() -> dict[tuple[GemmSpec, int], Kernel]:
    """A copy of the cache: {(spec, device index): kernel}."""
    with _kernels_lock:
        return dict(_kernels)


def install_kernel(spec: GemmSpec, device_index: int, kernel: Kernel) -> None:
    """Make `kernel` the one calls of `spec` on GPU `device_index` run (optimize_model's plans), dropping
    any launch plan built on the kernel it replaces."""
    with _kernels_lock:
        _kernels[(spec, device_index)] = kernel
        _plans.clear()
        _calls.clear()


# --- launch plans: what does not change between calls ----------------------------------------------
BOUND_PER_PLAN = 64  # bound launches a plan keeps (by pointers, scalars and stream); the oldest goes first


class _Plan:
    """One kernel on one GPU, and what its calls need besides their pointers: D's type, C's and the
    bias's expected shape, and bound launches (runtime.BoundLaunch: packed arguments, tensor maps,
    staging copies) by (A, B, D, C, bias pointers, alpha, beta, stream)."""

    __slots__ = ("spec", "loaded", "out_type", "in_type", "needs", "launches")

    def __init__(self, spec: GemmSpec, kernel: Kernel, index: int):
        self.spec = spec
        self.loaded = kernel.loaded(index)
        self.out_type = _STORAGE[spec.out_dtype]
        self.in_type = _STORAGE[spec.dtype]
        self.needs = {op.name: op.shape(spec.m, spec.n) for op in spec.epilogue.operands()}
        self.launches = BoundLaunches(BOUND_PER_PLAN)

    def fits(self, a: Tensor, b: Tensor, c: Optional[Tensor], bias: Optional[Tensor]) -> bool:
        """Whether the operands are what the plan's spec takes (shapes of A and B are in the plan's
        key): A's and B's type, and C and bias present exactly when the epilogue reads them, each of
        D's type and its shape. Where not, _spec and _check_operands say why in one line."""
        if a.dtype is not self.in_type or b.dtype is not self.in_type:
            return False
        for name, tensor in (("C", c), ("bias", bias)):
            shape = self.needs.get(name)
            if (tensor is None) != (shape is None):
                return False
            if tensor is not None and (tensor.dtype is not self.out_type or tuple(tensor.shape) != shape):
                return False
        return True

    def launch(self, key: tuple, stream: int) -> None:
        bound = self.launches.find(key)
        if bound is None:
            bound = self.launches.get(key, lambda: self._bind(key, stream))
        bound()

    def _bind(self, key: tuple, stream: int) -> Any:
        a, b, d, c, bias, alpha, beta, _ = key
        values = {"A": a, "B": b, "D": d, "C": c, "bias": bias, "alpha": alpha, "beta": beta}
        source = self.loaded.source
        wanted = set(source.args) | {t.operand for t in source.tensor_maps}
        _binds[0] += 1
        return self.loaded.bind({name: values[name] for name in wanted if name in values}, stream)


_plans: dict[tuple, _Plan] = {}
_binds = [0]  # launches bound so far (plan misses: argument packing and tensor maps), for plan_stats


def plan_stats() -> dict[str, int]:
    """Launch plans, the bound launches they keep, and how many binds (misses) calls have made so far: an
    eager loop whose binds keep growing pays the packing and tensor maps on every call."""
    return {"plans": len(_plans), "bound": sum(len(p.launches) for p in _plans.values()), "binds": _binds[0]}


_context_ready = threading.local()  # .devices: GPUs whose primary context this thread has made current


def _plan_for(a: Tensor, b: Tensor, layout: str, epilogue: str, dtype: str, index: int) -> _Plan:
    m, n, k = _problem(a, b, layout)
    key = (m, n, k, layout, epilogue, dtype, index)
    plan = _plans.get(key)
    if plan is None:
        spec = _spec(a, b, layout, epilogue, dtype)
        plan = _Plan(spec, kernel_for(spec, index), index)
        with _kernels_lock:
            _plans[key] = plan
    return plan


def _on_device(index: int) -> None:
    """The primary context of GPU `index` current on this thread, as the loaded kernels need; called
    while torch's current device is `index`. Made so once per thread and device: torch's runtime keeps
    that device's primary context current on the thread from then on (cudaSetDevice makes it current,
    and cudaGetDevice reports the device of whatever context is current, so a context another
    library made current shows as another torch device and comes back here through torch.cuda.device)."""
    try:
        devices = _context_ready.devices
    except AttributeError:
        devices = _context_ready.devices = set()
    if index not in devices:
        ensure_context(index)
        devices.add(index)


# --- the operator -----------------------------------------------------------------------------------
def _problem(a: Tensor, b: Tensor, layout: str) -> tuple[int, int, int]:
    """(M, N, K) of stored operands `a`, `b` in `layout`, or a SpecError saying what does not fit."""
    if a.dim() != 2 or b.dim() != 2:
        raise SpecError(f"gemmtune::gemm takes 2-D operands, got A {tuple(a.shape)} and B {tuple(b.shape)}")
    m, k = (a.shape[1], a.shape[0]) if layout[0] == "t" else (a.shape[0], a.shape[1])
    k_b, n = (b.shape[1], b.shape[0]) if layout[1] == "t" else (b.shape[0], b.shape[1])
    if k != k_b:
        raise SpecError(f"inner dimensions differ: A is {m}×{k}, B is {k_b}×{n} (layout {layout})")
    return int(m), int(n), int(k)


def _spec(a: Tensor, b: Tensor, layout: str, epilogue: str, dtype: str) -> GemmSpec:
    if a.dtype != b.dtype:
        raise SpecError(f"A is {a.dtype} but B is {b.dtype}: cast one of them")
    if _STORAGE.get(dtype) != a.dtype:
        raise SpecError(f"operands are {a.dtype}, which gemmtune dtype {dtype!r} does not take")
    m, n, k = _problem(a, b, layout)
    return GemmSpec(m, n, k, layout=layout, dtype=dtype, epilogue=Epilogue.parse(epilogue))


def _check_operands(spec: GemmSpec, c: Optional[Tensor], bias: Optional[Tensor]) -> None:
    """C and bias present exactly when the epilogue reads them, with the right shape and type."""
    given = {"C": c, "bias": bias}
    needed = {op.name: op.shape(spec.m, spec.n) for op in spec.epilogue.operands()}
    out_type = _STORAGE[spec.out_dtype]
    for name, tensor in given.items():
        if name not in needed:
            if tensor is not None:
                raise SpecError(f"epilogue '{spec.epilogue}' takes no {name}")
            continue
        if tensor is None:
            raise SpecError(f"epilogue '{spec.epilogue}' needs {name} {needed[name]}")
        if tuple(tensor.shape) != needed[name] or tensor.dtype != out_type:
            raise SpecError(f"{name} must be {out_type} of shape {needed[name]}, "
                            f"got {tensor.dtype} {tuple(tensor.shape)}")


def _ready(x: Optional[Tensor]) -> Optional[Tensor]:
    """`x` as the kernel reads it: row-major and 16-byte aligned (a copy only when it is not)."""
    if x is None:
        return None
    x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _pointer(x: Optional[Tensor]) -> tuple[Optional[Tensor], int]:
    """`x` as the kernel reads it (_ready: a copy only when not row-major or not 16-byte aligned), and its
    address (0 for None). The tensor is returned so that a copy lives until the launch is enqueued."""
    if x is None:
        return None, 0
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = _ready(x)
    return x, x.data_ptr()


def _checked_plan(a: Tensor, b: Tensor, c: Optional[Tensor], bias: Optional[Tensor], layout: str, epilogue: str,
                  dtype: str, index: int) -> _Plan:
    """The plan for the call, after the checks the fake implementation makes: where the operands do not
    fit, the same one-line SpecError it raises."""
    plan = _plan_for(a, b, layout, epilogue, dtype, index)
    if not plan.fits(a, b, c, bias):
        _spec(a, b, layout, epilogue, dtype)
        _check_operands(plan.spec, c, bias)
    return plan


def _run(a: Tensor, b: Tensor, c: Optional[Tensor], bias: Optional[Tensor], alpha: float, beta: float,
         layout: str, epilogue: str, dtype: str) -> Tensor:
    """The operator's work: the plan for the problem (built and checked on its first call), D allocated,
    the operands' pointers bound (once per pointer set) and the kernel enqueued on torch's current stream."""
    if not a.is_cuda:
        raise SpecError(f"gemmtune::gemm runs on CUDA tensors; A is on {a.device}")
    index = a.get_device()
    for name, t in (("B", b), ("C", c), ("bias", bias)):
        if t is not None and t.get_device() != index:
            raise SpecError(f"{name} is on {t.device} but A on {a.device}: move them to one GPU")
    plan = _checked_plan(a, b, c, bias, layout, epilogue, dtype, index)
    out = torch.empty((plan.spec.m, plan.spec.n), dtype=plan.out_type, device=a.device)
    (a, pa), (b, pb), (c, pc), (bias, pbias) = _pointer(a), _pointer(b), _pointer(c), _pointer(bias)
    _launch(plan, index, pa, pb, out.data_ptr(), pc, pbias, alpha, beta)
    return out


def _torch_current_device() -> int:
    return torch.cuda.current_device()


# torch's own C functions where torch has CUDA (a CUDA tensor exists, so CUDA is initialised): the current
# GPU and the raw handle of its current stream without torch.cuda's Python wrappers.
_current_device = getattr(torch._C, "_cuda_getDevice", None) or _torch_current_device
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or torch_current_stream


def _launch(plan: _Plan, index: int, pa: int, pb: int, pd: int, pc: int, pbias: int, alpha: float,
            beta: float) -> None:
    """Enqueue the plan's kernel on torch's current stream of GPU `index` with these operand pointers: the
    launch bound for them before, else bound now (argument packing, tensor maps). A call on another GPU
    than torch's current one runs under torch.cuda.device, which switches back after."""
    if _current_device() != index:
        with torch.cuda.device(index):
            _launch(plan, index, pa, pb, pd, pc, pbias, alpha, beta)
        return
    _on_device(index)
    stream = _raw_stream(index)
    plan.launch((pa, pb, pd, pc, pbias, alpha, beta, stream), stream)


# D = epilogue(op(a)·op(b)) for stored operands a, b in `layout` (nn/nt/tn/tt), computed by the gemmtune
# kernel for the spec (dtype: fp32, tf32, fp16 or bf16). Defined through torch.library.Library rather than
# custom_op: the same schema, fake and autograd, but ~4 µs less dispatch a call (custom_op's Python
# backend wrapper checks aliasing; CPU timing, 13.3 against 8.6 µs). _LIB lives as long as the module:
# its registrations go with it.
_LIB = torch.library.Library("gemmtune", "FRAGMENT")
_LIB.define("gemm(Tensor a, Tensor b, Tensor? c, Tensor? bias, float alpha, float beta, str layout, "
            "str epilogue, str dtype) -> Tensor")
_LIB.impl("gemm", _run, "CUDA")
_LIB.impl("gemm", _run, "CPU")  # CPU tensors get _run's one-line SpecError, not a missing-kernel error
gemm = torch.ops.gemmtune.gemm.default


_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while it traces
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_depth = torch._C._len_torch_dispatch_stack  # user and infra (fake, proxy, functional) modes
_grad_enabled = torch.is_grad_enabled


def _direct(*tensors: Optional[Tensor]) -> bool:
    """Whether an eager call may skip the operator's dispatcher: no autograd needed, plain CUDA tensors,
    and no torch.compile tracing, torch function or dispatch mode that should see the operator."""
    if _is_compiling() or _dispatch_depth() or _function_mode() or not tensors[0].is_cuda:
        return False
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or (grad and t.requires_grad)):
            return False
    return True


_PLAIN = (Tensor, torch.nn.Parameter)  # tensor types the direct path takes (a subclass may override ops)


def _gemm_fake(a, b, c, bias, alpha, beta, layout, epilogue, dtype):
    spec = _spec(a, b, layout, epilogue, dtype)
    _check_operands(spec, c, bias)
    return a.new_empty((spec.m, spec.n), dtype=_STORAGE[spec.out_dtype])


torch.library.register_fake("gemmtune::gemm", _gemm_fake, lib=_LIB)


# --- autograd ---------------------------------------------------------------------------------------
def _setup_context(ctx, inputs, output) -> None:
    a, b, c, bias, alpha, beta, layout, epilogue, dtype = inputs
    ctx.save_for_backward(a, b, c, bias)
    ctx.alpha, ctx.beta, ctx.layout, ctx.epilogue, ctx.dtype = alpha, beta, layout, epilogue, dtype


def _activation_grad(name: str, x: Tensor) -> Tensor:
    """d act / dx at the pre-activation x (float32)."""
    if name == "relu":
        return (x > 0).to(x.dtype)
    k = math.sqrt(2.0 / math.pi)  # the tanh form of GELU, as the kernels compute it
    t = torch.tanh(k * (x + 0.044715 * x * x * x))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x)


def _epilogue_grads(ctx, grad: Tensor, a, b, c, bias) -> tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Walk the epilogue chain backwards: (grad of A·B, grad of C, grad of bias), in float32."""
    ops = Epilogue.parse(ctx.epilogue).ops
    g, grad_c, grad_bias = grad.float(), None, None
    for i in reversed(range(len(ops))):
        op = ops[i]
        if op == "add":
            grad_c = g
        elif op == "beta":
            grad_c = ctx.beta * g
        elif op == "bias_col":
            grad_bias = g.sum(0)
        elif op == "bias_row":
            grad_bias = g.sum(1)
        elif op == "alpha":
            g = ctx.alpha * g
        else:  # an activation: recompute its input, the chain before it, with one more GEMM
            prefix = "+".join(ops[:i]) or "none"
            reads = Epilogue.parse(prefix).operands()
            keep_c = c if any(o.name == "C" for o in reads) else None
            keep_bias = bias if any(o.name == "bias" for o in reads) else None
            x = gemm(a, b, keep_c, keep_bias, ctx.alpha, ctx.beta, ctx.layout, prefix, ctx.dtype).float()
            g = g * _activation_grad(op, x)
    return g, grad_c, grad_bias


def _backward(ctx, grad: Tensor):
    a, b, c, bias = ctx.saved_tensors
    g, grad_c, grad_bias = _epilogue_grads(ctx, grad, a, b, c, bias)
    g = g.to(a.dtype)
    a_log = a.t() if ctx.layout[0] == "t" else a  # the logical M×K and K×N operands
    b_log = b.t() if ctx.layout[1] == "t" else b
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:  # dA = g·Bᵀ, returned in A's stored orientation
        grad_a = _mm(b_log, g.t(), ctx.dtype) if ctx.layout[0] == "t" else _mm(g, b_log.t(), ctx.dtype)
    if ctx.needs_input_grad[1]:  # dB = Aᵀ·g, likewise
        grad_b = _mm(g.t(), a_log, ctx.dtype) if ctx.layout[1] == "t" else _mm(a_log.t(), g, ctx.dtype)
    grad_c = grad_c.to(c.dtype) if grad_c is not None and ctx.needs_input_grad[2] else None
    grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None and ctx.needs_input_grad[3] else None
    return grad_a, grad_b, grad_c, grad_bias, None, None, None, None, None


torch.library.register_autograd("gemmtune::gemm", _backward, setup_context=_setup_context, lib=_LIB)


# --- the functions users call -----------------------------------------------------------------------
def _as_stored(x: Tensor) -> tuple[Tensor, str]:
    """A logical 2-D operand as (row-major tensor, layout letter): itself ('n'), the transpose it is a
    view of ('t', read in place), or a row-major copy."""
    if x.is_contiguous():
        return x, "n"
    if x.t().is_contiguous():
        return x.t(), "t"
    return x.contiguous(), "n"


def _dtype_of(x: Tensor) -> str:
    if x.dtype not in _DTYPES:
        raise SpecError(f"gemmtune computes in float16, bfloat16 or float32, not {x.dtype}")
    if x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"  # torch would use tf32 tensor cores here too
    return _DTYPES[x.dtype]


def _mm(a: Tensor, b: Tensor, dtype: str, epilogue: str = "none", c: Optional[Tensor] = None,
        bias: Optional[Tensor] = None, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    (stored_a, layout_a), (stored_b, layout_b) = _as_stored(a), _as_stored(b)
    return _call(stored_a, stored_b, layout_a + layout_b, dtype, epilogue, c, bias, alpha, beta)


def _call(a: Tensor, b: Tensor, layout: str, dtype: str, epilogue: str = "none", c: Optional[Tensor] = None,
          bias: Optional[Tensor] = None, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """gemmtune::gemm on stored operands: straight to _run where the dispatcher is not needed (_direct)."""
    c = c.contiguous() if c is not None else None
    call = _run if _direct(a, b, c, bias) else gemm
    return call(a, b, c, bias, float(alpha), float(beta), layout, epilogue, dtype)


# --- eager calls seen before: one lookup, then pointers and the launch ----------------------------------
CALLS_KEPT = 256  # call shapes remembered (mm and linear together); the oldest goes first


class _Seen:
    """What an eager call of one shape needs besides its pointers: the plan, D's shape as the caller gets
    it (linear: x's leading dimensions kept, so no reshape) and type, and for float32 inputs the gemmtune
    dtype (tf32 or fp32) torch's switch gave when it was made (the switch may change)."""

    __slots__ = ("plan", "out_shape", "out_type", "fp32_as")

    def __init__(self, plan: _Plan, out_shape: tuple, fp32_as: Optional[str]):
        self.plan, self.out_shape, self.out_type, self.fp32_as = plan, out_shape, plan.out_type, fp32_as


_calls: dict[tuple, _Seen] = {}


def _remember(key: tuple, seen: _Seen) -> _Seen:
    with _kernels_lock:  # another thread's insertion would break the iteration
        if len(_calls) >= CALLS_KEPT:
            _calls.pop(next(iter(_calls)), None)
        _calls[key] = seen
    return seen


def _plain_eager(x: Tensor, w: Tensor, b: Optional[Tensor], c: Optional[Tensor] = None) -> bool:
    """_direct's test, with the compile check left to the caller (done first, so that dynamo traces none
    of the fast path): plain CUDA tensors, no mode, no autograd needed."""
    if _dispatch_depth() or _function_mode() or not x.is_cuda:
        return False
    if type(x) not in _PLAIN or type(w) not in _PLAIN or (b is not None and type(b) not in _PLAIN) \
            or (c is not None and type(c) not in _PLAIN):
        return False
    return not (_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)
                                     or (c is not None and c.requires_grad)))


def _letter(x: Tensor) -> Optional[str]:
    """_as_stored's layout letter of a 2-D `x` without making the transposed view: 'n' row-major, 't' a
    transpose of a row-major tensor (same pointer), None when it needs a copy."""
    if x.is_contiguous():
        return "n"
    (d0, d1), (s0, s1) = x.shape, x.stride()
    return "t" if (d0 == 1 or s0 == 1) and (d1 == 1 or s1 == d0) else None


def _mm_fast(a: Tensor, b: Tensor, epilogue: str, c: Optional[Tensor], bias: Optional[Tensor], alpha: float,
             beta: float) -> Optional[Tensor]:
    """mm() for a plain eager call of a shape seen before (built on its first): D allocated and the kernel
    enqueued; None where the call needs the general path (which says what does not fit)."""
    if a.dim() != 2 or b.dim() != 2 or not _plain_eager(a, b, bias, c) or b.dtype is not a.dtype:
        return None
    la, lb = _letter(a), _letter(b)
    if la is None or lb is None:
        return None
    index = a.get_device()
    key = (a.shape, b.shape, la, lb, a.dtype, epilogue, index)
    seen = _calls.get(key)
    if seen is None or (seen.fp32_as is not None and seen.fp32_as != _dtype_of(a)):
        if a.dtype not in _DTYPES:
            return None
        dtype = _dtype_of(a)
        stored_a, stored_b = (a.t() if la == "t" else a), (b.t() if lb == "t" else b)
        plan = _checked_plan(stored_a, stored_b, c, bias, la + lb, epilogue, dtype, index)
        seen = _remember(key, _Seen(plan, (plan.spec.m, plan.spec.n), dtype if a.dtype is torch.float32 else None))
    plan = seen.plan
    if c is None and bias is None:
        if plan.needs:
            return None
        pc = pbias = 0
    else:
        if not plan.fits(a, b, c, bias) or (c is not None and not c.is_contiguous()) \
                or (bias is not None and not bias.is_contiguous()):
            return None
        pc, pbias = (0 if c is None else c.data_ptr()), (0 if bias is None else bias.data_ptr())
        if (c is not None and c.get_device() != index) or (bias is not None and bias.get_device() != index):
            return None
    pa, pb = a.data_ptr(), b.data_ptr()
    if (pa | pb | pc | pbias) & 15 or b.get_device() != index:
        return None
    out = torch.empty(seen.out_shape, dtype=seen.out_type, device=a.device)
    _launch(plan, index, pa, pb, out.data_ptr(), pc, pbias, float(alpha), float(beta))
    return out


def _linear_fast(x: Tensor, w: Tensor, b: Optional[Tensor], activation: Optional[str]) -> Optional[Tensor]:
    """linear() for a plain eager call of a shape seen before (built on its first): x and the weight as
    stored (layout nt), D allocated in the output's shape and the kernel enqueued; None where the call
    needs the general path (which says what does not fit)."""
    if not _plain_eager(x, w, b) or not (x.is_contiguous() and w.is_contiguous()) or w.dtype is not x.dtype:
        return None
    index = x.get_device()
    key = (x.shape, x.dtype, w.shape, None if b is None else b.shape, activation, index)
    seen = _calls.get(key)
    if seen is None or (seen.fp32_as is not None and seen.fp32_as != _dtype_of(x)):
        if x.dtype not in _DTYPES or x.dim() == 0 or w.dim() != 2 or min(w.shape) <= 1 \
                or (activation is not None and activation not in _ACTIVATIONS):
            return None
        dtype = _dtype_of(x)
        ops = (["bias_col"] if b is not None else []) + ([activation] if activation else [])
        plan = _checked_plan(x.reshape(-1, x.shape[-1]), w, None, b, "nt", "+".join(ops) or "none", dtype, index)
        seen = _remember(key, _Seen(plan, (*x.shape[:-1], w.shape[0]), dtype if x.dtype is torch.float32 else None))
    pa, pb = x.data_ptr(), w.data_ptr()
    if b is None:
        pbias = 0
    else:
        if b.dtype is not seen.out_type or not b.is_contiguous() or b.get_device() != index:
            return None
        pbias = b.data_ptr()
    if (pa | pb | pbias) & 15 or w.get_device() != index:
        return None
    out = torch.empty(seen.out_shape, dtype=seen.out_type, device=x.device)
    _launch(seen.plan, index, pa, pb, out.data_ptr(), 0, pbias, 1.0, 1.0)
    return out


def mm(a: Tensor, b: Tensor, epilogue: Optional[str] = None, *, c: Optional[Tensor] = None,
       bias: Optional[Tensor] = None, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """epilogue(a @ b) for 2-D a (M, K) and b (K, N): any gemmtune epilogue ("relu+add", "bias_col+gelu",
    "alpha+beta", ...) with its operands c (M, N), bias (M or N), alpha, beta in D's type."""
    if not _is_compiling():
        out = _mm_fast(a, b, epilogue or "none", c, bias, alpha, beta)
        if out is not None:
            return out
    if a.dim() != 2 or b.dim() != 2:
        raise SpecError(f"mm takes 2-D tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
    return _mm(a, b, _dtype_of(a), epilogue or "none", c, bias, alpha, beta)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1.0, alpha: float = 1.0) -> Tensor:
    """torch.addmm: beta·input + alpha·(mat1 @ mat2), the add fused into the GEMM's epilogue. A 1-D
    input (or a 1×N row) is a bias per column, an M×1 column a bias per row, M×N a matrix C."""
    m, n = mat1.shape[0], mat2.shape[1]
    scale = "alpha+" if alpha != 1.0 else ""
    if input.dim() == 1 or (input.dim() == 2 and input.shape[0] == 1 and m != 1):
        bias = input.reshape(-1)
        bias = bias if beta == 1.0 else bias * beta
        return mm(mat1, mat2, scale + "bias_col", bias=bias.expand(n).contiguous(), alpha=alpha)
    if input.dim() == 2 and input.shape[1] == 1 and n != 1:
        bias = input.reshape(-1) if beta == 1.0 else input.reshape(-1) * beta
        return mm(mat1, mat2, scale + "bias_row", bias=bias.expand(m).contiguous(), alpha=alpha)
    c = input.expand(m, n)
    if alpha == 1.0 and beta == 1.0:
        return mm(mat1, mat2, "add", c=c)
    return mm(mat1, mat2, "alpha+beta", c=c, alpha=alpha, beta=beta)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None) -> Tensor:
    """F.linear (x @ weightᵀ + bias) followed by `activation` (None, "relu" or "gelu" (tanh form)),
    one kernel. x may have leading batch dimensions."""
    if not _is_compiling():
        out = _linear_fast(x, weight, bias, activation)
        if out is not None:
            return out
    if activation is not None and activation not in _ACTIVATIONS:
        raise SpecError(f"activation must be one of {', '.join(_ACTIVATIONS)} or None, not {activation!r}")
    ops = (["bias_col"] if bias is not None else []) + ([activation] if activation else [])
    flat = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])  # reshapes cost ~1 µs each: only where needed
    stored_a, layout_a = _as_stored(flat)
    # weight (N, K) row-major is B stored transposed, as _as_stored(weight.t()) finds it, without its two views
    # (where N or K is 1, weight.t() is row-major too: _as_stored decides, as it always did).
    stored_b, layout_b = (weight, "t") if weight.is_contiguous() and min(weight.shape) > 1 else _as_stored(weight.t())
    y = _call(stored_a, stored_b, layout_a + layout_b, _dtype_of(x), "+".join(ops) or "none", bias=bias)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], weight.shape[0])


class Linear(torch.nn.Linear):
    """nn.Linear whose forward is one gemmtune kernel: x·Wᵀ + b, then `activation` (relu, gelu)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: Optional[str] = None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if activation is not None and activation not in _ACTIVATIONS:
            raise SpecError(f"activation must be one of {', '.join(_ACTIVATIONS)} or None, not {activation!r}")
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
