"""The memory-bound family's Config: GEMV-shaped GEMMs (M = 1 or N = 1) in any dtype and layout.

With one row (or column) of output, every element of the big operand is used once: the kernel is a
stream over that matrix, and its speed limit is HBM bandwidth, not FLOPs. Two shapes of stream:
- ``rows`` ("dot"): the big matrix is contiguous along K, so a warp reduces one output's row with
  16-byte loads and a shuffle tree;
- ``columns`` ("axpy"): the big matrix is contiguous along the outputs, so a thread owns VEC
  neighbouring outputs, walks a share of K, and the block sums its K-shares in shared memory.
Which one a spec needs follows from its layout (``stream_kind``); the config sizes the blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...spec import GemmSpec
from ..config_base import FamilyConfig, rejections_by

NAME = "gemv"
VERSION = "1"
DTYPES = ("fp32", "tf32", "bf16", "fp16")
INPUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
LOAD_BYTES = 16  # one vector load: 4 fp32 or 8 16-bit values


@dataclass(frozen=True, order=True)
class GemvConfig(FamilyConfig):
    """Parameters of one GEMV kernel.

    threads: threads per block.
    warps_per_output (rows kind): warps that share one output's K (1 = a warp per output); more
      warps per output give short-K shapes enough loads in flight.
    threads_x (columns kind): threads across the outputs in a block; the rest of the block's threads
      (threads / threads_x) split K. A warp reads threads_x·16 contiguous bytes of each of
      32/threads_x matrix rows, whole 32-byte sectors as long as threads_x ≥ 2.
    unroll: independent 16-byte loads each thread keeps in flight per step of its K loop.
    """

    threads: int = 256
    warps_per_output: int = 1
    threads_x: int = 8
    unroll: int = 4
    FAMILY_LABEL = "gemv"

    def describe(self) -> str:
        return (f"gemv {self.threads} threads, {self.warps_per_output} warp(s)/output (rows), "
                f"{self.threads_x} across outputs (columns), unroll{self.unroll}")


# --- what the spec asks for ----------------------------------------------------------------------
def outputs(spec: GemmSpec) -> int:
    """How many outputs: N for a row vector (M = 1), else M."""
    return spec.n if spec.m == 1 else spec.m


def stream_kind(spec: GemmSpec) -> str:
    """'rows' when the big matrix is stored with K contiguous, 'columns' when the outputs are.

    M = 1: the matrix is B (K×N stored; contiguous along N unless transposed). N = 1: it is A (M×K
    stored; contiguous along K unless transposed)."""
    if spec.m == 1:
        return "rows" if spec.b_trans else "columns"
    return "columns" if spec.a_trans else "rows"


def vec(spec: GemmSpec) -> int:
    """Elements per vector load of the matrix: 16 bytes when each stored row starts 16-byte aligned."""
    row = spec.k if stream_kind(spec) == "rows" else outputs(spec)
    per_load = LOAD_BYTES // INPUT_BYTES[spec.dtype]
    return per_load if row % per_load == 0 else 1


def supports(spec: GemmSpec, arch: str) -> str | None:
    if spec.m != 1 and spec.n != 1:
        return f"gemv runs M = 1 or N = 1 only, not {spec.m}x{spec.n}"
    if spec.dtype not in DTYPES:
        return f"gemv reads {', '.join(DTYPES)}, not {spec.dtype}"
    return None


# --- constraints -----------------------------------------------------------------------------------
Constraint = Callable[[GemvConfig, GemmSpec, str], "str | None"]


def _threads(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.threads not in (64, 128, 256, 512, 1024):
        return f"threads={c.threads}: 64, 128, 256, 512 or 1024"
    return None


def _rows(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.warps_per_output not in (1, 2, 4, 8) or c.warps_per_output * 32 > c.threads:
        return f"warps_per_output={c.warps_per_output}: 1, 2, 4 or 8 and within the block's {c.threads // 32} warps"
    return None


def _columns(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    if c.threads_x not in (2, 4, 8, 16, 32):
        return f"threads_x={c.threads_x}: 2, 4, 8, 16 or 32 (whole 32-byte sectors per matrix row)"
    return None


def _unroll(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    return None if c.unroll in (1, 2, 4, 8) else f"unroll={c.unroll}: 1, 2, 4 or 8"


def _dtype(c: GemvConfig, s: GemmSpec, arch: str) -> str | None:
    return supports(s, arch)


CONSTRAINTS: dict[str, Constraint] = {
    "dtype": _dtype, "threads": _threads, "rows": _rows, "columns": _columns, "unroll": _unroll,
}


def rejections(config: GemvConfig, spec: GemmSpec, arch: str = "sm_90") -> dict[str, str]:
    return rejections_by(CONSTRAINTS, config, spec, arch)


def ladder(arch: str = "sm_90") -> list[tuple[str, GemvConfig]]:
    """Named starting points: a plain one, and ones with more loads in flight."""
    return [
        ("warp_per_output", GemvConfig(threads=128, warps_per_output=1, threads_x=32, unroll=1)),
        ("unrolled", GemvConfig(threads=256, warps_per_output=1, threads_x=8, unroll=4)),
        ("wide_blocks", GemvConfig(threads=512, warps_per_output=2, threads_x=4, unroll=4)),
    ]


def default_config(spec: GemmSpec | None, arch: str = "sm_90") -> GemvConfig:
    """Enough 16-byte loads in flight to cover HBM latency on an H100 for the shapes it sees."""
    return dict(ladder(arch))["unrolled"]
