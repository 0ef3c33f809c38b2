"""The staged-rows part: a warpgroup's rows of a tile written to D through shared memory, so that the
global stores are whole 16-byte pieces of rows instead of a fragment's 4-byte pairs.

A tensor-core fragment leaves each thread pairs of neighbouring columns spread over 8 rows: stored
from registers, a warp's store instruction writes 8 rows x 16 bytes, half of each 32-byte sector it
touches, and a 64x256 tile takes 64 such instructions a thread. Where the epilogue is most of a tile's
time (short K: one or a few k-blocks) that is the kernel's speed. Here the pairs, through the
epilogue and rounded to D's 16-bit type, go to a row-major buffer in shared memory (its 16-byte
pieces XOR-swizzled by row, so the 8 rows a warp writes at once fall on different banks), the
warpgroup meets at a named barrier, and then each thread copies 16-byte pieces of whole rows to D:
consecutive threads, consecutive pieces of a row. Rows at or past `row_end` are not copied.

Needs: 16-bit outputs, N a multiple of 8 (every piece inside D and 16-byte aligned), D 16-byte
aligned, and the family's pair fragment (writeback.PairFragment) with the tile's row and column
origin. The buffer is ROWS x COLS x 2 bytes of the block's shared memory, one per warpgroup using it.

    code = STAGED_ROWS + staged_pair_writes(spec, fragment, output, "buf", "row0", "col0")
"""
from __future__ import annotations

from ...spec import GemmSpec
from .writeback import PairFragment, PairOutput, pair_epilogue, staged_bias

PIECE_BYTES = 16  # one vector store: 8 16-bit outputs


def staged_rows_fit(spec: GemmSpec) -> str | None:
    """None where staged rows can write D for `spec`, else why not."""
    if spec.out_dtype not in ("bf16", "fp16"):
        return f"staged rows write 16-bit outputs, not {spec.out_dtype}"
    if spec.n % 8:
        return f"staged rows need N % 8 == 0 (16-byte pieces of rows), N = {spec.n}"
    if spec.epilogue.reads_c:
        return "staged rows do not read C"
    return None


STAGED_ROWS = r"""
// Staged rows: byte offset of output (r, c) in a warpgroup's staging buffer of COLS 16-bit columns a
// row. The 16-byte piece c / 8 of row r sits at piece (c / 8) ^ (r % 8): a fragment's 8 rows written
// at once land on 8 different pieces, so on different banks.
template <int COLS>
__device__ __forceinline__ int staged_offset(int r, int c) {
    return r * COLS * 2 + (((c >> 3) ^ (r & 7)) << 4) + (c & 7) * 2;
}

// Staged rows to D: ROWS x COLS outputs from (row0, col0), 16 bytes a thread at a time, consecutive
// threads along a row; rows at or past row_end (the group's end) and pieces past N are not written.
template <int ROWS, int COLS>
__device__ __forceinline__ void copy_staged_rows(const unsigned char* buf, out_t* __restrict__ D, int row0, int col0,
                                                 int row_end, int thread) {
    constexpr int PIECES = COLS / 8;  // 16-byte pieces of a row
    #pragma unroll 4
    for (int i = thread; i < ROWS * PIECES; i += 128) {
        const int r = i / PIECES, p = i % PIECES;
        const int row = row0 + r, col = col0 + p * 8;
        if (row < row_end && col < N) {
            const uint4 piece = *reinterpret_cast<const uint4*>(buf + r * COLS * 2 + ((p ^ (r & 7)) << 4));
            *reinterpret_cast<uint4*>(D + (size_t)row * N + col) = piece;
        }
    }
}
"""


def staged_pair_writes(spec: GemmSpec, fragment: PairFragment, output: PairOutput, buffer: str, row0: str,
                       col0: str, cols: str, indent: str = "    ") -> str:
    """The loops over a thread's pairs: each through the epilogue, rounded to D's type and written to
    `buffer` (cols outputs a row) at its place relative to (`row0`, `col0`). Columns past N are not
    written (their bias elements are not read); rows are not checked (rows past the end are not copied)."""
    problem = staged_rows_fit(spec)
    if problem:
        raise ValueError(problem)
    lines = ["// Write-back, first half: the epilogue's values into the staging buffer (16-bit pairs)."]
    lines += ([f"// {fragment.note}"] if fragment.note else [])
    staged = staged_bias(spec, fragment, output)
    lines += staged.lines
    for depth, (index, count) in enumerate(fragment.loops):
        pad = "    " * depth
        lines += [f"{pad}#pragma unroll", f"{pad}for (int {index} = 0; {index} < {count}; ++{index}) {{"]
        if depth + 1 == fragment.row_depth:
            lines.append(f"{pad}    const int row = {fragment.row};")
    pad = "    " * len(fragment.loops)
    first, second = pair_epilogue(spec, output, ("v0", "v1"), bias=staged.elements)
    lines += [f"{pad}const int col = {fragment.col};",
              f"{pad}if (col < N) {{  // N % 8 == 0: the pair's second column is inside too",
              f"{pad}    const float v0 = {fragment.values[0]}, v1 = {fragment.values[1]};",
              f"{pad}    *reinterpret_cast<u32*>({buffer} + staged_offset<{cols}>(row - {row0}, col - {col0})) = "
              f"pack_pair({first}, {second}, (out_t*)0);",
              f"{pad}}}"]
    lines += ["    " * depth + "}" for depth in reversed(range(len(fragment.loops)))]
    return "".join(f"{indent}{line}\n" for line in lines)
