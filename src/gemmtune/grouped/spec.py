"""GroupedSpec: a grouped GEMM, checked, with its float64 reference and FLOP count.

torch._grouped_mm(a, b, offs): A (total_m, K), the groups' rows back to back; B (G, K, N), weights
stored (G, N, K) (layout nt per group); offs (G,) int32: group g's rows are offs[g-1] .. offs[g]-1
(offs[-1] = 0; empty groups allowed); D (total_m, N), rows past offs[G-1] left as they were.

Two variants, each a field:
- `layout="masked"` (decode with CUDA graphs: fixed shapes, counts on the device): A is (G, capacity, K)
  viewed as (G·capacity, K), so total_m = G·capacity; `offs` holds counts (G,) int32 instead of ends, and
  group g's rows are g·capacity .. g·capacity + min(counts[g], capacity) - 1; D (G·capacity, N), the rows
  past a group's count left as they were.
- `swiglu=True` (an MoE expert's gated MLP up-projection): D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), D (total_m, N), from
  one weight W stored (G, 2N, K) whose rows [0, N) are the gate and [N, 2N) up: torch.cat([w_gate, w_up],
  dim=1) of weights stored (G, N, K). B is its (G, K, 2N) view. No bias and no other activation with it.
- fp8 (`dtype` e4m3 or e5m2; issue 70): A and B hold fp8 codes, D is `out_dtype` (bf16, fp16 or fp32), and the
  product is scaled before the epilogue: `scaling="tensor"` multiplies by scale_a[0]·scale_b[0] (float32 on
  the device), `"rowwise"` by scale_a[row] (one a row of A, total_m) and scale_b[g, col] (one a column of each
  group's weights, (G, N)), as torch._scaled_mm and torch._scaled_grouped_mm take them; `"block"` (DeepSeek-V3's
  and DeepGEMM's format) by scale_a[row, kb] (total_m, ceil(K/128)) for each 128 values of K of a row, and
  scale_b[g, nb, kb] (G, ceil(N/128), ceil(K/128)) for each 128x128 block of a group's weights stored (N, K):
  each k-block's sums are scaled and added into fp32 registers on the CUDA cores (two-level accumulation).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..epilogue import Epilogue
from ..errors import SpecError
from ..fp8 import BLOCK
from ..spec import FP8_DTYPES, FP8_OUT_DTYPES, INPUT_DTYPES, SCALINGS, GemmSpec  # SCALINGS: fp8 only

MAX_GROUPS = 1024  # group ends and tile counts live in shared memory, scanned by one warp
DTYPES = ("bf16", "fp16", "e4m3", "e5m2")
FP8 = tuple(FP8_DTYPES)
OUT_DTYPES = FP8_OUT_DTYPES
# block scales: A in 1xBLOCK groups along K, each group's weights in BLOCKxBLOCK (N x K) blocks (fp8.BLOCK, 128)
ELEMENT_BYTES = {dtype: INPUT_DTYPES[dtype] for dtype in DTYPES}
EPILOGUE_OPS = ("bias_col", "relu", "gelu")  # bias: (G, N), one row per group, added per column
TMA_ROW_BYTES = 16  # K·(element bytes) must be a multiple of 16: TMA rows start on 16-byte boundaries
LAYOUTS = ("contiguous", "masked")  # group rows from cumulative ends (offs), or from capacity and counts


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
    swiglu: bool = False  # D (total_m, N) = silu(gate) * up from weights (G, 2N, K): gate rows [0, N), up [N, 2N)
    layout: str = "contiguous"  # "masked": total_m = groups * capacity, offs holds each group's row count
    out_dtype: str = ""  # D's type: the inputs' for 16-bit inputs ("" or that), bf16, fp16 or fp32 for fp8 ("": bf16)
    scaling: str = "none"  # fp8: "tensor" or "rowwise" (scale_a, scale_b on the device); "none" for 16-bit

    def __post_init__(self) -> None:
        for name in ("groups", "total_m", "n", "k"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.groups > MAX_GROUPS:
            raise SpecError(f"grouped GEMM: {self.groups} groups; at most {MAX_GROUPS}")
        if self.dtype not in DTYPES:
            raise SpecError(f"grouped GEMM: dtype '{self.dtype}' unsupported; use {', '.join(DTYPES)}")
        elements = TMA_ROW_BYTES // ELEMENT_BYTES[self.dtype]
        if self.k % elements:
            raise SpecError(f"grouped GEMM: K={self.k} must be a multiple of {elements} for {self.dtype} "
                            f"(TMA rows of {TMA_ROW_BYTES} bytes)")
        self._check_fp8()
        object.__setattr__(self, "epilogue", parse_epilogue(self.epilogue))
        if self.swiglu not in (False, True):
            raise SpecError(f"grouped GEMM: swiglu={self.swiglu!r} must be True or False")
        if self.swiglu and not self.epilogue.is_identity:
            raise SpecError(f"grouped GEMM: swiglu with epilogue '{self.epilogue}' unsupported; "
                            "swiglu takes no bias or activation")
        if self.layout not in LAYOUTS:
            raise SpecError(f"grouped GEMM: layout '{self.layout}' unsupported; use {' or '.join(LAYOUTS)}")
        if self.layout == "masked" and self.total_m % self.groups:
            raise SpecError(f"grouped GEMM: masked total_m={self.total_m} must be groups ({self.groups}) x capacity")

    def _check_fp8(self) -> None:
        """out_dtype and scaling: given or defaulted, and fitting the inputs' type."""
        fp8 = self.dtype in FP8
        out = self.out_dtype or ("bf16" if fp8 else self.dtype)
        if (fp8 and out not in OUT_DTYPES) or (not fp8 and out != self.dtype):
            allowed = " or ".join(OUT_DTYPES) if fp8 else self.dtype
            raise SpecError(f"grouped GEMM: out_dtype '{out}' with {self.dtype} inputs; use {allowed}")
        object.__setattr__(self, "out_dtype", out)
        if fp8 and self.scaling not in SCALINGS:
            raise SpecError(f"grouped GEMM: {self.dtype} needs scaling tensor or rowwise, not '{self.scaling}'")
        if not fp8 and self.scaling != "none":
            raise SpecError(f"grouped GEMM: scaling '{self.scaling}' is for fp8 inputs (e4m3, e5m2), not {self.dtype}")
        if fp8 and self.swiglu:
            raise SpecError("grouped GEMM: swiglu with fp8 inputs is not built yet; use bf16 or fp16")

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @classmethod
    def masked(cls, groups: int, capacity: int, n: int, k: int, dtype: str = "bf16",
               epilogue: Epilogue | str | None = None, swiglu: bool = False) -> "GroupedSpec":
        """The masked layout: A (groups, capacity, K), counts (groups,) on the device, D (groups, capacity, N)."""
        capacity = _positive("capacity", capacity)
        return cls(groups, _positive("groups", groups) * capacity, n, k, dtype, epilogue, swiglu, "masked")

    @property
    def masked_layout(self) -> bool:
        return self.layout == "masked"

    @property
    def capacity(self) -> int:
        """Rows each group owns in the masked layout (total_m in the contiguous one)."""
        return self.total_m // self.groups if self.masked_layout else self.total_m

    @property
    def weight_rows(self) -> int:
        """Rows of each group's stored weights: N, or 2N for SwiGLU's gate and up halves."""
        return 2 * self.n if self.swiglu else self.n

    @property
    def rows_operand(self) -> str:
        """What the kernel's group-rows argument holds: offs (cumulative ends) or counts (masked)."""
        return "counts" if self.masked_layout else "offs"

    @property
    def has_bias(self) -> bool:
        return self.epilogue.reads_bias

    def as_gemm(self) -> GemmSpec:
        """The (total_m, N, K) problem as the GemmSpec the write-back parts and KernelSource read (fp8 inputs:
        the GemmSpec of D's type, which is all the write-back reads; the entry name says fp8)."""
        return GemmSpec(self.total_m, self.n, self.k, "nt", self.out_dtype, self.epilogue)  # fp8: D's type stands in

    def slug(self) -> str:
        epi = "" if self.epilogue.is_identity else "_" + str(self.epilogue).replace("+", "_")
        variant = ("_swiglu" if self.swiglu else "") + (f"_masked{self.capacity}" if self.masked_layout else "")
        fp8 = f"_{self.scaling}_{self.out_dtype}" if self.fp8 else ""
        return f"grouped_g{self.groups}_m{self.total_m}_n{self.n}_k{self.k}_{self.dtype}{fp8}{epi}{variant}"

    def row_ranges(self, offs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each group's first and end row as the kernel reads them from the host copy of offs (counts when
        masked); a group with end <= begin is empty."""
        if self.masked_layout:
            begins = np.arange(self.groups, dtype=np.int64) * self.capacity
            return begins, begins + np.clip(np.asarray(offs, dtype=np.int64), 0, self.capacity)
        ends = group_ends(offs, self.total_m)
        return np.concatenate(([0], ends[:-1])).astype(np.int64), ends

    def flops(self, offs: np.ndarray) -> int:
        """2·K times the rows the groups actually hold (the host copy of offs) times the weights' rows."""
        begins, ends = self.row_ranges(offs)
        return 2 * int(np.maximum(ends - begins, 0).sum()) * self.weight_rows * self.k

    def check_offsets(self, offs: np.ndarray) -> None:
        """Raise SpecError for host offsets (counts when masked) of the wrong length, decreasing, or past
        total_m (counts: outside [0, capacity])."""
        offs = np.asarray(offs)
        what = "counts" if self.masked_layout else "offs"
        if offs.shape != (self.groups,):
            raise SpecError(f"grouped GEMM: {what} has shape {offs.shape}, expected ({self.groups},)")
        if self.masked_layout and (np.any(offs < 0) or np.any(offs > self.capacity)):
            raise SpecError(f"grouped GEMM: counts must lie in [0, capacity={self.capacity}]")
        if not self.masked_layout and (np.any(np.diff(offs) < 0) or offs[0] < 0 or offs[-1] > self.total_m):
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


