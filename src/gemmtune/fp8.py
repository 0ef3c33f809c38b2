"""fp8 on the host (issue 70, groundwork): the two formats, rounding to them, the scalings LLMs use, and the
float64 reference of a GEMM of scaled fp8 operands; the codes a device holds (`encode`, `decode_codes`); and an
fp8 GemmSpec's random inputs and dequantized operands, which verify.py checks its kernels with.

Formats (OCP FP8, as Hopper's cvt and torch's float8_e4m3fn / float8_e5m2 define them):
- e4m3 ("fn": finite): 4 exponent bits (bias 7), 3 mantissa bits, no infinities, one NaN code per sign;
  largest 448, smallest normal 2^-6, smallest subnormal 2^-9.
- e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and NaNs; largest 57344.
Rounding is to nearest, ties to even, saturating to ±largest (PTX's cvt.rn.satfinite): what a quantizer
that first divides by its scale should see.

Scalings (x ≈ q · scale, q in the format, scale float32 > 0, chosen as amax / largest so that the largest
magnitude of each group lands on the format's largest value):
- "tensor": one scale for the whole operand;
- "rowwise": one per row of A (M×K) and one per column of B (K×N), i.e. per output row / column;
- "block": A in 1×128 groups (each row, each block of 128 along K), B in 128×128 blocks (DeepSeek-V3 and
  DeepGEMM's layout); the last block along an edge may be partial.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import SpecError
from .spec import SCALINGS, GemmSpec


@dataclass(frozen=True)
class Fp8Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    largest: float

    @property
    def smallest_normal_exponent(self) -> int:
        return 1 - self.bias

    def decode(self, code: int) -> float:
        """The value of an 8-bit code (NaN for the NaN codes, ±inf for e5m2's infinities)."""
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1)
        mantissa = code & ((1 << self.mantissa_bits) - 1)
        top = (1 << self.exponent_bits) - 1
        if self.name == "e4m3" and exponent == top and mantissa == (1 << self.mantissa_bits) - 1:
            return float("nan")
        if self.name == "e5m2" and exponent == top:
            return float("nan") if mantissa else sign * float("inf")
        if exponent == 0:  # subnormal
            return sign * 2.0 ** self.smallest_normal_exponent * mantissa / (1 << self.mantissa_bits)
        return sign * 2.0 ** (exponent - self.bias) * (1 + mantissa / (1 << self.mantissa_bits))


FORMATS = {"e4m3": Fp8Format("e4m3", 4, 3, 7, 448.0), "e5m2": Fp8Format("e5m2", 5, 2, 15, 57344.0)}
BLOCK = 128  # the block scaling's group length along K (and B's block side along N)


def fp8_format(name: str) -> Fp8Format:
    if name not in FORMATS:
        raise SpecError(f"unknown fp8 format '{name}'; known: {', '.join(FORMATS)}")
    return FORMATS[name]


def round_fp8(values: np.ndarray, name: str) -> np.ndarray:
    """`values` rounded to the nearest `name` value (ties to even), saturated to ±largest; NaN stays NaN.
    Returned as float64, which holds every fp8 value exactly."""
    fmt = fp8_format(name)
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(exponent, fmt.smallest_normal_exponent)  # below it: the subnormals' fixed step
    step = np.exp2(exponent - fmt.mantissa_bits)
    with np.errstate(invalid="ignore"):  # ±inf / inf: replaced below
        rounded = np.round(x / step) * step  # numpy rounds halves to even
    rounded = np.clip(rounded, -fmt.largest, fmt.largest)
    rounded = np.where(np.isinf(x), np.sign(x) * fmt.largest, rounded)  # satfinite: no infinities out
    return np.where(np.isnan(x), np.nan, rounded)


@dataclass(frozen=True)
class Quantized:
    """An operand as fp8 values (float64, each exactly an fp8 value) and the float32 scales that multiply
    them back, broadcast to the operand's shape by `expand`."""

    values: np.ndarray
    scales: np.ndarray
    scaling: str
    role: str  # "a" (M×K) or "b" (K×N)

    def expand(self) -> np.ndarray:
        """The scales at every element of the operand (float64)."""
        return _expand(self.scales, self.values.shape, self.scaling, self.role)

    def dequantized(self) -> np.ndarray:
        return self.values * self.expand()


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def _group_amax(x: np.ndarray, scaling: str, role: str) -> np.ndarray:
    """The largest magnitude of each scaling group: () for tensor, (M, 1) / (1, N) rowwise, and
    (M, ceil(K/128)) for A's 1×128 groups or (ceil(K/128), ceil(N/128)) for B's 128×128 blocks."""
    a = np.abs(x)
    if scaling == "tensor":
        return np.asarray(a.max())
    if scaling == "rowwise":
        return a.max(axis=1, keepdims=True) if role == "a" else a.max(axis=0, keepdims=True)
    rows, cols = x.shape
    if role == "a":
        padded = np.zeros((rows, _blocks(cols) * BLOCK))
        padded[:, :cols] = a
        return padded.reshape(rows, _blocks(cols), BLOCK).max(axis=2)
    padded = np.zeros((_blocks(rows) * BLOCK, _blocks(cols) * BLOCK))
    padded[:rows, :cols] = a
    return padded.reshape(_blocks(rows), BLOCK, _blocks(cols), BLOCK).max(axis=(1, 3))


