"""The wgmma kernel's write-back, as CUDA text: the fused epilogue in fp32 registers, then D stored
straight from the accumulator fragment (`store_tile`: the write-back part of kernels/parts, which
the mma family shares, over the wgmma fragment), or through a swizzled shared-memory buffer and TMA
stores (whole tile or column slices), with C staged in shared memory by the producer.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...epilogue import Epilogue
from ...spec import GemmSpec
from ..parts import epilogue as epilogue_part
from ..parts.epilogue import CArg, Operands, VectorArg
from ..parts.floats import FLOAT_VIEW, TO_OUT  # FLOAT_VIEW: render.py takes it from here
from ..parts.writeback import CRead, OddEdge, PairFragment, PairOutput, pair_io, pair_stores
from .config import OUT_BYTES, WgmmaConfig, out_dtype
from .groups import CPath

# apply_epilogue takes C's element (read by the caller from global or shared memory) and the bias
# element, read by the caller once per column (row) for every row (column) the thread holds of it
# (store_tile: parts/writeback.py's staged_bias over FRAGMENT's loops; store_tile_smem: BIAS_COLS,
# BIAS_ROWS), or in place where it is not staged; the kernel and store_tile take C and bias as FloatViews.
EPILOGUE_OPERANDS = Operands(CArg.VALUE, VectorArg.VALUE)


def epilogue_function(epilogue: Epilogue) -> str:
    """apply_epilogue's definition (the epilogue part) without the GELU helper, which render.py emits."""
    return epilogue_part.epilogue_function(epilogue, EPILOGUE_OPERANDS, preamble=False)


def operand_decls(epilogue: Epilogue, c_value: bool = False, skip_c: bool = False) -> list[str]:
    """Parameter declarations for the epilogue operands in kernel order; with c_value, C arrives as
    its element `c`; with skip_c, C is left out (the shared-memory epilogue reads it from its tile)."""
    c = CArg.ABSENT if skip_c else CArg.VALUE if c_value else CArg.VIEW
    return Operands(c, VectorArg.VIEW).declarations(epilogue)


def epilogue_call(spec: GemmSpec, value: str, col: str, c: str, bias: str | None = None) -> str:
    """`value = apply_epilogue(value, row, col, ...)`, C passed as the expression `c`, the bias element
    as `bias` (default: a guarded read in place)."""
    if spec.epilogue.is_identity:
        return ""
    call = epilogue_part.epilogue_call(spec.epilogue, EPILOGUE_OPERANDS, value, 'row', col, c, bias)
    return f"{value} = {call}; "


# The shared-memory write-back reads the bias once: a thread holds M_BLOCKS·2 rows of each of its
# columns and BN / 4 columns of each of its rows, so each bias element is read once, into registers
# (bias_at), instead of once per accumulator. No load is predicated: a guarded load per element kept
# as many loads in flight as ptxas had predicate registers (7), one L2 round trip per 7 loads. An
# element past D's edge reads the last one instead (in range; its outputs are clipped by the TMA
# store), so every load of a slice is in flight at once.
# bias_col: per slice, the SLICE_COLS / 4 columns this thread holds in it; where the slice lies
# inside D and the vector is aligned (as every allocation is), a pair of columns in one load.
BIAS_PAIRS = "tile_n * BN + (slice + 1) * SLICE_COLS <= N && pairs_aligned"
BIAS_COLS = """// This thread's bias for its columns of the slice, read once for all its rows (M_BLOCKS·2 of
        // each), kept as packed pairs (half the registers of floats): bias_words[jb] holds columns
        // first_col + 8·jb and the next, lo first.
        u32 bias_words[SLICE_COLS / 8];
        const int first_col = tile_n * BN + slice * SLICE_COLS + 2 * (lane % 4);
        const bool pairs_aligned = reinterpret_cast<size_t>(bias.p) % sizeof(u32) == 0;
        if (""" + BIAS_PAIRS + """) {  // inside D: a pair per load
            #pragma unroll
            for (int jb = 0; jb < SLICE_COLS / 8; ++jb)
                bias_words[jb] = *reinterpret_cast<const u32*>(bias.p + first_col + jb * 8);
        } else {  // the slice crosses N (columns past it read bias[N - 1]), or the vector is unaligned
            #pragma unroll
            for (int jb = 0; jb < SLICE_COLS / 8; ++jb)
                bias_words[jb] = (u32)bias.p[min(first_col + jb * 8, N - 1)].bits
                                 | ((u32)bias.p[min(first_col + jb * 8 + 1, N - 1)].bits << 16);
        }
        """
