"""`gemmtune::grouped_mm` and `gemmtune::grouped_mm_masked` (torch custom ops with fake impls) and `bmm`, on
torch's current stream: a captured CUDA graph replays with whatever offs (counts) then hold.
grouped_mm(a, w.transpose(1, 2), offs); activation="swiglu" with w = torch.cat([w_gate, w_up], dim=1)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import SpecError
from .launch import build
from .spec import GroupedSpec

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_ACTIVATIONS = ("relu", "gelu", "swiglu")


def _variant(op: str, bias: Optional[Tensor], activation: Optional[str]) -> tuple[str, bool]:
    """(the epilogue's text, swiglu) for GroupedSpec."""
    if activation not in (None, *_ACTIVATIONS):
        raise SpecError(f"{op}: activation '{activation}' unsupported; use relu, gelu or swiglu")
    if activation == "swiglu":
        if bias is not None:
            raise SpecError(f"{op}: swiglu takes no bias")
        return "none", True
    return "+".join(([] if bias is None else ["bias"]) + ([activation] if activation else [])) or "none", False


def _out_columns(op: str, b: Tensor, activation: Optional[str]) -> int:
    """D's columns: N, or F of swiglu's b (G, K, 2F) whose first F columns are the gate, the rest up."""
    n = b.shape[2]
    if activation != "swiglu":
        return n
    if n % 2:
        raise SpecError(f"{op}: swiglu needs b (G, K, 2F), gate then up columns; {n} columns is odd")
    return n // 2


def _check_operands(op: str, a: Tensor, b: Tensor, rows_in: Tensor, bias: Optional[Tensor],
                    activation: Optional[str]) -> None:
    """dtypes, a's contiguity, the bias shape (after the caller checked the shapes of a, b, rows_in)."""
    if a.dtype not in _DTYPES or b.dtype != a.dtype or rows_in.dtype != torch.int32:
        raise SpecError(f"{op}: a, b {a.dtype}, {b.dtype} (bf16 or fp16, the same) and offs/counts {rows_in.dtype} (int32)")
    if not a.is_contiguous():
        raise SpecError(f"{op}: a must be contiguous (rows of K)")
    _variant(op, bias, activation)
    if bias is not None and (bias.shape != (b.shape[0], b.shape[2]) or bias.dtype != a.dtype):
        raise SpecError(f"{op}: bias {tuple(bias.shape)} {bias.dtype}; expected (G, N) {a.dtype}")
    _out_columns(op, b, activation)


def _check(a: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor], activation: Optional[str] = None) -> None:
    if a.dim() != 2 or b.dim() != 3 or offs.dim() != 1 or b.shape[1] != a.shape[1] or offs.shape[0] != b.shape[0]:
        raise SpecError(f"grouped_mm: a {tuple(a.shape)}, b {tuple(b.shape)}, offs {tuple(offs.shape)}; "
                        "expected a (M, K), b (G, K, N), offs (G,)")
    _check_operands("grouped_mm", a, b, offs, bias, activation)


def _check_masked(a: Tensor, b: Tensor, counts: Tensor, bias: Optional[Tensor], activation: Optional[str]) -> None:
    if (a.dim() != 3 or b.dim() != 3 or counts.dim() != 1 or b.shape[1] != a.shape[2]
            or not a.shape[0] == b.shape[0] == counts.shape[0]):
        raise SpecError(f"grouped_mm_masked: a {tuple(a.shape)}, b {tuple(b.shape)}, counts {tuple(counts.shape)}; "
                        "expected a (G, capacity, K), b (G, K, N), counts (G,)")
    _check_operands("grouped_mm_masked", a, b, counts, bias, activation)