def _expand(scales: np.ndarray, shape: tuple[int, int], scaling: str, role: str) -> np.ndarray:
    rows, cols = shape
    s = np.asarray(scales, dtype=np.float64)
    if scaling in ("tensor", "rowwise"):
        return np.broadcast_to(s, shape)
    if role == "a":
        return np.repeat(s, BLOCK, axis=1)[:, :cols]
    return np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def quantize(x: np.ndarray, name: str, scaling: str, role: str) -> Quantized:
    """`x` (A: M×K, or B: K×N) as fp8 `name` values and `scaling`'s float32 scales (amax / largest per
    group; a group of zeros gets scale 1)."""
    if scaling not in SCALINGS:
        raise SpecError(f"unknown scaling '{scaling}'; known: {', '.join(SCALINGS)}")
    if role not in ("a", "b"):
        raise SpecError(f"role is 'a' (M×K) or 'b' (K×N), not {role!r}")
    x = np.asarray(x, dtype=np.float64)
    amax = _group_amax(x, scaling, role)
    scales = np.where(amax > 0, amax / fp8_format(name).largest, 1.0).astype(np.float32)
    return Quantized(round_fp8(x / _expand(scales, x.shape, scaling, role), name), scales, scaling, role)


def reference(a: Quantized, b: Quantized) -> np.ndarray:
    """D = dequantized(A) · dequantized(B) in float64: what a scaled fp8 GEMM approximates (its error is
    the accumulation's, not the quantization's, which both sides share)."""
    return a.dequantized() @ b.dequantized()


# --- codes on the device --------------------------------------------------------------------------------
def _code_table(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every finite value of `name` sorted, and its code (+0 for zero)."""
    fmt = fp8_format(name)
    pairs = sorted({fmt.decode(c): c for c in range(256) if np.isfinite(fmt.decode(c)) and c != 0x80}.items())
    return np.array([v for v, _ in pairs]), np.array([c for _, c in pairs], dtype=np.uint8)


def encode(values: np.ndarray, name: str) -> np.ndarray:
    """The uint8 codes of `values`, each exactly a finite `name` value (round_fp8's output); SpecError otherwise."""
    table, codes = _code_table(name)
    x = np.asarray(values, dtype=np.float64)
    at = np.clip(np.searchsorted(table, x), 0, len(table) - 1)
    if not np.array_equal(table[at], x):  # also false for NaN
        raise SpecError(f"encode: values that are not finite {name} values (round them with round_fp8 first)")
    return codes[at]


def decode_codes(codes: np.ndarray, name: str) -> np.ndarray:
    """uint8 codes as the float64 values they stand for."""
    fmt = fp8_format(name)
    lookup = np.array([fmt.decode(c) for c in range(256)])
    return lookup[np.asarray(codes, dtype=np.uint8)]


# --- an fp8 GemmSpec's inputs -----------------------------------------------------------------------------
def _spread(rng: np.random.Generator, shape: tuple[int, int], scaling: str, role: str) -> np.ndarray:
    """Uniform values in [-1, 1] times a factor for each scaling group (2^-4 .. 2^4), so that the scales differ
    from row to row, column to column and block to block: a kernel that applies the wrong one is far off."""
    rows, cols = shape
    x = rng.uniform(-1.0, 1.0, size=shape)
    groups = _group_amax(np.ones(shape), scaling, role).shape
    factors = np.exp2(rng.uniform(-4.0, 4.0, size=groups))
    return x * _expand(factors, shape, scaling, role)


def gemm_inputs(spec: "GemmSpec", rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A (M×K) and B (stored N×K: layout nt) as fp8 values (float64), their float32 scales as the kernel
    reads them, and offs: the row count the fp8 kernel (the grouped one, with one group) reads on the device.

    Scales as the kernel reads them: tensor (1,) each; rowwise scale_a (M,), scale_b (N,); block scale_a
    (M, ceil(K/128)) and scale_b (ceil(N/128), ceil(K/128)): row-major blocks of B as stored (N×K)."""
    a = quantize(_spread(rng, (spec.m, spec.k), spec.scaling, "a"), spec.dtype, spec.scaling, "a")
    b = quantize(_spread(rng, (spec.k, spec.n), spec.scaling, "b"), spec.dtype, spec.scaling, "b")
    scale_b = b.scales.T if spec.scaling == "block" else b.scales  # (KB, NB) -> (NB, KB)
    return {"A": a.values, "B": np.ascontiguousarray(b.values.T), "scale_a": _as_read(a.scales, spec.scaling),
            "scale_b": _as_read(scale_b, spec.scaling), "offs": np.array([spec.m], dtype=np.int32)}


def _as_read(scales: np.ndarray, scaling: str) -> np.ndarray:
    """Scales as the kernel reads them: float32, row-major; one axis unless they are block scales."""
    kept = scales if scaling == "block" else scales.reshape(-1)
    return np.ascontiguousarray(kept, dtype=np.float32)


def dequantized_operands(spec: "GemmSpec", inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """A (M×K) and B as stored (N×K) in float64: the fp8 values times their scales (gemm_inputs' layout)."""
    sa, sb = np.asarray(inputs["scale_a"], np.float64), np.asarray(inputs["scale_b"], np.float64)
    if spec.scaling == "rowwise":
        sa, sb = sa.reshape(-1, 1), sb.reshape(1, -1)
    elif spec.scaling == "block":
        sb = sb.T  # (NB, KB) -> B's K×N blocks (KB, NB)
    a = Quantized(np.asarray(inputs["A"], np.float64), sa, spec.scaling, "a")
    b = Quantized(np.asarray(inputs["B"], np.float64).T, sb, spec.scaling, "b")
    return a.dequantized(), np.ascontiguousarray(b.dequantized().T)
