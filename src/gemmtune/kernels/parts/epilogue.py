"""The epilogue part: `apply_epilogue`, the device function every family calls on each finished
accumulator on its way to D, and the call to it.

The algebra (one CUDA statement per op, the GELU helper, the float64 reference) is
gemmtune.epilogue's; this part only decides how the function is declared and called. A family
describes how it passes the operands with an `Operands` value:

    SIMT = Operands(CArg.VALUE, VectorArg.POINTER)   # float c; const float* __restrict__ bias
    VIEWS = Operands(CArg.VALUE, VectorArg.VIEW)     # float c; FloatView<out_t> bias (parts/floats.py)
    STAGED = Operands(CArg.VALUE, VectorArg.VALUE)   # float c; float bias: the caller reads bias[col] once

    epilogue_function(spec.epilogue, SIMT, out_dtype=spec.out_dtype)  # GELU helper (if used) + apply_epilogue
    epilogue_call(spec.epilogue, SIMT, "acc", "row", "col", c="C[row * N + col]")
    # -> "apply_epilogue(acc, row, col, C[row * N + col], bias)", or just "acc" for no epilogue
    epilogue_call(spec.epilogue, STAGED, "acc", "row", "col", c="c0", bias="bias_at[j]")
    # -> "apply_epilogue(acc, row, col, c0, bias_at[j])"; without `bias`, the guarded read
    #    "(col < N ? bias[col] : 0.0f)" of a bias view or pointer in scope

A family whose thread holds several rows of each of its columns (the tensor-core fragments) passes
the bias as a VALUE: it reads each column's bias once, guarded once, and adds it to every row.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ...epilogue import Epilogue
from ...spec import GemmSpec

# Every definition starts with this line (tests count it: one definition per kernel).
MARKER = "// apply_epilogue: the epilogue part (kernels/parts/epilogue.py)"


class CArg(Enum):
    """How the matrix C reaches a function (the declaration it gets)."""

    VALUE = "float c"             # its element C[row, col], loaded by the caller
    VIEW = "FloatView<out_t> C"   # the whole matrix, read as floats and indexed in place
    ABSENT = ""                   # not passed (the callee reads C from somewhere else)


class VectorArg(Enum):
    """The type a bias vector is passed as."""

    POINTER = "const float* __restrict__"  # an fp32 array as stored
    VIEW = "FloatView<out_t>"               # an out_t array read as floats
    VALUE = "float"                         # its element for (row, col), read and guarded by the caller


@dataclass(frozen=True)
class Operands:
    """How a family passes the epilogue's operands: C, the bias vector; alpha and beta are floats."""

    c: CArg = CArg.VALUE
    vector: VectorArg = VectorArg.POINTER

    def declarations(self, epilogue: Epilogue) -> list[str]:
        """Parameter declarations of the epilogue's operands, in kernel order (C, bias, alpha, beta)."""
        decls = []
        for op in epilogue.operands():
            if op.kind == "matrix":
                decls += [self.c.value] if self.c is not CArg.ABSENT else []
            elif op.kind in ("row", "col"):
                decls.append(f"{self.vector.value} {op.name}")
            else:
                decls.append(f"float {op.name}")
        return decls


