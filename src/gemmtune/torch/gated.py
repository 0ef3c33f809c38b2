"""gated_linear: a Llama/Qwen/Mistral MLP's silu(x·Wgᵀ) ⊙ (x·Wuᵀ) as one gemmtune kernel (GemmSpec.gated).

    w_gu = gt.interleave_gate_up(mlp.gate_proj.weight, mlp.up_proj.weight)   # once: (2N, K)
    h = gt.gated_linear(x, w_gu)                                             # (..., N)
    y = mlp.down_proj(h)

The weight holds the gate and up rows interleaved by 8 (for outputs [8q, 8q+8): gate rows [16q, 16q+8),
up rows [16q+8, 16q+16)), so the kernel is a plain wgmma GEMM over 2N columns whose fragment pairs each
gate column with its up column in one thread (kernels/wgmma/gated.py). The operator ``gemmtune::gated_linear``
has a fake implementation (torch.compile(fullgraph=True) traces it) and a backward that recomputes the two
products with torch. Calls go through operators.py's launch plans (a plan per shape and GPU, launches bound
per pointer set), so a repeated call is pointers in, one launch; CUDA graphs capture it.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..epilogue import GATE_ROWS
from ..errors import SpecError
from ..spec import GATED_DTYPES, GemmSpec
from . import operators
from .operators import _DTYPES, _Plan, _launch, _pointer, kernel_for


def interleave_gate_up(w_gate: Tensor, w_up: Tensor) -> Tensor:
    """The (2N)×K weight gated_linear takes, from the gate and up weights (N×K each, N a multiple of 8,
    as nn.Linear stores them): for outputs [8q, 8q+8), gate rows at [16q, 16q+8), up rows at [16q+8, 16q+16).
    (gemmtune.epilogue.interleave_gate_up is its numpy twin.)"""
    if w_gate.shape != w_up.shape or w_gate.dim() != 2 or w_gate.shape[0] % GATE_ROWS:
        raise SpecError(f"gate and up weights must both be N×K with N a multiple of {GATE_ROWS}, "
                        f"got {tuple(w_gate.shape)} and {tuple(w_up.shape)}")
    n, k = w_gate.shape
    pairs = torch.stack([w_gate.reshape(n // GATE_ROWS, GATE_ROWS, k), w_up.reshape(n // GATE_ROWS, GATE_ROWS, k)], 1)
    return pairs.reshape(2 * n, k)


def deinterleave_gate_up(w_gu: Tensor) -> tuple[Tensor, Tensor]:
    """(w_gate, w_up) of an interleaved (2N)×K weight, as strided views (no copy)."""
    two_n, k = _weight_shape(w_gu)
    blocks = w_gu.unflatten(0, (two_n // (2 * GATE_ROWS), 2, GATE_ROWS))
    return blocks[:, 0].flatten(0, 1), blocks[:, 1].flatten(0, 1)


def _weight_shape(w_gu: Tensor) -> tuple[int, int]:
    if w_gu.dim() != 2 or w_gu.shape[0] % (2 * GATE_ROWS):
        raise SpecError(f"gated_linear's weight is (2N, K) with N a multiple of {GATE_ROWS} (interleave_gate_up), "
                        f"got {tuple(w_gu.shape)}")
    return int(w_gu.shape[0]), int(w_gu.shape[1])


def _check(x: Tensor, w_gu: Tensor) -> tuple[int, int, str]:
    """(N, K, dtype) of a call, or a one-line SpecError saying what does not fit."""
    two_n, k = _weight_shape(w_gu)
    if x.dim() < 1 or x.shape[-1] != k:
        raise SpecError(f"x {tuple(x.shape)} must end in K = {k}, the weight's columns")
    dtype = _DTYPES.get(x.dtype)
    if x.dtype != w_gu.dtype or dtype not in GATED_DTYPES:
        raise SpecError(f"gated_linear takes x and the weight both {' or '.join(GATED_DTYPES)}, "
                        f"got {x.dtype} and {w_gu.dtype}")
    return two_n // 2, k, dtype


def _plan(m: int, n: int, k: int, dtype: str, index: int) -> _Plan:
    """The launch plan of a gated shape, kept beside operators.py's (install_kernel clears both)."""
    key = ("gated", m, n, k, dtype, index)
    plan = operators._plans.get(key)
    if plan is None:
        spec = GemmSpec(m, n, k, "nt", dtype, gated=True)
        plan = _Plan(spec, kernel_for(spec, index), index)
        with operators._kernels_lock:
            operators._plans[key] = plan
    return plan