# bias_row: once per call, the M_BLOCKS·2 rows this thread holds (every slice has the same rows).
BIAS_ROWS = """
    // This thread's bias for its rows, read once for all its columns: bias_at[mb][half] is row
    // mb·64 + 16·warp + lane / 4 + 8·half of this consumer's rows (rows past M read bias[M - 1]).
    float bias_at[M_BLOCKS][2];
    #pragma unroll
    for (int mb = 0; mb < M_BLOCKS; ++mb)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = tile_m * BM + consumer * CONSUMER_ROWS + mb * 64 + warp * 16 + lane / 4 + 8 * half;
            bias_at[mb][half] = bias[min(row, M - 1)];
        }"""


# The widest slice whose bias columns are staged (SLICE_COLS / 4 floats a thread: 48). A whole
# 256-column tile in one slice (64 floats beside the 128 sums) spilled, as did the pair loop, which
# holds a row of C words beside them (NVRTC 13.0, sm_90a); those read the bias in place. A 192-column
# slice (48 floats beside 96 sums) compiles to 168 registers without spills on every chooser candidate
# of 24 bias_col kernels (2026-11-29); it was 128 before, which left 128x192 tiles reading the bias per
# element (6304x2304x768 bias_col: 45.1 µs against 36.4 plain, H200, 2026-11-29).
STAGED_BIAS_COLS = 192


