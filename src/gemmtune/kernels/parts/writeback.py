"""The write-back part: a thread's accumulators stored to D straight from registers, through the
epilogue, for any tensor-core fragment that holds pairs of neighbouring columns.

mma.sync's 16x8 tiles and wgmma's 64-row blocks both leave each thread pairs (row, col),
(row, col + 1) of D in two consecutive accumulators; the fragments differ only in which pairs a
thread holds. A family says that with a `PairFragment` (the loops over its pairs, each pair's row,
column and registers) and how it holds C with a `PairOutput`; `pair_stores` writes the loops and
the guarded stores (one 32/64-bit store per pair where N is even, single elements where it is odd),
`pair_io` the `read_pair` / `write_pair` helpers those stores call.

    fragment = PairFragment(loops=(("i", "MT"), ("j", "NT"), ("h", "2")), row="m0 + ...", col="n0 + ...",
                            values=("acc[i][j][2 * h]", "acc[i][j][2 * h + 1]"), row_depth=3)
    code = pair_io(spec, output) + ... + pair_stores(spec, fragment, output)
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ...spec import GemmSpec
from .epilogue import Operands, VectorArg, bias_kind, epilogue_call, vector_element


@dataclass(frozen=True)
class PairFragment:
    """Where a thread's accumulator pairs sit in D, as CUDA expressions over the loop indices (and
    whatever names the caller has in scope: the thread's lane, the tile's origin)."""

    loops: tuple[tuple[str, str], ...]  # (index, count) of each loop over the pairs, outermost first
    row: str                            # D's row of the pair
    col: str                            # the pair's first column (even)
    values: tuple[str, str]             # the registers holding (row, col) and (row, col + 1)
    row_depth: int                      # the row reads only the first row_depth indices: it is computed and guarded there
    note: str = ""                      # a comment line: which pairs a thread holds
    # The loop index `col` alone reads, and those `row` alone reads: where apply_epilogue takes the
    # bias as a VALUE, each column's (row's) bias is read once, before the loops (staged_bias).
    col_loop: str = ""
    row_loops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.row_depth <= len(self.loops):
            raise ValueError(f"row_depth {self.row_depth} is not one of the {len(self.loops)} loops")


class OddEdge(Enum):
    """How a pair is stored where N is odd (pairs not aligned, the last column's pair half outside)."""

    EACH = "each"          # each element under its own guard: if (col < N) ...; if (col + 1 < N) ...
    # The pair where both columns are inside, else the first alone: both epilogue values are computed
    # before either store, so reads the compiler cannot tell apart from D (FloatView bias and C, not
    # __restrict__) are not loaded again after the first store.
    PAIR_OR_FIRST = "pair_or_first"


class CRead(Enum):
    """How the write-back reads C (for an epilogue that reads it)."""

    POINTER = "pointer"  # `const out_t* C`: a pair at a time (read_pair) where N is even, else to_float(C[at])
    VIEW = "view"        # `FloatView<out_t> C`: element by element, C[at]


@dataclass(frozen=True)
class PairOutput:
    """How the family holds the epilogue's operands and indexes D at the write-back."""

    operands: Operands      # apply_epilogue's declaration (C passed as a value)
    c_read: CRead = CRead.VIEW
    bias: str | None = None  # the bias vector as the stores name it (None: `bias`): passed, or read for a VALUE
    index: str = "size_t"   # the type an element's offset row * N + col is computed in
    cvt_pairs: bool = True  # 16-bit pairs packed by one cvt ...x2 (pack_pair; sm_80 and newer)
    odd_edge: OddEdge = OddEdge.EACH
    # D (and C) held transposed: the kernel computes Dᵀ, so its element (row, col) is D's (col, row), at
    # col * M + row (M: the kernel's rows, D's columns). A pair's two elements are then M apart: each is
    # stored alone, as where N is odd.
    transposed: bool = False

    def offset(self) -> str:
        """The offset of the element (row, col) in D and C."""
        return f"({self.index})col * M + row" if self.transposed else f"({self.index})row * N + col"

    @property
    def next_col(self) -> str:
        """From the offset of (row, col) to that of (row, col + 1)."""
        return "M" if self.transposed else "1"


def _single_stores(spec: GemmSpec, output: PairOutput) -> bool:
    """Whether a pair's elements are stored one by one: N is odd (pairs not aligned) or D is transposed."""
    return bool(spec.n % 2) or output.transposed


def _reads_c_pairs(spec: GemmSpec, output: PairOutput) -> bool:
    return spec.epilogue.reads_c and output.c_read is CRead.POINTER and not _single_stores(spec, output)


def pair_io(spec: GemmSpec, output: PairOutput) -> str:
    """`write_pair` (and `read_pair` where C is read a pair at a time) for D's type: only where N is
    even, so that every pair starts on an aligned 4- or 8-byte boundary (and D is not transposed)."""
    if _single_stores(spec, output):
        return ""
    if spec.out_dtype == "fp32":
        read = r"""__device__ __forceinline__ void read_pair(const out_t* p, float& a, float& b) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    a = v.x; b = v.y;
}
"""
        write = "__device__ __forceinline__ void write_pair(out_t* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }\n"
        what = "fp32 outputs (8-byte aligned: N is even and col is even)"
    else:
        read = r"""__device__ __forceinline__ void read_pair(const out_t* p, float& a, float& b) {
    const u32 w = *reinterpret_cast<const u32*>(p);
    a = to_float(out_t{(unsigned short)(w & 0xFFFFu)});
    b = to_float(out_t{(unsigned short)(w >> 16)});
}
"""
        pack = ("pack_pair(a, b, (out_t*)0)" if output.cvt_pairs else  # cvt ...x2 needs sm_80
                "(u32)from_float(a, (out_t*)0).bits | ((u32)from_float(b, (out_t*)0).bits << 16)")
        write = f"""__device__ __forceinline__ void write_pair(out_t* p, float a, float b) {{
    *reinterpret_cast<u32*>(p) = {pack};
}}
"""
        what = "16-bit outputs in one 32-bit word (4-byte aligned: N is even and col is even)"
    return (f"\n// Two neighbouring {what}.\n"
            + (read if _reads_c_pairs(spec, output) else "") + write)


def _apply(spec: GemmSpec, output: PairOutput, value: str, col: str, c: str | None, bias: str | None) -> str:
    if output.operands.vector is VectorArg.VALUE and bias is None and bias_kind(spec.epilogue):
        bias = vector_element(spec.epilogue, "row", col, output.bias or "bias")  # read in place, guarded
    elif output.operands.vector is not VectorArg.VALUE:
        bias = output.bias
    return epilogue_call(spec.epilogue, output.operands, value, "row", col, c=c, bias=bias)


def pair_epilogue(spec: GemmSpec, output: PairOutput, values: tuple[str, str],
                  c: tuple[str | None, str | None] = (None, None),
                  bias: tuple[str | None, str | None] = (None, None)) -> tuple[str, str]:
    """The epilogue applied to a pair's two values at (row, col) and (row, col + 1), with C's values
    `c` where it reads C and the bias elements `bias` where they are staged (StagedBias.elements): the
    expressions a store writes (names `row` and `col` in scope)."""
    return (_apply(spec, output, values[0], "col", c[0], bias[0]),
            _apply(spec, output, values[1], "col + 1", c[1], bias[1]))


@dataclass(frozen=True)
class StagedBias:
    """The bias of a thread's pairs read once before its loops: `lines` declare and fill bias_at,
    `elements` are a pair's two elements in it (loop indices in scope). Empty where nothing is staged."""

    lines: tuple[str, ...] = ()
    elements: tuple[str | None, str | None] = (None, None)


def staged_bias(spec: GemmSpec, fragment: PairFragment, output: PairOutput) -> StagedBias:
    """Where apply_epilogue takes the bias as a VALUE and the fragment names the loops its columns
    (rows) follow: each column's (row's) bias read once for all the rows (columns) a thread holds of
    it, by loads no predicate holds back (a column past N reads bias[N - 1]: its outputs are not
    stored), so all are in flight at once."""
    kind = bias_kind(spec.epilogue)
    loops = (fragment.col_loop,) if kind == "col" and fragment.col_loop else fragment.row_loops if kind == "row" else ()
    if output.operands.vector is not VectorArg.VALUE or not loops:
        return StagedBias()
    count, vector = dict(fragment.loops), output.bias or "bias"
    heads = [line for depth, i in enumerate(loops)
             for line in ("    " * depth + "#pragma unroll", "    " * depth + f"for (int {i} = 0; {i} < {count[i]}; ++{i})")]
    pad = "    " * len(loops)
    at = "bias_at" + "".join(f"[{i}]" for i in loops)
    if kind == "col":
        shape = f"[{count[fragment.col_loop]}][2]"
        heads[-1] += " {"
        body = [f"{pad}const int col = {fragment.col};", f"{pad}{at}[0] = {vector}[min(col, N - 1)];",
                f"{pad}{at}[1] = {vector}[min(col + 1, N - 1)];", "    " * (len(loops) - 1) + "}"]
        elements, what = (f"{at}[0]", f"{at}[1]"), "columns"
    else:
        shape = "".join(f"[{count[i]}]" for i in loops)
        body = [f"{pad}{at} = {vector}[min({fragment.row}, M - 1)];"]
        elements, what = (at, at), "rows"
    lines = [f"// The bias of this thread's {what}, each read once for all it holds of it.", f"float bias_at{shape};",
             *heads, *body]
    return StagedBias(tuple(lines), elements)


def _c_element(spec: GemmSpec, output: PairOutput, at: str) -> str | None:
    if not spec.epilogue.reads_c:
        return None
    return f"to_float(C[{at}])" if output.c_read is CRead.POINTER else f"C[{at}]"


def _odd_stores(spec: GemmSpec, output: PairOutput, bias: tuple[str | None, str | None],
                c_staged: str | None = None) -> list[str]:
    """A pair's two elements stored one by one (N odd, or D transposed), each only where its column is
    inside D; C from `c_staged` where the row's C was read before its stores (staged_c)."""
    each = output.odd_edge is OddEdge.EACH
    # EACH shares the offset `at`; PAIR_OR_FIRST spells it at each access, as wgmma always has
    # (sharing it there changes ptxas's address arithmetic).
    at = "at" if each else output.offset()
    step = output.next_col
    c = ((f"{c_staged}[0]", f"{c_staged}[1]") if c_staged is not None
         else (_c_element(spec, output, at), _c_element(spec, output, f"{at} + {step}")))
    first, second = pair_epilogue(spec, output, ("v0", "v1"), c, bias)
    if each:
        return [f"if (col < N) D[at] = to_out({first});", f"if (col + 1 < N) D[at + {step}] = to_out({second});"]
    return ["if (col + 1 < N) {  // both columns inside: both values before either store",
            f"    const float d0 = {first}, d1 = {second};",
            f"    D[{at}] = to_out(d0); D[{at} + {step}] = to_out(d1);",
            "} else if (col < N) {  // the last column of D",
            f"    D[{at}] = to_out({first});", "}"]


def _stages_c(spec: GemmSpec, fragment: PairFragment, output: PairOutput) -> bool:
    """Whether a row's C is read before its stores (staged_c): where C is read, pairs are stored whole (N
    even) or D is transposed (C read element by element), and loops run inside the row's (the columns of
    one row)."""
    pairs = not _single_stores(spec, output) or (output.transposed and output.c_read is CRead.VIEW)
    return spec.epilogue.reads_c and pairs and fragment.row_depth < len(fragment.loops)


def _c_row_pair(fragment: PairFragment) -> str:
    """The pair of C a thread's (row, col) reads in staged_c's array: indexed by the loops inside the row's."""
    return "c_row" + "".join(f"[{i}]" for i, _ in fragment.loops[fragment.row_depth:])


def staged_c(spec: GemmSpec, fragment: PairFragment, output: PairOutput) -> list[str]:
    """One row's C read into registers before any of the row's stores, under the row's loop. D's stores
    and C's reads may alias as far as the compiler can tell (C is not __restrict__), so a read after a
    store waits for it: read pair by pair between the stores, every pair of C was one L2/DRAM round trip
    after another (SASS of the 48x8192x8192 add kernel, 64x128 tiles: 32 LDG-STG pairs in sequence;
    its add cost 7 µs over the plain GEMM's 39 on an H200). Here all the row's reads are in flight at
    once; columns past N read nothing."""
    inner = fragment.loops[fragment.row_depth:]
    shape = "".join(f"[{count}]" for _, count in inner)
    at = _c_row_pair(fragment)
    lines = ["// This row's C, every pair read before the row's first store (D's stores may alias C as far",
             "// as the compiler knows, so a read after a store would wait for it).", f"float c_row{shape}[2];"]
    for depth, (index, count) in enumerate(inner):
        lines += ["    " * depth + "#pragma unroll", "    " * depth + f"for (int {index} = 0; {index} < {count}; ++{index}) {{"]
    pad = "    " * len(inner)
    read = (f"read_pair(C + at, {at}[0], {at}[1]);" if output.c_read is CRead.POINTER
            else f"{at}[0] = C[at]; if (col + 1 < N) {at}[1] = C[at + M];" if output.transposed
            else f"{at}[0] = C[at]; {at}[1] = C[at + 1];")
    lines += [f"{pad}const int col = {fragment.col};", f"{pad}{at}[0] = {at}[1] = 0.0f;",
              f"{pad}if (col < N) {{", f"{pad}    const {output.index} at = {output.offset()};",
              f"{pad}    {read}", f"{pad}}}"]
    lines += ["    " * depth + "}" for depth in reversed(range(len(inner)))]
    return lines


def _pair_body(spec: GemmSpec, output: PairOutput, row_check: bool, bias: tuple[str | None, str | None],
               c_staged: str | None = None) -> list[str]:
    """The stores of one pair (row, col) from v0, v1; `row_check`: the row is tested here too (it
    became known in the innermost loop), else it is already known to be inside D. `bias`: the pair's
    staged bias elements (None: read in place)."""
    at = f"const {output.index} at = {output.offset()};  // D's (and C's) element (row, col)"
    if _single_stores(spec, output):
        stores = ([at] if output.odd_edge is OddEdge.EACH else []) + _odd_stores(spec, output, bias, c_staged)
        return ["if (row < M) {", *("    " + line for line in stores), "}"] if row_check else stores
    c0 = c1 = None
    body = []
    if c_staged is not None:  # read before the row's stores (staged_c)
        c0, c1 = f"{c_staged}[0]", f"{c_staged}[1]"
    elif _reads_c_pairs(spec, output):
        body = ["    float c0 = 0.0f, c1 = 0.0f;", "    read_pair(C + at, c0, c1);"]
        c0, c1 = "c0", "c1"
    elif spec.epilogue.reads_c:
        c0, c1 = _c_element(spec, output, "at"), _c_element(spec, output, "at + 1")
    store = "    write_pair(D + at, {}, {});".format(*pair_epilogue(spec, output, ("v0", "v1"), (c0, c1), bias))
    guard = "row < M && col < N" if row_check else "col < N"
    return [f"if ({guard}) {{  // N is even, so col + 1 < N too: the pair is one aligned store", f"    {at}", *body, store, "}"]


def pair_stores(spec: GemmSpec, fragment: PairFragment, output: PairOutput, indent: str = "    ") -> str:
    """The loops over a thread's pairs and their guarded stores to D: a row known before the
    innermost loop skips the rest of its loop when past M, one known only there is tested with the
    column; each pair is stored whole (N even) or element by element (N odd)."""
    how = ("single outputs: D is transposed, a pair's outputs M apart" if output.transposed
           else "pairs of outputs, one 32/64-bit store each" if spec.n % 2 == 0
           else "single outputs: N is odd, so pairs are not aligned")
    lines = [f"// Write-back from registers ({how})."] + ([f"// {fragment.note}"] if fragment.note else [])
    staged = staged_bias(spec, fragment, output)
    lines += staged.lines
    innermost = fragment.row_depth == len(fragment.loops)
    for depth, (index, count) in enumerate(fragment.loops):
        pad, inner = "    " * depth, "    " * (depth + 1)
        lines += [f"{pad}#pragma unroll", f"{pad}for (int {index} = 0; {index} < {count}; ++{index}) {{"]
        if depth + 1 == fragment.row_depth:
            lines.append(f"{inner}const int row = {fragment.row};")
            lines += [] if innermost else [f"{inner}if (row >= M) continue;  // rows past M: nothing to store"]
            lines += [inner + line for line in (staged_c(spec, fragment, output) if _stages_c(spec, fragment, output) else [])]
    pad = "    " * len(fragment.loops)
    lines += [f"{pad}const int col = {fragment.col};",
              f"{pad}const float v0 = {fragment.values[0]}, v1 = {fragment.values[1]};"]
    c_staged = _c_row_pair(fragment) if _stages_c(spec, fragment, output) else None
    lines += [pad + line for line in _pair_body(spec, output, innermost, staged.elements, c_staged)]
    lines += ["    " * depth + "}" for depth in reversed(range(len(fragment.loops)))]
    return "".join(f"{indent}{line}\n" for line in lines)
