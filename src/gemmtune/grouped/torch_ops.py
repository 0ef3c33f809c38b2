"""`gemmtune::grouped_mm` (torch custom op with a fake impl) and `bmm`, on torch's current stream: a
captured CUDA graph replays with whatever offs then holds. grouped_mm(a, w.transpose(1, 2), offs)."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import SpecError
from .launch import build
from .spec import GroupedSpec

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _epilogue(bias: Optional[Tensor], activation: Optional[str]) -> str:
    if activation not in (None, "relu", "gelu"):
        raise SpecError(f"grouped_mm: activation '{activation}' unsupported; use relu or gelu")
    return "+".join(([] if bias is None else ["bias"]) + ([activation] if activation else [])) or "none"


def _check(a: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor]) -> None:
    if a.dim() != 2 or b.dim() != 3 or offs.dim() != 1 or b.shape[1] != a.shape[1] or offs.shape[0] != b.shape[0]:
        raise SpecError(f"grouped_mm: a {tuple(a.shape)}, b {tuple(b.shape)}, offs {tuple(offs.shape)}; "
                        "expected a (M, K), b (G, K, N), offs (G,)")
    if a.dtype not in _DTYPES or b.dtype != a.dtype or offs.dtype != torch.int32:
        raise SpecError(f"grouped_mm: a, b {a.dtype}, {b.dtype} (bf16 or fp16, the same) and offs {offs.dtype} (int32)")
    if not a.is_contiguous():
        raise SpecError("grouped_mm: a must be contiguous (rows of K)")
    if bias is not None and (bias.shape != (b.shape[0], b.shape[2]) or bias.dtype != a.dtype):
        raise SpecError(f"grouped_mm: bias {tuple(bias.shape)} {bias.dtype}; expected (G, N) {a.dtype}")


@torch.library.custom_op("gemmtune::grouped_mm", mutates_args=())
def grouped_mm(a: Tensor, b: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
               activation: Optional[str] = None) -> Tensor:
    """torch._grouped_mm(a, b, offs), then + bias[g] and the activation; b best the transposed view of
    weights stored (G, N, K) (else copied per call); rows past offs[-1] are left unwritten."""
    _check(a, b, offs, bias)
    out = a.new_empty((a.shape[0], b.shape[2]))
    if out.numel() == 0:
        return out
    weights = b.transpose(1, 2).contiguous()  # (G, N, K): no copy for a view of stored weights
    spec = GroupedSpec(b.shape[0], a.shape[0], b.shape[2], a.shape[1], _DTYPES[a.dtype], _epilogue(bias, activation))
    kernel = build(spec, ordinal=a.device.index or 0)
    bias_ptr = bias.contiguous().data_ptr() if bias is not None else None
    kernel(a.data_ptr(), weights.data_ptr(), offs.contiguous().data_ptr(), out.data_ptr(), bias_ptr,
           torch.cuda.current_stream(a.device).cuda_stream)
    return out


@grouped_mm.register_fake
def _grouped_mm_fake(a, b, offs, bias=None, activation=None):
    _check(a, b, offs, bias)
    return a.new_empty((a.shape[0], b.shape[2]))


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