def staged_bias_kind(spec: GemmSpec, config: WgmmaConfig) -> str | None:
    """Which bias the shared-memory write-back reads once into registers: 'row' (M_BLOCKS·2 values a
    thread), 'col' where the slice is packed into words for stmatrix and at most STAGED_BIAS_COLS
    wide, else None (read in place, per element)."""
    kind = epilogue_part.bias_kind(spec.epilogue)
    words = config.stmatrix or config.c_path(spec).d_over_c  # the slice goes through _matrix_words
    if kind == "col" and not (words and config.bn // config.store_slices <= STAGED_BIAS_COLS):
        return None
    return kind


# The write-back reads a tile's bias a few loads a thread, once per slice (or per element), after the
# main loop: an L2 round trip each time, with the tensor cores idle, tile after tile (6000x3072x768
# bias_col in 128x192 tiles: 46.8 µs against 43.9 without the bias, H200, 2026-11-29). A thread of
# each consumer asks L1 for one 128-byte line of the tile's bias as the tile starts, so those loads
# hit L1 (TMA fills shared memory, not L1, so the lines stay through the main loop). Measured against the
# same kernels without it: 0-2.5% faster on 14 bias specs, never slower (H200, 2026-11-29,
# bench/results/2026-11-29-h200-epilogue-parts.md); most of the bias's cost is not this latency.
BIAS_PREFETCH = """
// The tile's bias lines (`count` values from `first`, clamped to `limit`) into L1 under the main loop:
// thread t of a consumer asks for line t, one line more than the values span (they may start mid-line).
__device__ __forceinline__ void prefetch_bias_l1(FloatView<out_t> bias, int first, int count, int limit) {
    constexpr int PER_LINE = 128 / (int)sizeof(out_t);
    const int line = threadIdx.x % 128;
    if (line * PER_LINE < count + PER_LINE)
        asm volatile("prefetch.global.L1 [%0];" :: "l"(bias.p + min(first + line * PER_LINE, limit - 1)));
}
"""


def bias_prefetch_call(spec: GemmSpec) -> str:
    """The bias prefetch's call for a kernel of `spec` (its kernel_spec under swap_ab), made by a consumer at
    the start of a piece that writes D: L1 is asked for its rows' or the tile's columns' bias. "" without a
    bias vector, and for gated specs (their write-back lives in gated.py's namespace); where it is not "",
    the kernel carries BIAS_PREFETCH."""
    kind = epilogue_part.bias_kind(spec.epilogue)
    if kind is None or spec.gated:
        return ""
    span = ("tile_n * BN, BN, N" if kind == "col"
            else "tile_m * BM + consumer * CONSUMER_ROWS, ROWS_PER_CONSUMER, M")
    return f"\n            if (writes_d) prefetch_bias_l1(bias, {span});  // read by the write-back"


def staged_bias_elements(staged: str | None, jb: str) -> tuple[str | None, str | None]:
    """The registers holding the bias of a pair's two elements (8-column group `jb` of the slice, rows
    mb and half in scope) where the bias is `staged` ('row', 'col'), else (None, None): read in place."""
    if staged == "col":
        return f"pair_lo(bias_words[{jb}])", f"pair_hi(bias_words[{jb}])"
    if staged == "row":
        return "bias_at[mb][half]", "bias_at[mb][half]"
    return None, None


# The wgmma accumulator fragment: in each 64-row block, thread t of the warpgroup holds rows
# 16·warp + lane/4 (+8) and columns 8·j + 2·(lane%4) (+1), in acc[mb][4j + 2·half] and the next.
FRAGMENT = PairFragment(
    loops=(("mb", "M_BLOCKS"), ("half", "2"), ("j", "BN / 8")),
    row="tile_m * BM + consumer * CONSUMER_ROWS + mb * 64 + warp * 16 + lane / 4 + 8 * half",
    col="tile_n * BN + j * 8 + 2 * (lane % 4)", values=("acc[mb][4 * j + 2 * half]", "acc[mb][4 * j + 2 * half + 1]"),
    row_depth=2, note="In each 64-row block, thread t of the warpgroup holds rows 16·warp + lane/4 (+8), columns 8·j + 2·(lane%4) (+1).",
    col_loop="j", row_loops=("mb", "half"))
# C and bias arrive as FloatViews: C is read element by element, and (N odd) a pair's two values are
# computed before either store (a store to D could alias a FloatView's reads).
OUTPUT = PairOutput(EPILOGUE_OPERANDS, CRead.VIEW, odd_edge=OddEdge.PAIR_OR_FIRST)
# swap_ab: the kernel computes Dᵀ, so it writes (and reads C) transposed.
OUTPUT_TRANSPOSED = replace(OUTPUT, transposed=True)


def output_of(config: WgmmaConfig) -> PairOutput:
    """How the write-back from registers indexes D and C for `config`."""
    return OUTPUT_TRANSPOSED if config.swap_ab else OUTPUT


def store_tile(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The write-back from registers (the write-back part over the wgmma fragment), as a device
    function the consumers call with their tile."""
    params = "".join(f", {p}" for p in operand_decls(spec.epilogue))
    output = output_of(config)
    return TO_OUT + pair_io(spec, output) + f"""
__device__ __forceinline__ void store_tile(const float (&acc)[M_BLOCKS][BN / 2], int tile_m, int tile_n,
                                           int consumer, out_t* __restrict__ D{params}) {{
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
{pair_stores(spec, FRAGMENT, output)}}}
"""


SMEM_PAIR = {
    "16": """
// A pair of outputs in the epilogue tile: one 32-bit word, lo first (C's pair comes the same way).
typedef u32 pair_word;
__device__ __forceinline__ void store_pair_smem(unsigned char* at, float v0, float v1) {
    *reinterpret_cast<u32*>(at) = pack_pair(v0, v1, (out_t*)0);
}
__device__ __forceinline__ pair_word load_pair_smem(const unsigned char* at) {
    return *reinterpret_cast<const u32*>(at);
}
// The two 16-bit values of a pair as floats, lo first.
__device__ __forceinline__ float pair_lo(pair_word word) { return to_float(out_t{(unsigned short)(word & 0xFFFF)}); }
__device__ __forceinline__ float pair_hi(pair_word word) { return to_float(out_t{(unsigned short)(word >> 16)}); }
__device__ __forceinline__ void unpack_pair(pair_word word, float& c0, float& c1) {
    c0 = pair_lo(word);
    c1 = pair_hi(word);
}
""",
    "32": """
// A pair of outputs in the epilogue tile: one float2.
typedef float2 pair_word;
__device__ __forceinline__ void store_pair_smem(unsigned char* at, float v0, float v1) {
    *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
}
__device__ __forceinline__ pair_word load_pair_smem(const unsigned char* at) {
    return *reinterpret_cast<const float2*>(at);
}
__device__ __forceinline__ void unpack_pair(pair_word pair, float& c0, float& c1) {
    c0 = pair.x;
    c1 = pair.y;
}
""",
}


MATRIX_IO = r"""
// stmatrix / ldmatrix: a warp moves four 8x8 blocks of 16-bit values; lanes 8q..8q+7 give the
// addresses of block q's eight 16-byte rows, and each thread holds one 32-bit word (a pair of
// neighbours in row lane/4, columns 2·(lane%4)) of every block: the wgmma fragment's own layout.
__device__ __forceinline__ void stmatrix_x4(void* at, const u32 (&words)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem_addr(at)), "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3]) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(const void* at, u32 (&words)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3]) : "r"(smem_addr(at)) : "memory");
}
"""


def _pair_loop(spec: GemmSpec, staged: str | None) -> str:
    """One slice's fragment, a pair of neighbours per shared-memory access; the bias from registers
    where it is `staged` ('row', 'col')."""
    reads_c = spec.epilogue.reads_c
    bias0, bias1 = staged_bias_elements(staged, "jj")
    fix0 = epilogue_call(spec, "v0", "col", "c0", bias0)
    fix1 = epilogue_call(spec, "v1", "col + 1", "c1", bias1)
    # C is read from the slots that D then overwrites. One thread's loads and stores could alias as
    # far as the compiler knows (the swizzle hides it), so a load after a store waits for it: all of
    # a fragment row's C words are loaded first, one batch of shared-memory latency instead of one
    # per pair.
    load_c = ("""pair_word c_words[SLICE_COLS / 8];
                #pragma unroll
                for (int jj = 0; jj < SLICE_COLS / 8; ++jj) c_words[jj] = load_pair_smem(c_tile + pair_offset(r, jj, lane));
                """ if reads_c else "")
    unpack_c = "float c0, c1;\n                    unpack_pair(c_words[jj], c0, c1);\n                    " if reads_c else ""
    return f"""#pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            #pragma unroll
            for (int half = 0; half < 2; ++half) {{
                const int r = mb * 64 + warp * 16 + lane / 4 + 8 * half;
                const int row = tile_m * BM + consumer * CONSUMER_ROWS + r;
                {load_c}#pragma unroll
                for (int jj = 0; jj < SLICE_COLS / 8; ++jj) {{
                    const int j = slice * SLICE_COLS / 8 + jj;  // 8-column group of the fragment
                    const int col = tile_n * BN + slice * SLICE_COLS + jj * 8 + 2 * (lane % 4);
                    float v0 = acc[mb][4 * j + 2 * half], v1 = acc[mb][4 * j + 2 * half + 1];
                    {unpack_c}{fix0}{fix1}store_pair_smem(tile + pair_offset(r, jj, lane), v0, v1);
                }}
            }}
        }}"""


def _matrix_words(spec: GemmSpec, staged: str | None) -> str:
    """One slice's D as packed words, in the order stmatrix takes them: blocks q = 0..3 of an
    instruction are (rows +8·(q%2), columns +8·(q/2)) of a 16-row × 16-column piece of the fragment.
    C comes per ldmatrix (the same blocks) from `c_tile`. Only registers are written: the buffer may
    still be in use. The bias comes from registers where it is `staged` ('row', 'col')."""
    reads_c = spec.epilogue.reads_c
    bias0, bias1 = staged_bias_elements(staged, "jb")
    fix0 = epilogue_call(spec, "v0", "col", "c0", bias0)
    fix1 = epilogue_call(spec, "v1", "col + 1", "c1", bias1)
    # All of a 64-row block's C words first (one batch of shared-memory latency).
    load_c = ("""u32 c_words[SLICE_COLS / 16][4];
            #pragma unroll
            for (int jj = 0; jj < SLICE_COLS / 8; jj += 2) ldmatrix_x4(c_tile + block_row_offset(r_at, jj + q / 2), c_words[jj / 2]);
            """ if reads_c else "")
    unpack_c = "float c0, c1;\n                    unpack_pair(c_words[jj / 2][b], c0, c1);\n                    " if reads_c else ""
    return f"""u32 words[M_BLOCKS][SLICE_COLS / 16][4];  // the slice's D: this thread's word of each 8x8 block
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            const int r_at = mb * 64 + warp * 16 + 8 * (q % 2) + lane % 8;  // the row this lane addresses
            {load_c}#pragma unroll
            for (int jj = 0; jj < SLICE_COLS / 8; jj += 2) {{
                #pragma unroll
                for (int b = 0; b < 4; ++b) {{  // this thread's word of block b
                    const int half = b % 2, jb = jj + b / 2;
                    const int j = slice * SLICE_COLS / 8 + jb;  // 8-column group of the fragment
                    const int row = tile_m * BM + consumer * CONSUMER_ROWS + mb * 64 + warp * 16 + lane / 4 + 8 * half;
                    const int col = tile_n * BN + slice * SLICE_COLS + jb * 8 + 2 * (lane % 4);
                    float v0 = acc[mb][4 * j + 2 * half], v1 = acc[mb][4 * j + 2 * half + 1];
                    {unpack_c}{fix0}{fix1}words[mb][jj / 2][b] = pack_pair(v0, v1, (out_t*)0);
                }}
            }}
        }}"""


def matrix_store(buffer: str = "tile", ragged: bool = False) -> str:
    """The packed words of a slice into `buffer` (a consumer's part of a slice), four 8x8 blocks per
    stmatrix. `ragged` (WgmmaConfig.ragged_slice): each 16-column piece goes to its box among the whole ones
    before the last, and, from LAST_BOX_COL on, to the last box as well (the columns both boxes hold get
    both); jj is unrolled, so each test folds at compile time."""
    store = f"stmatrix_x4({buffer} + block_row_offset(r_at, jj + q / 2), words[mb][jj / 2]);"
    if ragged:
        store = f"""{{
                if (jj * 8 < (STORE_CHUNKS - 1) * OUT_CHUNK) {store}
                if (jj * 8 >= LAST_BOX_COL) stmatrix_x4({buffer} + last_box_offset(r_at, jj + q / 2), words[mb][jj / 2]);
            }}"""
    return f"""#pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            const int r_at = mb * 64 + warp * 16 + 8 * (q % 2) + lane % 8;  // the row this lane addresses
            #pragma unroll
            for (int jj = 0; jj < SLICE_COLS / 8; jj += 2) {store}
        }}"""


MATRIX_STORE = matrix_store()


# Before writing, the buffer must be free: with C, the producer's C tile must have landed in it (the
# producer waited for the previous store to leave); without C, the previous slice's store (of this
# tile or the one before) must have finished reading it.
FREE_BUFFER = """if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the previous slice's store has read the buffer
        named_barrier(1 + consumer, 128);"""
# This consumer's part of ring slot s's C region, and the wait for its slice of C to land there.
SLOT_PART = "c_slots + ring.s * C_SLOT_BYTES + consumer * ROWS_PER_CONSUMER * SLICE_COLS * (int)sizeof(out_t)"
SLOT_WAIT = "mbarrier_wait(&full[ring.s], ring.phase);  // this slice of C has landed in its ring slot"
# With C in the ring, its slot goes back to the producer once every thread of this consumer has read
# it (a barrier after its reads).
SLOT_BACK = """
        release_ring_slot(&empty[ring.s]);
        ring.advance();"""
LANE_BLOCK = "const int q = lane / 8;  // the block whose row this lane addresses"


def _c_wait(c: CPath) -> str:
    """Where this slice's C is (`c_tile`), once it has landed."""
    if c.first_in_buffer:
        return f"""unsigned char* c_tile;
        if (slice == 0) {{  // the first slice of C has a buffer of its own
            mbarrier_wait(c_full, c_phase);
            c_tile = tile;
        }} else {{
            {SLOT_WAIT}
            c_tile = {SLOT_PART};
        }}"""
    if c.through_ring:  # (written over with d_over_c, only read otherwise)
        return f"""{SLOT_WAIT}
        {"" if c.d_over_c else "const "}unsigned char* c_tile = {SLOT_PART};"""
    if c is CPath.TILE:
        return """if (slice == 0) mbarrier_wait(c_full, c_phase);  // the producer's C tile has landed here
        const unsigned char* c_tile = tile;  // read in place"""
    return ""