def _run(x: Tensor, w_gu: Tensor) -> Tensor:
    """The operator's work: x as rows (..., K) -> (M, K), the kernel enqueued on torch's current stream."""
    n, k, dtype = _check(x, w_gu)
    if not x.is_cuda or w_gu.get_device() != x.get_device():
        raise SpecError(f"gated_linear runs on CUDA tensors of one GPU; x is on {x.device}, the weight on {w_gu.device}")
    rows = x.reshape(-1, k)
    out = torch.empty((rows.shape[0], n), dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        index = x.get_device()
        plan = _plan(rows.shape[0], n, k, dtype, index)
        (rows, pa), (w_gu, pb) = _pointer(rows), _pointer(w_gu)
        _launch(plan, index, pa, pb, out.data_ptr(), 0, 0, 1.0, 0.0)
    return out.view(*x.shape[:-1], n)


def _fake(x: Tensor, w_gu: Tensor) -> Tensor:
    n, _, _ = _check(x, w_gu)
    return x.new_empty((*x.shape[:-1], n))


# Defined through torch.library.Library as gemmtune::gemm is (less dispatch a call than custom_op).
_LIB = torch.library.Library("gemmtune", "FRAGMENT")
_LIB.define("gated_linear(Tensor x, Tensor w_gu) -> Tensor")
_LIB.impl("gated_linear", _run, "CUDA")
_LIB.impl("gated_linear", _run, "CPU")  # (to say why not in one line: the kernel runs on CUDA tensors)
torch.library.register_fake("gemmtune::gated_linear", _fake, lib=_LIB)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad: Tensor):
    """Recomputes gate and up with torch (fp32 math on the deinterleaved views) and differentiates
    silu(g)·u: d/dg = u·σ(g)·(1 + g·(1 − σ(g))), d/du = silu(g)."""
    x, w_gu = ctx.saved_tensors
    w_gate, w_up = deinterleave_gate_up(w_gu)
    x32, g32 = x.float(), grad.float()
    gate, up = x32 @ w_gate.float().t(), x32 @ w_up.float().t()
    sig = torch.sigmoid(gate)
    d_gate = g32 * up * sig * (1 + gate * (1 - sig))
    d_up = g32 * gate * sig
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = (d_gate @ w_gate.float() + d_up @ w_up.float()).to(x.dtype)
    if ctx.needs_input_grad[1]:
        rows = x32.reshape(-1, x.shape[-1])
        dw = interleave_gate_up(d_gate.reshape(-1, d_gate.shape[-1]).t() @ rows,
                                d_up.reshape(-1, d_up.shape[-1]).t() @ rows).to(w_gu.dtype)
    return dx, dw


torch.library.register_autograd("gemmtune::gated_linear", _backward, setup_context=_setup_context, lib=_LIB)


def gated_linear(x: Tensor, w_gu: Tensor) -> Tensor:
    """silu(x·Wgᵀ) ⊙ (x·Wuᵀ): x (..., K), w_gu (2N, K) from interleave_gate_up, bf16 or fp16 -> (..., N),
    one gemmtune kernel (wgmma, sm_90a; elsewhere a ConfigError saying why)."""
    return torch.ops.gemmtune.gated_linear(x, w_gu)


def gated_reference(x: Tensor, w_gu: Tensor) -> Tensor:
    """torch's own silu(x·Wgᵀ) * (x·Wuᵀ) from the interleaved weight (for comparisons)."""
    w_gate, w_up = deinterleave_gate_up(w_gu)
    return torch.nn.functional.silu(x @ w_gate.t()) * (x @ w_up.t())
