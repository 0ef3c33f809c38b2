"""GroupedSpec: a grouped GEMM, checked, with its float64 reference and FLOP count.

torch._grouped_mm(a, b, offs): A (total_m, K), the groups' rows back to back; B (G, K, N), weights
stored (G, N, K) (layout nt per group); offs (G,) int32: group g's rows are offs[g-1] .. offs[g]-1
(offs[-1] = 0; empty groups allowed); D (total_m, N), rows past offs[G-1] left as they were.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..epilogue import Epilogue
from ..errors import SpecError
from ..spec import GemmSpec

MAX_GROUPS = 1024  # group ends and tile counts live in shared memory, scanned by one warp
DTYPES = ("bf16", "fp16")
EPILOGUE_OPS = ("bias_col", "relu", "gelu")  # bias: (G, N), one row per group, added per column
TMA_ELEMENTS = 8  # K must be a multiple of 8: TMA rows start on 16-byte boundaries


def parse_epilogue(text: str | Epilogue | None) -> Epilogue:
    """none, bias, relu, gelu, bias+relu, bias+gelu (bias: bias_col, a row of (G, N) per group)."""
    if isinstance(text, Epilogue):
        epilogue = text
    else:
        words = (text or "none").replace("bias_col", "bias").replace("bias", "bias_col")
        epilogue = Epilogue.parse(words)
    unknown = [op for op in epilogue.ops if op not in EPILOGUE_OPS]
    if unknown:
        raise SpecError(f"grouped GEMM epilogue '{epilogue}': {unknown[0]} unsupported; use bias, relu, gelu")
    if "relu" in epilogue.ops and "gelu" in epilogue.ops:
        raise SpecError(f"grouped GEMM epilogue '{epilogue}' has two activations; choose relu or gelu")
    return epilogue


def _positive(name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SpecError(f"grouped GEMM: {name}={value!r} must be an integer >= {low}")
    return int(value)


@dataclass(frozen=True, order=True)
class GroupedSpec:
    groups: int       # G experts
    total_m: int      # rows of A and D: the capacity the group ends index into
    n: int
    k: int
    dtype: str = "bf16"  # A, B, D (and bias); fp32 accumulation and epilogue
    epilogue: Epilogue = field(default_factory=Epilogue)

    def __post_init__(self) -> None:
        for name in ("groups", "total_m", "n", "k"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.groups > MAX_GROUPS:
            raise SpecError(f"grouped GEMM: {self.groups} groups; at most {MAX_GROUPS}")
        if self.k % TMA_ELEMENTS:
            raise SpecError(f"grouped GEMM: K={self.k} must be a multiple of {TMA_ELEMENTS} (TMA rows of 16 bytes)")
        if self.dtype not in DTYPES:
            raise SpecError(f"grouped GEMM: dtype '{self.dtype}' unsupported; use {' or '.join(DTYPES)}")
        object.__setattr__(self, "epilogue", parse_epilogue(self.epilogue))

    @property
    def has_bias(self) -> bool:
        return "bias_col" in self.epilogue.ops

    def as_gemm(self) -> GemmSpec:
        """The (total_m, N, K) problem as the GemmSpec the write-back parts and KernelSource read."""
        return GemmSpec(self.total_m, self.n, self.k, "nt", self.dtype, self.epilogue)

    def slug(self) -> str:
        epi = "" if self.epilogue.is_identity else "_" + str(self.epilogue).replace("+", "_")
        return f"grouped_g{self.groups}_m{self.total_m}_n{self.n}_k{self.k}_{self.dtype}{epi}"

    def flops(self, offs: np.ndarray) -> int:
        """2·N·K times the rows the groups actually hold (the host copy of offs)."""
        return 2 * int(group_sizes(offs, self.total_m).sum()) * self.n * self.k

    def check_offsets(self, offs: np.ndarray) -> None:
        """Raise SpecError for host offsets of the wrong length, decreasing, or past total_m."""
        offs = np.asarray(offs)
        if offs.shape != (self.groups,):
            raise SpecError(f"grouped GEMM: offs has shape {offs.shape}, expected ({self.groups},)")
        if offs.size and (np.any(np.diff(offs) < 0) or offs[0] < 0 or offs[-1] > self.total_m):
            raise SpecError(f"grouped GEMM: offs must rise from 0 to at most total_m={self.total_m}")


def group_offsets(sizes: list[int] | tuple[int, ...]) -> np.ndarray:
    """Group sizes -> offs (cumulative end rows, int32)."""
    return np.cumsum(np.asarray(sizes, dtype=np.int64)).astype(np.int32)


def group_ends(offs: np.ndarray, total_m: int) -> np.ndarray:
    """Each group's end row as the kernel reads it: offs clamped to [0, total_m]."""
    return np.clip(np.asarray(offs, dtype=np.int64), 0, total_m)


def group_sizes(offs: np.ndarray, total_m: int) -> np.ndarray:
    """Rows of each group as the kernel counts them (a decreasing end gives an empty group)."""
    ends = group_ends(offs, total_m)
    return np.maximum(ends - np.concatenate(([0], ends[:-1])), 0)


def reference(spec: GroupedSpec, a: np.ndarray, b: np.ndarray, offs: np.ndarray,
              bias: np.ndarray | None = None) -> np.ndarray:
    """float64 D for a (total_m, K), b (G, K, N), offs (G,), bias (G, N); NaN past the last group."""
    out = np.full((spec.total_m, spec.n), np.nan)
    ends = group_ends(offs, spec.total_m)
    starts = np.concatenate(([0], ends[:-1]))
    for g, (start, end) in enumerate(zip(starts, ends)):
        if end <= start:
            continue
        value = a[start:end].astype(np.float64) @ b[g].astype(np.float64)
        operands = {"bias": bias[g].astype(np.float64)} if spec.has_bias else {}
        out[start:end] = spec.epilogue.reference(value, operands)
    return out