def _lines(*parts: str) -> str:
    return "\n        ".join(part for part in parts if part)


@dataclass(frozen=True)
class SliceSteps:
    """One slice of the write-back, as text: wait for its C and buffer, write it, free C's slot (after
    the barrier), the buffer the TMA store reads, and what follows the store."""

    wait: str
    write_slice: str
    free_slot: str = ""
    store_from: str = "tile"
    after_store: str = ""


def _d_over_c_steps(spec: GemmSpec, c: CPath, staged: str | None) -> SliceSteps:
    """Each warp rewrites, in place, the rows of C it has just read (ldmatrix and stmatrix take the same
    addresses), so no barrier comes between the reads and the writes, and no buffer has to be waited
    for. A slot goes back once its store has read it: the previous slice's once this one's is issued
    (one bulk group may stay in flight), the last one in the next piece. Slice 0 takes no ring slot
    with c_first_buffer (its buffer goes back with the last slot)."""
    first_ring = 1 if c.first_in_buffer else 0  # the first slice that comes through the ring
    advance = """c_pending = ring.s;  // the last one goes back under the next piece's first wgmma
        ring.advance();"""
    if c.first_in_buffer:
        advance = """if (slice > 0) {
            c_pending = ring.s;  // the last one (and the first slice's buffer) goes back under the next piece's first wgmma
            ring.advance();
        }"""
    after_store = f"""
        if (slice > {first_ring}) {{  // the previous slice's store has read its slot: the producer may refill it
            if (threadIdx.x % 128 == 0) tma_store_wait_read_but_one();
            __syncwarp();
            release_ring_slot(&empty[c_pending]);
        }}
        {advance}"""
    return SliceSteps(_lines(LANE_BLOCK, _c_wait(c)), _lines(_matrix_words(spec, staged), matrix_store("c_tile")),
                      store_from="c_tile", after_store=after_store)