def _launch(spec: GroupedSpec, a: Tensor, b: Tensor, rows_in: Tensor, out: Tensor, bias: Optional[Tensor]) -> None:
    """Enqueue spec's kernel on torch's current stream; b (G, K, rows) best a view of weights stored (G, rows, K)."""
    weights = b.transpose(1, 2).contiguous()  # (G, N, K): no copy for a view of stored weights
    kernel = build(spec, ordinal=a.device.index or 0)
    bias_ptr = bias.contiguous().data_ptr() if bias is not None else None
    kernel(a.data_ptr(), weights.data_ptr(), rows_in.contiguous().data_ptr(), out.data_ptr(), bias_ptr,
           torch.cuda.current_stream(a.device).cuda_stream)


@torch.library.custom_op("gemmtune::grouped_mm", mutates_args=())
def grouped_mm(a: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
               activation: Optional[str] = None) -> Tensor:
    """torch._grouped_mm(a, b, offs), then + bias[g] and the activation; b best the transposed view of
    weights stored (G, N, K) (else copied per call); rows past offs[-1] are left unwritten.
    activation="swiglu": b (G, K, 2F) is the view of torch.cat([w_gate, w_up], dim=1) (gate rows first),
    D (M, F) = silu(a·w_gateᵀ) * (a·w_upᵀ) per group, in one kernel; no bias with it."""
    _check(a, b, offs, bias, activation)
    out = a.new_empty((a.shape[0], _out_columns("grouped_mm", b, activation)))
    if out.numel() == 0:
        return out
    epilogue, swiglu = _variant("grouped_mm", bias, activation)
    spec = GroupedSpec(b.shape[0], a.shape[0], out.shape[1], a.shape[1], _DTYPES[a.dtype], epilogue, swiglu)
    _launch(spec, a, b, offs, out, bias)
    return out


@grouped_mm.register_fake
def _grouped_mm_fake(a, b, offs, bias=None, activation=None):
    _check(a, b, offs, bias, activation)
    return a.new_empty((a.shape[0], _out_columns("grouped_mm", b, activation)))


@torch.library.custom_op("gemmtune::grouped_mm_masked", mutates_args=())
def grouped_mm_masked(a: Tensor, b: Tensor, counts: Tensor, bias: Optional[Tensor] = None,
                      activation: Optional[str] = None) -> Tensor:
    """The masked layout (decode under CUDA graphs: shapes fixed, counts change on the device): a (G,
    capacity, K), b (G, K, N), counts (G,) int32; D[g, :counts[g]] = a[g, :counts[g]] · b[g] (+ bias[g],
    activation as grouped_mm's, swiglu included). Counts are clamped to [0, capacity] on the device and never
    read on the host; D's rows past each count are left unwritten (uninitialised memory)."""
    _check_masked(a, b, counts, bias, activation)
    out = a.new_empty((a.shape[0], a.shape[1], _out_columns("grouped_mm_masked", b, activation)))
    if out.numel() == 0:
        return out
    epilogue, swiglu = _variant("grouped_mm_masked", bias, activation)
    groups, capacity, k = a.shape
    spec = GroupedSpec.masked(groups, capacity, out.shape[2], k, _DTYPES[a.dtype], epilogue, swiglu)
    _launch(spec, a, b, counts, out, bias)
    return out


@grouped_mm_masked.register_fake
def _grouped_mm_masked_fake(a, b, counts, bias=None, activation=None):
    _check_masked(a, b, counts, bias, activation)
    return a.new_empty((a.shape[0], a.shape[1], _out_columns("grouped_mm_masked", b, activation)))


_bmm_offsets: dict[tuple[int, int, torch.device], Tensor] = {}


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """a (B, M, K) @ b (B, K, N) as B equal groups (their offs made once, on the device)."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise SpecError(f"bmm: a {tuple(a.shape)}, b {tuple(b.shape)}; expected (B, M, K), (B, K, N)")
    batch, m = a.shape[0], a.shape[1]
    key = (batch, m, a.device)
    if key not in _bmm_offsets:
        _bmm_offsets[key] = torch.arange(1, batch + 1, device=a.device, dtype=torch.int32) * m
    return grouped_mm(a.reshape(batch * m, a.shape[2]), b, _bmm_offsets[key]).view(batch, m, b.shape[2])
