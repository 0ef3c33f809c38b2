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


OPS: dict[str, EpilogueOp] = {
    op.name: op
    for op in (
        EpilogueOp("alpha", (ALPHA,), "v *= alpha;", lambda v, x: v * x["alpha"], "scale by scalar alpha"),
        EpilogueOp("bias_row", (BIAS_ROW,), "if ({row} < M) v += bias[{row}];", lambda v, x: v + x["bias"][:, None],
                   "add bias[row] (length M)"),
        EpilogueOp("bias_col", (BIAS_COL,), "if ({col} < N) v += bias[{col}];", lambda v, x: v + x["bias"][None, :],
                   "add bias[col] (length N)"),
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

    def cuda_preamble(self) -> str:
        return GELU_PREAMBLE if "gelu" in self.ops else ""

    @property
    def reads_c(self) -> bool:
        return MATRIX_C in self.operands()

    def cuda_statements(self, row: str, col: str, ld: str, c: str | None = None) -> list[str]:
        """CUDA statements that turn float `v` (the accumulator) into the output value.

        `c` is the expression for C[row, col]; by default C is indexed in place (row-major, ld)."""
        c_value = c if c is not None else f"C[(size_t)({row}) * {ld} + ({col})]"
        return [OPS[name].cuda.format(row=row, col=col, ld=ld, c=c_value) for name in self.ops]

    def reference(self, acc: np.ndarray, operands: dict[str, np.ndarray | float]) -> np.ndarray:
        """Apply the chain in float64 to `acc` (= A·B) with the given operand values."""
        v = np.asarray(acc, dtype=np.float64)
        args = {k: np.asarray(x, dtype=np.float64) for k, x in operands.items()}
        for name in self.ops:
            v = OPS[name].reference(v, args)
        return v