def _stmatrix_steps(spec: GemmSpec, c: CPath, staged: str | None, store: str = MATRIX_STORE) -> SliceSteps:
    """The slice is computed into registers first (C's loads, the epilogue, the packing), and only then
    does the consumer wait for the buffer: the wait for the previous slice's store to have read it
    runs under that work instead of before it. That wait's barrier also shows every thread has read
    its C words, so a ring slot goes back right after it."""
    buffer_wait = "" if c is CPath.TILE else FREE_BUFFER + (SLOT_BACK if c.through_ring else "")
    return SliceSteps(_lines(LANE_BLOCK, _c_wait(c)), _lines(_matrix_words(spec, staged), buffer_wait, store))


def _pair_steps(spec: GemmSpec, c: CPath, staged: str | None) -> SliceSteps:
    """Pairs of C are read and pairs of D written one after the other: the buffer is freed first (C's
    own landing frees it where C comes in the buffer)."""
    return SliceSteps(_lines("" if c is CPath.TILE else FREE_BUFFER, _c_wait(c)), _pair_loop(spec, staged),
                      free_slot=SLOT_BACK if c.through_ring else "")


def slice_steps(spec: GemmSpec, config: WgmmaConfig) -> SliceSteps:
    c = config.c_path(spec)
    staged = staged_bias_kind(spec, config)
    if c.d_over_c:
        return _d_over_c_steps(spec, c, staged)
    if config.ragged_slice(spec):  # stmatrix, no C (wgmma.config._ragged_slice_problem)
        return _stmatrix_steps(spec, c, staged, matrix_store(ragged=True))
    return (_stmatrix_steps if config.stmatrix else _pair_steps)(spec, c, staged)