def silu(x: np.ndarray) -> np.ndarray:
    """x·sigmoid(x), written so that a large negative x gives -0, not an overflow warning."""
    return x * np.exp(-np.logaddexp(0.0, -x))


def _block_scaled(a: np.ndarray, scale_a: np.ndarray, b: np.ndarray, scale_b: np.ndarray) -> np.ndarray:
    """a (rows, K) · b (K, N) with a's 1x128 scales (rows, KB) and b's 128x128 block scales (NB, KB)."""
    k, n = b.shape
    a_scales = np.repeat(scale_a, BLOCK, axis=1)[:, :k]
    b_scales = np.repeat(np.repeat(scale_b, BLOCK, axis=0), BLOCK, axis=1)[:n, :k].T  # (K, N)
    return (a.astype(np.float64) * a_scales) @ (b.astype(np.float64) * b_scales)


def reference(spec: GroupedSpec, a: np.ndarray, b: np.ndarray, offs: np.ndarray,
              bias: np.ndarray | None = None, scale_a: np.ndarray | None = None,
              scale_b: np.ndarray | None = None) -> np.ndarray:
    """float64 D for a (total_m, K), b (G, K, N) (SwiGLU: (G, K, 2N), gate columns first), offs (G,) (counts
    when masked), bias (G, N); fp8: a and b the codes' values, scale_a (1,) or (total_m,) and scale_b (1,) or
    (G, N) by `scaling`. NaN in every row no group holds."""
    out = np.full((spec.total_m, spec.n), np.nan)
    for g, (start, end) in enumerate(zip(*spec.row_ranges(offs))):
        if end <= start:
            continue
        value = a[start:end].astype(np.float64) @ b[g].astype(np.float64)
        if spec.fp8 and spec.scaling == "block":
            value = _block_scaled(a[start:end], np.asarray(scale_a, np.float64)[start:end], b[g],
                                  np.asarray(scale_b, np.float64)[g])
        elif spec.fp8:
            sa, sb = np.asarray(scale_a, np.float64), np.asarray(scale_b, np.float64)
            value = (value * sa[0] * sb[0] if spec.scaling == "tensor"
                     else value * sa[start:end, None] * sb[g][None, :])
        if spec.swiglu:
            out[start:end] = silu(value[:, :spec.n]) * value[:, spec.n:]
            continue
        operands = {"bias": bias[g].astype(np.float64)} if spec.has_bias else {}
        out[start:end] = spec.epilogue.reference(value, operands)
    return out
