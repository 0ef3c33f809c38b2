"""Epilogue algebra: what happens to each accumulator on its way to D.

An epilogue is an ordered chain of ops written ``op+op+...`` and applied left to right to the
accumulator ``v = (A·B)[row, col]``. Each op knows its CUDA statement, its float64 numpy
reference, and the operand it needs from the caller (none, the matrix C, a bias vector or a scalar).

    relu+add      D = ReLU(A·B) + C
    alpha+beta    D = alpha·A·B + beta·C
    bias_col+gelu D = GELU(A·B + bias[col])
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import SpecError


@dataclass(frozen=True)
class Operand:
    """An extra kernel argument an epilogue needs. ``kind``: matrix (M×N), row (M), col (N), scalar."""

    name: str
    kind: str

    def shape(self, m: int, n: int) -> tuple[int, ...]:
        return {"matrix": (m, n), "row": (m,), "col": (n,), "scalar": ()}[self.kind]


MATRIX_C = Operand("C", "matrix")
BIAS_ROW = Operand("bias", "row")
BIAS_COL = Operand("bias", "col")
ALPHA = Operand("alpha", "scalar")
BETA = Operand("beta", "scalar")

_GELU_K = math.sqrt(2.0 / math.pi)


def _gelu64(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + np.tanh(_GELU_K * (v + 0.044715 * v**3)))


@dataclass(frozen=True)
class EpilogueOp:
    name: str
    operands: tuple[Operand, ...]
    # CUDA statement updating float `v`; {row}/{col}/{ld} are index expressions of the generator,
    # {c} is the element C[row, col] (an expression the caller chooses, e.g. a preloaded register).
    # A read of a vector operand is guarded by the matrix bounds (constants M and N in every kernel):
    # kernels run the epilogue on whole tiles, edge tiles included, and only the store is clipped
    # (TMA stores), so an unguarded bias[row] would read past the allocation for rows >= M.
    # C needs no guard here: the generators read it in range or through clipped TMA boxes.
    cuda: str
    reference: Callable[[np.ndarray, dict], np.ndarray]
    summary: str
    # The statement where the caller passes the vector operand's element {value} (read and guarded
    # once for all the rows or columns that share it: parts/epilogue.py's VectorArg.VALUE); "" for an
    # op without a vector operand.
    cuda_value: str = ""


OPS: dict[str, EpilogueOp] = {
    op.name: op
    for op in (
        EpilogueOp("alpha", (ALPHA,), "v *= alpha;", lambda v, x: v * x["alpha"], "scale by scalar alpha"),
        EpilogueOp("bias_row", (BIAS_ROW,), "if ({row} < M) v += bias[{row}];", lambda v, x: v + x["bias"][:, None],
                   "add bias[row] (length M)", "v += {value};"),
        EpilogueOp("bias_col", (BIAS_COL,), "if ({col} < N) v += bias[{col}];", lambda v, x: v + x["bias"][None, :],
                   "add bias[col] (length N)", "v += {value};"),
        EpilogueOp("relu", (), "v = fmaxf(v, 0.0f);", lambda v, x: np.maximum(v, 0.0), "ReLU"),
        EpilogueOp("gelu", (), "v = gelu_tanh(v);", lambda v, x: _gelu64(v), "GELU, tanh form"),
        EpilogueOp("add", (MATRIX_C,), "v += {c};", lambda v, x: v + x["C"],
                   "add residual matrix C (M×N)"),
        EpilogueOp("beta", (BETA, MATRIX_C), "v += beta * {c};",
                   lambda v, x: v + x["beta"] * x["C"], "add beta·C (C is M×N)"),
    )
}

GELU_PREAMBLE = """\
// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
"""

# The hardware tanh (tanh.approx.f32, one MUFU.TANH, sm_75+) has a relative error of at most 2^-11
# (PTX ISA; about 2^-16.5 measured), so GELU's error is at most 2^-12·|x|: within the rounding of a
# 16-bit output at the input's scale (fp16's unit roundoff is 2^-11, bf16's 2^-8). fp32 outputs keep
# libm's tanhf (GELU_PREAMBLE, a few ulp): their tolerance has no rounding to hide 2^-12 in.
# tests/test_epilogue.py sweeps x through a float32 emulation of this helper for that bound.
FAST_GELU_OUT_DTYPES = frozenset({"bf16", "fp16"})
GELU_CUBIC = 0.044715 * _GELU_K  # √(2/π)·0.044715: z = x·(√(2/π) + GELU_CUBIC·x²)
FAST_GELU_PREAMBLE = f"""\
// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), tanh by the hardware's
// tanh.approx.f32 (one MUFU.TANH; libm's tanhf is ~20 instructions and two MUFU). Its relative error
// (at most 2^-11) moves GELU by at most 2^-12·|x|, under a 16-bit output's rounding at that scale.
__device__ __forceinline__ float gelu_tanh(float x) {{
    const float half_x = 0.5f * x;
    const float z = x * fmaf({GELU_CUBIC!r}f, x * x, {_GELU_K!r}f);  // √(2/π)·(x + 0.044715·x³)
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(z));
    return fmaf(half_x, t, half_x);  // 0.5·x·(1 + t)
}}
"""


def gelu_preamble(out_dtype: str) -> str:
    """The GELU helper for outputs of `out_dtype`: the hardware tanh where its error is below the
    output's rounding (16-bit outputs), libm's tanhf otherwise (fp32)."""
    return FAST_GELU_PREAMBLE if out_dtype in FAST_GELU_OUT_DTYPES else GELU_PREAMBLE


# --- gated (SwiGLU) GEMMs: the weight layout and the activation, in numpy -------------------------------
GATE_ROWS = 8  # B's rows alternate GATE_ROWS gate rows and GATE_ROWS up rows (GemmSpec.gated)


def swiglu64(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate)·up in float64 (parts/epilogue.py's SWIGLU is the kernel's fp32 form)."""
    gate = np.asarray(gate, dtype=np.float64)
    with np.errstate(over="ignore"):  # exp(-gate) = inf for a very negative gate: silu is -0
        return gate / (1.0 + np.exp(-gate)) * np.asarray(up, dtype=np.float64)