def _c_params(c: CPath) -> list[str]:
    """store_tile_smem's parameters for C: the ring position it walks, or the buffer's barrier; none
    for an epilogue that reads no C."""
    if c is CPath.TILE:
        return ["u64* c_full", "u32 c_phase"]
    if not c.through_ring:
        return []
    return (["unsigned char* c_slots", "u64* full", "u64* empty", "Ring& ring"]
            + (["int& c_pending"] if c.d_over_c else []) + (["u64* c_full", "u32 c_phase"] if c.first_in_buffer else []))


BLOCK_ROW_OFFSET = """
// Byte offset, in a consumer's part of a slice buffer, of the 16-byte row piece at row r, columns
// 8·jj .. 8·jj + 7 (16-bit values: 8 to a 16-byte unit, OUT_CHUNK / 8 units to a 128-byte row).
__device__ __forceinline__ int block_row_offset(int r, int jj) {
    return (jj * 8 / OUT_CHUNK) * ROWS_PER_CONSUMER * 128 + r * 128 + (((jj % (OUT_CHUNK / 8)) ^ (r % 8)) * 16);
}
"""
LAST_BOX = """
// Byte offset, in a consumer's part of a ragged slice's buffer, of the 16-byte row piece at row r, columns
// 8·jj .. 8·jj + 7 in the last box (columns LAST_BOX_COL .. SLICE_COLS - 1, swizzled as every box).
__device__ __forceinline__ int last_box_offset(int r, int jj) {
    return (STORE_CHUNKS - 1) * ROWS_PER_CONSUMER * 128 + r * 128 + ((((jj * 8 - LAST_BOX_COL) / 8) ^ (r % 8)) * 16);
}
"""
WAIT_BUT_ONE = """
// Wait until every committed store but the most recent has finished reading shared memory.
__device__ __forceinline__ void tma_store_wait_read_but_one() { asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); }
"""
PAIR_OFFSET = """
// Byte offset, in a consumer's part of a slice buffer, of the pair of row r at column 8·jj + 2·(lane % 4).
__device__ __forceinline__ int pair_offset(int r, int jj, int lane) {
    const int c = jj * 8 + 2 * (lane % 4), byte = (c % OUT_CHUNK) * (int)sizeof(out_t);
    return (c / OUT_CHUNK) * ROWS_PER_CONSUMER * 128 + r * 128 + (((byte / 16) ^ (r % 8)) * 16) + byte % 16;
}
"""


