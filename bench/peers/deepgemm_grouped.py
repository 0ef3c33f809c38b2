"""Peer for bench_moe.py (--peers ...,deepgemm): DeepGEMM's m-grouped contiguous bf16 GEMM,
deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices): a (M, K) with every group's rows back to back,
b (G, N, K), d (M, N).

Built on the device by `sh scratch/deepgemm/build.sh` (DeepGEMM's sources with CUTLASS's and fmt's headers, bundled
under scratch/, which is not tracked; scratch/deepgemm/PATCHES.md) into $DEEPGEMM_BUILD or /tmp/deepgemm-build,
which available() puts on sys.path (an installed deep_gemm is taken first).

Layout: each group's rows must start at a multiple of DeepGEMM's M alignment
(deep_gemm.get_mk_alignment_for_contiguous_layout(): 128 on sm_90), and m_indices names each row's group, -1 on
padding rows. prepare() pads once, outside the timing: the peer's time is its kernel alone, over the padded rows
(the padding rows are work its layout makes it do; the scatter into that layout, like the routing of every peer,
is not timed), and FLOPs and ratios count the real rows, as for ours.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

BUILD = Path(os.environ.get("DEEPGEMM_BUILD", "/tmp/deepgemm-build"))


@functools.cache
def _module() -> Any:
    """deep_gemm, imported from the installed package or build.sh's build (raises why not)."""
    try:
        import deep_gemm
    except ImportError:
        if not (BUILD / "deep_gemm").is_dir():
            raise ImportError(f"no deep_gemm installed and no build at {BUILD} (sh scratch/deepgemm/build.sh)") from None
        home = BUILD / "cuda_home.txt"  # the toolkit build.sh found: DeepGEMM's JIT runs its nvcc and cuobjdump
        if home.is_file():
            os.environ.setdefault("CUDA_HOME", home.read_text().strip())
        sys.path.insert(0, str(BUILD))
        try:
            import deep_gemm
        except ImportError:  # its libnvrtc not loaded yet: build.sh linked the one it found into BUILD.lib
            import ctypes

            for lib in sorted(Path(f"{BUILD}.lib").glob("libnvrtc.so.*")):
                ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            import deep_gemm
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous  # noqa: B018 (absent where the build lacks CUDA >= 12.1 kernels)
    return deep_gemm


def available() -> str | None:
    """None where deep_gemm imports with its bf16 grouped GEMM, else the one-line reason."""
    try:
        _module()
    except Exception as exc:  # ImportError, or what its import raises (a failed _C.init, a missing library)
        lines = str(exc).strip().splitlines() or [""]
        return f"DeepGEMM unavailable: {type(exc).__name__}: {lines[0][:160]}"
    return None


def padded_starts(rows: Sequence[int], align: int) -> tuple[list[int], int]:
    """Each group's first row in the contiguous layout (a multiple of `align`) and the padded row count."""
    starts, at = [], 0
    for r in rows:
        starts.append(at)
        at += -(-r // align) * align
    return starts, at


def real_rows_index(torch: Any, rows: Sequence[int], align: int, device: Any = None) -> Any:
    """int64: the padded row of each real row, in order (group by group)."""
    starts, _ = padded_starts(rows, align)
    pieces = [torch.arange(s, s + r, dtype=torch.int64) for s, r in zip(starts, rows)]
    return torch.cat(pieces).to(device) if pieces else torch.zeros(0, dtype=torch.int64, device=device)


def m_indices(torch: Any, rows: Sequence[int], align: int, device: Any = None) -> Any:
    """int32, one a padded row: its group, -1 on padding rows."""
    _, total = padded_starts(rows, align)
    out = torch.full((total,), -1, dtype=torch.int32)
    out[real_rows_index(torch, rows, align)] = torch.repeat_interleave(
        torch.arange(len(rows), dtype=torch.int32), torch.tensor(list(rows), dtype=torch.int64))
    return out.to(device)


def pad_rows(torch: Any, x: Any, rows: Sequence[int], align: int) -> Any:
    """x's rows (group by group) placed at their padded rows; padding rows zero."""
    _, total = padded_starts(rows, align)
    out = x.new_zeros(total, *x.shape[1:])
    return out.index_copy_(0, real_rows_index(torch, rows, align, x.device), x)


def unpad_rows(torch: Any, y: Any, rows: Sequence[int], align: int) -> Any:
    return y.index_select(0, real_rows_index(torch, rows, align, y.device))


@dataclass(frozen=True)
class Prepared:
    """One case in DeepGEMM's layout: run() launches its kernel alone (returns d, padded rows); real_rows(d)."""

    run: Callable[[], Any]
    index: Any  # the padded row of each real row

    def real_rows(self, d: Any) -> Any:
        return d.index_select(0, self.index)


def prepare(x: Any, weights: Any, rows: Sequence[int]) -> Prepared:
    """x (sum(rows), K) bf16 sorted by expert, weights (G, N, K) bf16 (as bench_moe stores them), rows per expert."""
    import torch

    dg = _module()
    align = int(dg.get_mk_alignment_for_contiguous_layout())
    a, layout = pad_rows(torch, x, rows, align), m_indices(torch, rows, align, x.device)
    b = weights.contiguous()
    d = torch.empty(a.shape[0], b.shape[1], device=x.device, dtype=torch.bfloat16)

    def run() -> Any:
        dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
        return d

    return Prepared(run, real_rows_index(torch, rows, align, x.device))
