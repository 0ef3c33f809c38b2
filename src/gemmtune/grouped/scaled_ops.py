"""fp8 GEMMs as torch operators (issue 70), on the grouped wgmma kernel (k32 e4m3/e5m2 wgmma, fp32 sums,
the scales applied before the epilogue):

- `gemmtune::scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale_result=None,
  use_fast_accum=False)`: torch._scaled_mm's operands (its keywords too; positionally out_dtype comes sixth).
  use_fast_accum is accepted and changes nothing: the sums are promoted to fp32 either way (at most 1.11x
  cuBLAS's error, ~1% of speed); scale_result (which scales an fp8 D) must be None, D being bf16/fp16/fp32.
  a (M, K) fp8 row-major; b (K, N) fp8 column-major (b.t() contiguous: weights stored (N, K));
  scale_a and scale_b float32, one element each (per tensor), (M, 1) and (1, N) (rowwise), or (M, ceil(K/128))
  and (ceil(N/128), ceil(K/128)) (block: 1x128 groups of A, 128x128 blocks of the weights stored (N, K), as
  DeepSeek-V3 quantizes); bias (N,) of out_dtype. One group of M rows.
- `gemmtune::scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype=torch.bfloat16)`: torch.
  _scaled_grouped_mm's rowwise form. a (total_m, K) fp8; b (G, K, N) the view of weights stored (G, N, K);
  scale_a (total_m,) float32, scale_b (G, N) float32 (or one element each: per tensor; or block scales
  (total_m, ceil(K/128)) and (G, ceil(N/128), ceil(K/128))); offs (G,) int32 ends.

scaled_mm with M <= 16 and per-tensor or rowwise scales runs the fp8 decode GEMV instead (git show c44b715:bench/probes/fp8_gemv.py: a stream
over the weights on tensor cores). Both run on torch's current stream with fake implementations (torch.compile) and capture in CUDA graphs.
Block scales sum each 128 values of K apart and add them, scaled, on the CUDA cores (two-level accumulation).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import SpecError
from ..kernels.config_base import ceil_div
from .fp8_gemv import build as build_gemv, decode_spec
from .launch import build
from .spec import BLOCK, GroupedSpec

_FP8 = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
_OUT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _formats(op: str, a: Tensor, b: Tensor, out_dtype: torch.dtype) -> tuple[str, str]:
    if a.dtype not in _FP8 or b.dtype != a.dtype:
        raise SpecError(f"{op}: a and b must be the same fp8 type (float8_e4m3fn or float8_e5m2), got {a.dtype}, {b.dtype}")
    if out_dtype not in _OUT:
        raise SpecError(f"{op}: out_dtype must be torch.bfloat16, torch.float16 or torch.float32, not {out_dtype}")
    return _FP8[a.dtype], _OUT[out_dtype]


def _scaling(op: str, scale_a: Tensor, scale_b: Tensor, rows: int, cols: int, block_b: tuple[int, ...]) -> str:
    """'tensor' (one scale each), 'block' (scale_a (rows, ceil(K/128)), scale_b of shape `block_b`) or 'rowwise'
    (rows scales of A, cols of B), else a one-line SpecError."""
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise SpecError(f"{op}: scales must be float32, got {scale_a.dtype} and {scale_b.dtype}")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensor"
    if tuple(scale_a.shape) == (rows, block_b[-1]) and tuple(scale_b.shape) == block_b:
        if not scale_a.is_contiguous() or not scale_b.is_contiguous():
            raise SpecError(f"{op}: block scales must be contiguous (row-major)")
        return "block"
    if scale_a.numel() == rows and scale_b.numel() == cols:
        return "rowwise"
    raise SpecError(f"{op}: scale_a {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)}: one element each "
                    f"(per tensor), {rows} for A's rows and {cols} for B's columns (rowwise), or ({rows}, "
                    f"{block_b[-1]}) and {block_b} (block: 1x128 groups of A, 128x128 blocks of B)")



def _run(spec: GroupedSpec, a: Tensor, weights: Tensor, offs: Tensor, out: Tensor, bias: Optional[Tensor],
         scale_a: Tensor, scale_b: Tensor) -> None:
    kernel = build(spec, ordinal=a.device.index or 0)
    kernel(a.data_ptr(), weights.data_ptr(), offs.data_ptr(), out.data_ptr(),
           bias.contiguous().data_ptr() if bias is not None else None, torch.cuda.current_stream(a.device).cuda_stream,
           scale_a=scale_a.contiguous().data_ptr(), scale_b=scale_b.contiguous().data_ptr())


# --- scaled_mm ---------------------------------------------------------------------------------------
def _check_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
              out_dtype: torch.dtype, scale_result: Optional[Tensor] = None) -> tuple[str, str, str]:
    if scale_result is not None:
        raise SpecError("scaled_mm: scale_result scales an fp8 output; gemmtune's D is bf16, fp16 or fp32 "
                        "(multiply D by it instead)")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise SpecError(f"scaled_mm: a {tuple(a.shape)}, b {tuple(b.shape)}; expected a (M, K), b (K, N)")
    kind, out = _formats("scaled_mm", a, b, out_dtype)
    if not a.is_contiguous() or not b.t().is_contiguous():
        raise SpecError("scaled_mm: a must be row-major and b column-major (b.t() contiguous), as torch._scaled_mm")
    if bias is not None and (tuple(bias.shape) != (b.shape[1],) or bias.dtype != out_dtype):
        raise SpecError(f"scaled_mm: bias {tuple(bias.shape)} {bias.dtype}; expected ({b.shape[1]},) {out_dtype}")
    block_b = (ceil_div(b.shape[1], BLOCK), ceil_div(a.shape[1], BLOCK))
    return kind, out, _scaling("scaled_mm", scale_a, scale_b, a.shape[0], b.shape[1], block_b)


_one_group: dict[tuple[int, torch.device], Tensor] = {}  # offs of one group of M rows, made once per M and device


@torch.library.custom_op("gemmtune::scaled_mm", mutates_args=())
def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None,
              out_dtype: torch.dtype = torch.bfloat16, scale_result: Optional[Tensor] = None,
              use_fast_accum: bool = False) -> Tensor:
    """torch._scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=..., use_fast_accum=...): (a·scale_a)(b·scale_b)
    (+ bias), fp32 sums (promoted whatever use_fast_accum says)."""
    kind, out_kind, scaling = _check_mm(a, b, scale_a, scale_b, bias, out_dtype, scale_result)
    (m, k), n = a.shape, b.shape[1]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    gemv = decode_spec(m, n, k, kind, scaling, out_kind, bias is not None)  # decode (M <= 16): a stream over b
    if gemv is not None and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0:
        build_gemv(gemv, ordinal=a.device.index or 0)(
            a.data_ptr(), b.data_ptr(), scale_a.contiguous().data_ptr(), scale_b.contiguous().data_ptr(), out.data_ptr(),
            bias.contiguous().data_ptr() if bias is not None else None, torch.cuda.current_stream(a.device).cuda_stream)
        return out
    key = (m, a.device)
    if key not in _one_group:
        _one_group[key] = torch.tensor([m], dtype=torch.int32, device=a.device)
    spec = GroupedSpec(1, m, n, k, kind, "bias" if bias is not None else "none", out_dtype=out_kind, scaling=scaling)
    _run(spec, a, b.t(), _one_group[key], out, bias, scale_a, scale_b)
    return out


@scaled_mm.register_fake
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale_result=None,
                    use_fast_accum=False):
    _check_mm(a, b, scale_a, scale_b, bias, out_dtype, scale_result)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


# --- scaled_grouped_mm -------------------------------------------------------------------------------
def _check_grouped(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor,
                   out_dtype: torch.dtype) -> tuple[str, str, str]:
    if (a.dim() != 2 or b.dim() != 3 or offs.dim() != 1 or b.shape[1] != a.shape[1] or offs.shape[0] != b.shape[0]
            or offs.dtype != torch.int32):
        raise SpecError(f"scaled_grouped_mm: a {tuple(a.shape)}, b {tuple(b.shape)}, offs {tuple(offs.shape)} {offs.dtype}; "
                        "expected a (M, K), b (G, K, N), offs (G,) int32")
    kind, out = _formats("scaled_grouped_mm", a, b, out_dtype)
    if not a.is_contiguous() or not b.transpose(1, 2).is_contiguous():
        raise SpecError("scaled_grouped_mm: a must be row-major and b the (G, K, N) view of weights stored (G, N, K)")
    block_b = (b.shape[0], ceil_div(b.shape[2], BLOCK), ceil_div(a.shape[1], BLOCK))
    return kind, out, _scaling("scaled_grouped_mm", scale_a, scale_b, a.shape[0], b.shape[0] * b.shape[2], block_b)


@torch.library.custom_op("gemmtune::scaled_grouped_mm", mutates_args=())
def scaled_grouped_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor,
                      out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """Every group's (a·scale_a)(b[g]·scale_b[g]) in one launch, offs read on the device; rows past offs[-1]
    are left unwritten."""
    kind, out_kind, scaling = _check_grouped(a, b, scale_a, scale_b, offs, out_dtype)
    out = torch.empty((a.shape[0], b.shape[2]), dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    spec = GroupedSpec(b.shape[0], a.shape[0], b.shape[2], a.shape[1], kind, out_dtype=out_kind, scaling=scaling)
    _run(spec, a, b.transpose(1, 2), offs, out, None, scale_a, scale_b)
    return out


@scaled_grouped_mm.register_fake
def _scaled_grouped_mm_fake(a, b, scale_a, scale_b, offs, out_dtype=torch.bfloat16):
    _check_grouped(a, b, scale_a, scale_b, offs, out_dtype)
    return a.new_empty((a.shape[0], b.shape[2]), dtype=out_dtype)
