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


def _copy_rows(name: str, piece_offset: str, pad: str) -> str:
    """The CUDA loop copying a warpgroup's staged rows to D in 16-byte pieces, the buffer's layout given by the
    byte offset of piece p of row r (`piece_offset`); `pad` aligns the parameters' second line."""
    return f"""template <int ROWS, int COLS>
__device__ __forceinline__ void {name}(const unsigned char* buf, out_t* __restrict__ D, int row0, int col0,
{pad}int row_end, int thread) {{
    constexpr int PIECES = COLS / 8;  // 16-byte pieces of a row
    #pragma unroll 4
    for (int i = thread; i < ROWS * PIECES; i += 128) {{
        const int r = i / PIECES, p = i % PIECES;
        const int row = row0 + r, col = col0 + p * 8;
        if (row < row_end && col < N) {{
            const uint4 piece = *reinterpret_cast<const uint4*>(buf + {piece_offset});
            *reinterpret_cast<uint4*>(D + (size_t)row * N + col) = piece;
        }}
    }}
}}
"""


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
""" + _copy_rows("copy_staged_rows", "r * COLS * 2 + ((p ^ (r & 7)) << 4)", " " * 49)


# Staged rows in TMA boxes: the same buffer cut into boxes of 64 columns (128 bytes a row), box after box,
# each ROWS rows of 128 bytes with 16-byte piece j of row r at piece j ^ (r % 8): the layout a TMA store
# with 128-byte swizzle reads (each box starting on 1024 bytes), and as free of bank conflicts for the
# fragment's writes as staged_offset. Rows inside D's group go out as TMA stores, one a box (asynchronous:
# the thread issuing them waits for the reads before the buffer is written again); a tile that ends past its
# group's last row is copied as staged rows are (copy_boxed_rows), rows past the end left alone.
BOXED_ROWS = r"""
// Byte offset of output (r, c) in a staging buffer of TMA boxes of 64 columns by ROWS rows (128-byte swizzle).
template <int ROWS>
__device__ __forceinline__ int boxed_offset(int r, int c) {
    return (c >> 6) * ROWS * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2;
}

// Boxed staged rows to D through ordinary 16-byte stores (a tile whose rows run past row_end): as
// copy_staged_rows, rows at or past row_end and pieces past N not written.
""" + _copy_rows("copy_boxed_rows", "boxed_offset<ROWS>(r, p * 8)", " " * 48)


def staged_pair_writes(spec: GemmSpec, fragment: PairFragment, output: PairOutput, buffer: str, row0: str,
                       col0: str, cols: str, indent: str = "    ", offset: str = "") -> str:
    """The loops over a thread's pairs: each through the epilogue, rounded to D's type and written to
    `buffer` (cols outputs a row) at its place relative to (`row0`, `col0`). Columns past N are not
    written (their bias elements are not read); rows are not checked (rows past the end are not copied).
    `offset`: the buffer's offset function (default staged_offset<cols>; boxed_offset<ROWS> for TMA boxes)."""
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
              f"{pad}    *reinterpret_cast<u32*>({buffer} + {offset or f'staged_offset<{cols}>'}(row - {row0}, col - {col0})) = "
              f"pack_pair({first}, {second}, (out_t*)0);",
              f"{pad}}}"]
    lines += ["    " * depth + "}" for depth in reversed(range(len(fragment.loops)))]
    return "".join(f"{indent}{line}\n" for line in lines)