def epilogue_function(epilogue: Epilogue, operands: Operands, note: str = "", preamble: bool = True,
                      out_dtype: str = "fp32") -> str:
    """`apply_epilogue(float v, int row, int col, <operands>)`: `v` through the epilogue's ops, in
    fp32. Nothing for the identity epilogue. `note`: a comment line the family adds (how it loads C,
    say). `preamble`: also emit the algebra's helpers (GELU, chosen for D's type `out_dtype`: the
    hardware tanh for 16-bit outputs); False for a caller that emits them."""
    if epilogue.is_identity:
        return ""
    if epilogue.reads_c and operands.c is CArg.ABSENT:
        raise ValueError(f"epilogue {epilogue} reads C: apply_epilogue must be passed C")
    params = ", ".join(["float v", "int row", "int col", *operands.declarations(epilogue)])
    c = "c" if operands.c is CArg.VALUE else None  # a view is indexed in place
    vector = "bias" if operands.vector is VectorArg.VALUE else None  # else indexed in place, guarded
    body = "".join(f"    {line}\n" for line in epilogue.cuda_statements("row", "col", "N", c=c, vector=vector))
    why = f"// The fused epilogue {epilogue}: fp32, in registers on the way to D (before rounding to D's type).\n"
    return (f"{epilogue.cuda_preamble(out_dtype) if preamble else ''}{MARKER}\n{why}"
            + (f"// {note}\n" if note else "")
            + f"__device__ __forceinline__ float apply_epilogue({params}) {{\n{body}    return v;\n}}\n")


def bias_kind(epilogue: Epilogue) -> str | None:
    """'row' (bias_row), 'col' (bias_col) or None: which way the epilogue's bias vector runs."""
    return next((op.kind for op in epilogue.operands() if op.kind in ("row", "col")), None)


def vector_element(epilogue: Epilogue, row: str, col: str, vector: str = "bias") -> str:
    """The guarded read of the epilogue's bias element for (row, col) from `vector` (a view or
    pointer in scope): bias[row] for bias_row, bias[col] for bias_col, 0 past the matrix."""
    at, bound = (row, "M") if bias_kind(epilogue) == "row" else (col, "N")
    return f"({at} < {bound} ? {vector}[{at}] : 0.0f)"


def epilogue_call(epilogue: Epilogue, operands: Operands, value: str, row: str, col: str,
                  c: str | None = None, bias: str | None = None) -> str:
    """The expression `apply_epilogue(value, row, col, ...)` (just `value` for the identity epilogue).
    `c`: the expression for C[row, col] when C is passed as a value; `bias`: what is passed for the
    bias vector (default its name; or a wrapping such as `FloatView<out_t>{bias}`; for a VALUE, its
    element's expression, by default vector_element's guarded read of `bias`)."""
    if epilogue.is_identity:
        return value
    args = [value, row, col]
    for op in epilogue.operands():
        if op.kind == "matrix" and operands.c is CArg.VALUE:
            if c is None:
                raise ValueError("apply_epilogue takes C's element: pass its expression as `c`")
            args.append(c)
        elif op.kind == "matrix":
            args += ["C"] if operands.c is CArg.VIEW else []
        elif op.kind in ("row", "col"):
            args.append(bias or (vector_element(epilogue, row, col) if operands.vector is VectorArg.VALUE else "bias"))
        else:
            args.append(op.name)
    return f"apply_epilogue({', '.join(args)})"


# SwiGLU of one output in fp32, shared by the gated GEMMs of every family (the grouped MoE kernel's and
# the dense wgmma one's); gemmtune.epilogue.swiglu64 is its float64 reference.
SWIGLU = r"""
// SwiGLU of one output in fp32: silu(gate) * up = gate / (1 + e^-gate) * up. A gate far below zero makes
// e^-gate infinite and silu -0, not NaN.
__device__ __forceinline__ float swiglu(float gate, float up) {
    return gate / (1.0f + __expf(-gate)) * up;
}
"""


POINTER_DECLS = {"A": "const in_t* __restrict__ A", "B": "const in_t* __restrict__ B",
                 "C": "const out_t* __restrict__ C", "bias": "const out_t* __restrict__ bias",
                 "alpha": "float alpha", "beta": "float beta", "D": "out_t* __restrict__ D"}


def pointer_params(spec: GemmSpec) -> tuple[tuple[str, ...], str]:
    """A kernel's arguments when every operand comes as a plain pointer (or scalar): their names in
    launch order (A, B, the epilogue's operands, D) and the parameter list."""
    names = ["A", "B", *(op.name for op in spec.epilogue.operands()), "D"]
    return tuple(names), ", ".join(POINTER_DECLS[n] for n in names)