def interleave_gate_up(w_gate: np.ndarray, w_up: np.ndarray) -> np.ndarray:
    """The (2N)×K weight of a gated GEMM from gate and up weights (N×K each, N a multiple of 8): for output
    columns [8q, 8q+8), gate rows at [16q, 16q+8), up rows at [16q+8, 16q+16). (gemmtune.torch.gated's
    interleave_gate_up is the torch twin.)"""
    w_gate, w_up = np.asarray(w_gate), np.asarray(w_up)
    if w_gate.shape != w_up.shape or w_gate.ndim != 2 or w_gate.shape[0] % GATE_ROWS:
        raise SpecError(f"gate and up weights must both be N×K with N a multiple of {GATE_ROWS}, "
                        f"got {w_gate.shape} and {w_up.shape}")
    n, k = w_gate.shape
    pairs = np.stack([w_gate.reshape(n // GATE_ROWS, GATE_ROWS, k), w_up.reshape(n // GATE_ROWS, GATE_ROWS, k)], axis=1)
    return pairs.reshape(2 * n, k)


def deinterleave_gate_up(w_gu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w_gate, w_up), N×K each, from an interleaved (2N)×K weight (interleave_gate_up's inverse)."""
    w_gu = np.asarray(w_gu)
    two_n, k = w_gu.shape
    if two_n % (2 * GATE_ROWS):
        raise SpecError(f"an interleaved gate/up weight has 2N rows with N a multiple of {GATE_ROWS}, got {two_n}")
    blocks = w_gu.reshape(two_n // (2 * GATE_ROWS), 2, GATE_ROWS, k)
    return blocks[:, 0].reshape(two_n // 2, k), blocks[:, 1].reshape(two_n // 2, k)


@dataclass(frozen=True)
class Epilogue:
    """An ordered chain of epilogue ops; the empty chain is a plain GEMM."""

    ops: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str | None) -> "Epilogue":
        if text is None or text.strip().lower() in ("", "none"):
            return Epilogue()
        names = tuple(part.strip().lower() for part in text.split("+"))
        for name in names:
            if name not in OPS:
                raise SpecError(f"unknown epilogue op '{name}' in '{text}'; known: {', '.join(OPS)}")
        if len(set(names)) != len(names):
            raise SpecError(f"epilogue '{text}' repeats an op; each op may appear once")
        if "add" in names and "beta" in names:
            raise SpecError(f"epilogue '{text}' uses C twice: use 'add' (+C) or 'beta' (+beta·C), not both")
        if "bias_row" in names and "bias_col" in names:
            raise SpecError(f"epilogue '{text}' has two biases: choose bias_row or bias_col")
        return Epilogue(names)

    def __str__(self) -> str:
        return "+".join(self.ops) if self.ops else "none"

    @property
    def is_identity(self) -> bool:
        return not self.ops

    def operands(self) -> tuple[Operand, ...]:
        """Extra arguments in kernel order: C, bias, then scalars alpha, beta."""
        found = {operand for name in self.ops for operand in OPS[name].operands}
        order = (MATRIX_C, BIAS_ROW, BIAS_COL, ALPHA, BETA)
        return tuple(op for op in order if op in found)

    def cuda_preamble(self, out_dtype: str = "fp32") -> str:
        """The helpers the ops call, for outputs of `out_dtype` (the GELU helper; fp32, the default,
        takes the accurate one)."""
        return gelu_preamble(out_dtype) if "gelu" in self.ops else ""

    @property
    def reads_c(self) -> bool:
        return MATRIX_C in self.operands()

    def transposed(self) -> "Epilogue":
        """The chain applied to Dᵀ = B·Aᵀ: a bias per column of D is one per row of Dᵀ and the other way
        round; the elementwise ops and C (read transposed by the kernel that asks) stay as they are."""
        swap = {"bias_row": "bias_col", "bias_col": "bias_row"}
        return Epilogue(tuple(swap.get(name, name) for name in self.ops))

    @property
    def reads_bias(self) -> bool:
        """Whether a bias vector (per row or per column) is an operand."""
        return BIAS_ROW in self.operands() or BIAS_COL in self.operands()

    def cuda_statements(self, row: str, col: str, ld: str, c: str | None = None,
                        vector: str | None = None) -> list[str]:
        """CUDA statements that turn float `v` (the accumulator) into the output value.

        `c` is the expression for C[row, col]; by default C is indexed in place (row-major, ld).
        `vector` is the expression for the bias element of (row, col), read and guarded by the
        caller; by default the bias vector is indexed in place under the matrix guard."""
        c_value = c if c is not None else f"C[(size_t)({row}) * {ld} + ({col})]"

        def statement(op: EpilogueOp) -> str:
            if vector is not None and op.cuda_value:
                return op.cuda_value.format(value=vector)
            return op.cuda.format(row=row, col=col, ld=ld, c=c_value)

        return [statement(OPS[name]) for name in self.ops]

    def reference(self, acc: np.ndarray, operands: dict[str, np.ndarray | float]) -> np.ndarray:
        """Apply the chain in float64 to `acc` (= A·B) with the given operand values."""
        v = np.asarray(acc, dtype=np.float64)
        args = {k: np.asarray(x, dtype=np.float64) for k, x in operands.items()}
        for name in self.ops:
            v = OPS[name].reference(v, args)
        return v