def _smem_helpers(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The shared-memory accessors the write-back uses: pair words, stmatrix/ldmatrix, offsets."""
    return (SMEM_PAIR["32" if OUT_BYTES[out_dtype(spec)] == 4 else "16"]
            + (WAIT_BUT_ONE if config.c_path(spec).d_over_c else "")
            + (MATRIX_IO + BLOCK_ROW_OFFSET if config.stmatrix else "")
            + (LAST_BOX if config.ragged_slice(spec) else "") + PAIR_OFFSET)


def store_tile_smem(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The write-back through shared memory and TMA stores (slice_steps says how each slice goes)."""
    params = ["const TmaDescriptor& tma_D", *_c_params(config.c_path(spec)), *operand_decls(spec.epilogue, skip_c=True)]
    steps = slice_steps(spec, config)
    # overlap_epilogue writes the slices of each half of the tile at a different time.
    halves = config.overlap_epilogue
    template = "template <int FIRST, int LAST>\n" if halves else ""
    first, last = ("FIRST", "LAST") if halves else ("0", "STORE_SLICES")
    slices_doc = "\n// Slices FIRST .. LAST - 1 only (the two halves of the tile are written back apart)." if halves else ""
    staged = staged_bias_kind(spec, config)
    bias_rows = BIAS_ROWS if staged == "row" else ""
    bias_cols = BIAS_COLS if staged == "col" else ""
    ragged = config.ragged_slice(spec)
    part_bytes = "STORE_CHUNKS * 128" if ragged else "SLICE_COLS * (int)sizeof(out_t)"  # a consumer row's bytes
    chunks = "STORE_CHUNKS" if ragged else "SLICE_COLS / OUT_CHUNK"
    chunk_col = "(chunk < STORE_CHUNKS - 1 ? chunk * OUT_CHUNK : LAST_BOX_COL)" if ragged else "chunk * OUT_CHUNK"
    return _smem_helpers(spec, config) + f"""
// Write-back through shared memory, one slice of SLICE_COLS columns at a time. Each consumer owns
// ROWS_PER_CONSUMER rows of the slice buffer, kept as SLICE_COLS / OUT_CHUNK chunks of 128-byte rows
// in TMA's 128-byte swizzle (16-byte unit u of row r sits at unit u ^ (r % 8)), so the fragment's
// 8 rows × 16 bytes per warp hit 32 distinct banks. C (loaded there by the producer) is read and
// overwritten in place by the same thread. One thread stores each slice with TMA (coalesced,
// clipped at the matrix edges) and does not wait for it: the next slice, or the next tile's main
// loop, runs while the store drains.{slices_doc}
{template}__device__ __forceinline__ void store_tile_smem(const float (&acc)[M_BLOCKS][BN / 2], int tile_m, int tile_n,
                                                int consumer, unsigned char* out_buf, {", ".join(params)}) {{
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    unsigned char* tile = out_buf + consumer * ROWS_PER_CONSUMER * {part_bytes};{bias_rows}
    #pragma unroll
    for (int slice = {first}; slice < {last}; ++slice) {{
        {bias_cols}{steps.wait}
        {steps.write_slice}
        fence_async_shared();               // the TMA engine reads what these threads wrote
        named_barrier(1 + consumer, 128);   // every thread of this consumer has written its part{steps.free_slot}
        if (threadIdx.x % 128 == 0) {{
            #pragma unroll
            for (int chunk = 0; chunk < {chunks}; ++chunk)
                tma_store_2d_hinted(&tma_D, {steps.store_from} + chunk * ROWS_PER_CONSUMER * 128,
                                    tile_n * BN + slice * SLICE_COLS + {chunk_col},
                                    tile_m * BM + consumer * CONSUMER_ROWS, l2_evict_first_policy());  // written once
            tma_store_commit();
        }}{steps.after_store}
    }}
}}
"""


LOAD_C_TILE = r"""
// Producer: the C tile of (tile_m, tile_n) into the epilogue buffer, as C_BOXES boxes of OUT_CHUNK
// columns × C_BOX_ROWS rows, each consumer part's rows into its part of the buffer (ping-pong: the
// whole tile into `owner`'s buffer). The caller announces C_TILE_BYTES on `bar` first, then loads
// the boxes in one go or a few per k-block (c_spread: the C reads of all SMs, which run in step,
// then do not come as one burst that delays the A and B loads behind them). With c_ring the buffer
// is a ring slot and the boxes are store slice `slice` of the tile (C_SLICE_BYTES on the slot's barrier).
constexpr int C_CHUNKS = SLICE_COLS / OUT_CHUNK, C_SUBS = ROWS_PER_CONSUMER / C_BOX_ROWS;
constexpr int C_BOXES = CONSUMERS / TILE_TURNS * C_CHUNKS * C_SUBS;
__device__ __forceinline__ void load_c_boxes(const TmaDescriptor& tma_C, unsigned char* out_buf, u64* bar,
                                             int tile_m, int tile_n, int owner, int first, int last,
                                             int slice = 0) {
    const u64 policy = l2_evict_first_policy();  // C is read once
    for (int box = first; box < last; ++box) {
        const int part = box / (C_CHUNKS * C_SUBS), chunk = box / C_SUBS % C_CHUNKS, sub = box % C_SUBS;
        const int consumer = PINGPONG ? owner : part;
        tma_load_2d_hinted(out_buf + ((consumer * C_CHUNKS + chunk) * ROWS_PER_CONSUMER + sub * C_BOX_ROWS) * 128,
                           &tma_C, bar, tile_n * BN + slice * SLICE_COLS + chunk * OUT_CHUNK,
                           tile_m * BM + consumer * CONSUMER_ROWS + sub * C_BOX_ROWS, policy);
    }
}

// Producer (c_l2_prefetch): box `box` of the C tile of (tile_m, tile_n) into L2, boxes numbered along
// each box row of the tile first; the ring's later loads of the same boxes then hit L2.
constexpr int C_TILE_BOXES = (BN / OUT_CHUNK) * (BM / C_BOX_ROWS);
__device__ __forceinline__ void prefetch_c_box(const TmaDescriptor& tma_C, int tile_m, int tile_n, int box) {
    tma_prefetch_l2_2d(&tma_C, tile_n * BN + box % (BN / OUT_CHUNK) * OUT_CHUNK,
                       tile_m * BM + box / (BN / OUT_CHUNK) * C_BOX_ROWS);
}
"""
