"""WgmmaConfig + GemmSpec → KernelSource: a Hopper GEMM written as readable CUDA with inline PTX.

The kernel is assembled from stages, each one function here: the tile scheduler, the TMA loads of
one k-block (producer), the wgmma of one k-block (consumer), the epilogue write-back, and the two
main loops (warp-specialized, or every warpgroup computing while thread 0 issues the copies).

Shared memory per stage: the A tile then the B tile, each as rows of 128 bytes (64 16-bit or 32
tf32 values of K, or 64 values of M/N when the operand is stored MN-major), in TMA's 128-byte
swizzle, which is also the layout wgmma's descriptors read without bank conflicts.
"""
from __future__ import annotations

from dataclasses import replace

from ...arch import Geometry, geometry
from ...errors import ConfigError
from ...kernel_source import KernelSource, TensorMapArg
from ...spec import GemmSpec
from . import gated, ptx, schedule
from .schedule import Schedule, schedule_for
from .writeback import (BIAS_PREFETCH, FLOAT_VIEW, FRAGMENT, LOAD_C_TILE, bias_prefetch_call, epilogue_function,
                        operand_decls, store_tile, store_tile_smem)
from .consumer import consumer_overlapped, consumer_plain, consumer_split, consumer_transposing
from .producer import producer
from ..parts.ring import RING
from ..parts.staging import stage_kernel
from .groups import CPath
from .config import (FAMILY, INPUT_BYTES, OUT_BYTES, SPLIT_BUFFERS, VERSION, WgmmaConfig, k_major, out_dtype,
                     kernel_spec, operand_rows, overlap_idle, rejections, splits_fp32, staged_operands, transposes_tf32)

C_TYPES = {"bf16": "bf16_t", "fp16": "fp16_t", "tf32": "float", "fp32": "float"}
TMA_TYPES = {"bf16": "bf16", "fp16": "fp16", "tf32": "fp32", "fp32": "fp32"}
K_STEP = {"bf16": 16, "fp16": 16, "tf32": 8, "fp32": 8}  # K per wgmma instruction (fp32: tf32 parts)

def mn_chunk(dtype: str) -> int:
    """M/N values in one 128-byte swizzled row: the width of one MN-major box (64 16-bit, 32 fp32)."""
    return 128 // INPUT_BYTES[dtype]


def entry_name(spec: GemmSpec) -> str:
    return f"wgmma_{spec.slug().removeprefix('gemm_')}"


# --- host-side descriptions ------------------------------------------------------------------------
def tensor_maps(spec: GemmSpec, config: WgmmaConfig) -> tuple[TensorMapArg, ...]:
    """TMA descriptors of A and B. A K-major operand is one box of bk × rows; an MN-major one is
    loaded as chunks one 128-byte row wide (a swizzled box row is at most 128 bytes)."""
    bk = config.bk(spec.dtype)
    a_kmajor, b_kmajor = k_major(spec)
    kind = TMA_TYPES[spec.dtype]
    m, n, k = spec.m, spec.gemm_n, spec.k  # (a gated spec's B has 2N rows: gate and up)
    # Each operand's rows as stored (operand_rows); a staged one is read from its workspace, whose rows
    # are `pitch` bytes apart.
    row = {name: row_bytes for name, _, row_bytes in operand_rows(spec)}
    row |= {s.operand: s.pitch for s in (staged_operands(spec) if config.stage_operands else ())}
    a_row, b_row = row["A"], row["B"]
    a = (TensorMapArg("tma_A", "A", kind, (k, m), (a_row,), (bk, config.bm)) if a_kmajor
         else TensorMapArg("tma_A", "A", kind, (m, k), (a_row,), (mn_chunk(spec.dtype), bk)))
    b_rows = config.bn // config.cluster_m  # each block of a cluster loads its share of B
    b = (TensorMapArg("tma_B", "B", kind, (k, n), (b_row,), (bk, b_rows)) if b_kmajor
         else TensorMapArg("tma_B", "B", kind, (n, k), (b_row,), (mn_chunk(spec.dtype), bk)))
    return (a, b, *epilogue_maps(spec, config))


def epilogue_maps(spec: GemmSpec, config: WgmmaConfig) -> tuple[TensorMapArg, ...]:
    """D (and C, when the epilogue reads it) as boxes of one 128-byte row × one consumer's rows."""
    if not config.tma_store:
        return ()
    out = out_dtype(spec)
    size = OUT_BYTES[out]
    box = (128 // size, config.rows_per_consumer)
    d = TensorMapArg("tma_D", "D", out, (spec.n, spec.m), (spec.n * size,), box)
    if not spec.epilogue.reads_c:
        return (d,)
    c_box = (128 // size, config.c_box_rows)
    return (d, TensorMapArg("tma_C", "C", out, (spec.n, spec.m), (spec.n * size,), c_box))


# --- CUDA text: constants and scheduler -------------------------------------------------------------
def _c_constants(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The shape of C's loads, for the C path this kernel takes (none for an epilogue without C)."""
    c = config.c_path(spec)
    if c in (CPath.NONE, CPath.GLOBAL):
        return ""
    text = f"""constexpr int C_TILE_BYTES = BM * BN * (int)sizeof(out_t);
constexpr int C_BOX_ROWS = {config.c_box_rows};  // rows of one C box (TMA)
constexpr int C_BOXES_PER_KB = {1 if config.c_spread else "1 << 30"};  // C boxes issued per k-block (all at once)
"""
    if c.through_ring:
        text += """// c_ring: C comes through the ring, one slice per slot, in the slot's larger operand region.
constexpr bool C_IN_A_REGION = A_TILE_BYTES >= B_TILE_BYTES;
constexpr int C_SLOT_BYTES = C_IN_A_REGION ? A_TILE_BYTES : B_TILE_BYTES;  // that region's stride, slot to slot
constexpr int C_SLICE_BYTES = BM * SLICE_COLS * (int)sizeof(out_t);
"""
    if c is CPath.TILE:
        text += """// The C tile shares the buffer with the previous tile's D. Each consumer hands the buffer back at
// k-block C_RELEASE_KB of its next piece (by then its TMA store has long finished reading it, so
// nobody waits), and the producer fetches C at C_LOAD_KB, a full ring later: C is waiting in shared
// memory when the math ends, and neither side ever blocks on the other.
constexpr int C_RELEASE_KB = K_BLOCKS > 2 ? 2 : K_BLOCKS - 1;
constexpr int C_LOAD_KB = C_RELEASE_KB + STAGES < K_BLOCKS - 1 ? C_RELEASE_KB + STAGES : K_BLOCKS - 1;
"""
    return text


# A slice that is not whole 128-byte rows (a width fitted to N: 224 = 3.5 boxes) is stored as STORE_CHUNKS
# boxes, the last one starting at LAST_BOX_COL so that it ends with the slice: it overlaps the box before it,
# and both hold those columns' same values (writeback.LAST_BOX), so D is written twice there, never past
# the tile. The buffer holds whole boxes.
RAGGED_EPI_BYTES = """constexpr int STORE_CHUNKS = (SLICE_COLS + OUT_CHUNK - 1) / OUT_CHUNK;  // boxes a slice is stored in
constexpr int LAST_BOX_COL = SLICE_COLS - OUT_CHUNK;  // the last box's first column: it overlaps the box before it
constexpr int EPI_BYTES = TILE_TURNS * BM * STORE_CHUNKS * OUT_CHUNK * (int)sizeof(out_t);  // whole boxes"""


def _constants(spec: GemmSpec, config: WgmmaConfig) -> str:
    a_kmajor, b_kmajor = k_major(spec)
    bk, size = config.bk(spec.dtype), INPUT_BYTES[spec.dtype]
    epi_bytes = ("constexpr int EPI_BYTES = 0;  // d_over_c: no store buffer (D is staged in C's ring slots)"
                 if config.d_in_ring_only else gated.epi_bytes() if spec.gated else
                 RAGGED_EPI_BYTES if config.ragged_slice(spec) else
                 "constexpr int EPI_BYTES = TMA_STORE ? TILE_TURNS * BM * SLICE_COLS * (int)sizeof(out_t) : 0;  // a buffer per turn")
    gated_shapes = gated.constants(spec) if spec.gated else ""
    return f"""
// Problem and tile shape, baked in at generation time.
constexpr int M = {spec.m}, N = {spec.gemm_n}, K = {spec.k};
constexpr int BM = {config.bm}, BN = {config.bn}, BK = {bk};   // block tile; BK·{size} B = one 128-byte row
constexpr int STAGES = {config.stages};                  // shared-memory ring depth
constexpr int CONSUMERS = {config.consumers};            // warpgroups issuing wgmma
// Cooperative consumers split every tile by rows; ping-pong consumers take whole tiles in turn.
constexpr bool PINGPONG = {str(config.pingpong).lower()};
constexpr int ROWS_PER_CONSUMER = PINGPONG ? BM : BM / CONSUMERS, M_BLOCKS = ROWS_PER_CONSUMER / 64;
constexpr int CONSUMER_ROWS = PINGPONG ? 0 : ROWS_PER_CONSUMER;  // tile rows before a consumer's first
constexpr int TILE_TURNS = PINGPONG ? CONSUMERS : 1;             // consumers taking turns over the tiles
constexpr int STAGE_READERS = PINGPONG ? 1 : CONSUMERS;          // consumers that read (and release) a stage
constexpr int K_STEP = {K_STEP[spec.dtype]};                     // K of one wgmma instruction
constexpr int MN_CHUNK = {mn_chunk(spec.dtype)};                   // M/N values in a 128-byte row: an MN-major box's width
constexpr int K_BLOCKS = (K + BK - 1) / BK;              // the last block's tail is TMA zero-fill
constexpr int TILES_M = (M + BM - 1) / BM, TILES_N = (N + BN - 1) / BN;
constexpr int CLUSTER_M = {config.cluster_m}, GROUP_M = {config.group_m};
constexpr int UNITS_M = (TILES_M + CLUSTER_M - 1) / CLUSTER_M;   // scheduled units: one tile per cluster block
constexpr int UNITS = UNITS_M * TILES_N;
constexpr int A_TILE_BYTES = BM * 128, B_TILE_BYTES = BN * 128, STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;
constexpr bool A_K_MAJOR = {str(a_kmajor).lower()}, B_K_MAJOR = {str(b_kmajor).lower()};  // else MN-major: wgmma transposes
typedef {C_TYPES[spec.dtype]} in_t;
typedef {C_TYPES[out_dtype(spec)]} out_t;
// Epilogue tile in shared memory (TMA store): per consumer, chunks of one 128-byte row × its rows,
// for one slice of SLICE_COLS columns at a time.
constexpr bool TMA_STORE = {str(config.tma_store).lower()};
constexpr int STORE_SLICES = {config.store_slices}, SLICE_COLS = BN / STORE_SLICES;
constexpr int OUT_CHUNK = 128 / sizeof(out_t);
{_c_constants(spec, config)}{gated_shapes}{epi_bytes}
"""


SCHEDULER = r"""
// Tile order: units run down GROUP_M rows of tiles before moving one column right, so the blocks
// running at one time share the same few A row-panels and B column-panels in L2.
__device__ __forceinline__ void unit_coords(int unit, int& unit_m, int& tile_n) {
    const int per_group = GROUP_M * TILES_N;
    const int first_m = (unit / per_group) * GROUP_M;
    const int rows = min(UNITS_M - first_m, GROUP_M);
    unit_m = first_m + (unit % per_group) % rows;
    tile_n = (unit % per_group) / rows;
}

// A consumer is done with a ring slot: arrive on its `empty` barrier in every block of the cluster
// (each block's B share lives in the slot of both).
__device__ __forceinline__ void release_ring_slot(u64* empty_s) {
    if (CLUSTER_M > 1) {
        if (threadIdx.x % 128 < CLUSTER_M) mbarrier_arrive_cluster(empty_s, threadIdx.x % 128);
    } else if (threadIdx.x % 128 == 0) {
        mbarrier_arrive(empty_s);
    }
}
"""


# --- CUDA text: producer, consumer math, epilogue ----------------------------------------------------
def _load_stage(multicast: bool) -> str:
    b_call = ("tma_load_2d_multicast(b_dst, &tma_B, bar, c0, c1, (unsigned short)((1 << CLUSTER_M) - 1))"
              if multicast else "tma_load_2d(b_dst, &tma_B, bar, c0, c1)")
    return f"""
// Producer: copy k-block `kb` of tile (tile_m, tile_n) into stage buffers a/b; completion (bytes)
// is counted on `bar`. A K-major operand is one box; an MN-major one is BM/MN_CHUNK (BN/MN_CHUNK) boxes.
__device__ __forceinline__ void load_stage(const TmaDescriptor& tma_A, const TmaDescriptor& tma_B,
                                           in_t* a, in_t* b, u64* bar, int tile_m, int tile_n, int kb, int rank) {{
    mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
    if (A_K_MAJOR) {{
        tma_load_2d(a, &tma_A, bar, kb * BK, tile_m * BM);
    }} else {{
        #pragma unroll
        for (int chunk = 0; chunk < BM / MN_CHUNK; ++chunk)
            tma_load_2d(a + chunk * MN_CHUNK * BK, &tma_A, bar, tile_m * BM + chunk * MN_CHUNK, kb * BK);
    }}
    // With a cluster, this block loads its share of B and multicasts it to every block of the pair.
    constexpr int B_SHARE = BN / CLUSTER_M;
    if (B_K_MAJOR) {{
        in_t* b_dst = b + rank * B_SHARE * BK;
        const int c0 = kb * BK, c1 = tile_n * BN + rank * B_SHARE;
        {b_call};
    }} else {{
        #pragma unroll
        for (int chunk = 0; chunk < B_SHARE / MN_CHUNK; ++chunk) {{
            in_t* b_dst = b + (rank * B_SHARE / MN_CHUNK + chunk) * MN_CHUNK * BK;
            const int c0 = tile_n * BN + rank * B_SHARE + chunk * MN_CHUNK, c1 = kb * BK;
            {b_call};
        }}
    }}
}}
"""


def _mma_stage(spec: GemmSpec, config: WgmmaConfig) -> str:
    size = INPUT_BYTES[spec.dtype]
    trans = "" if spec.dtype == "tf32" else "A_K_MAJOR ? 0 : 1, B_K_MAJOR ? 0 : 1"
    call = f"wgmma_m64n{config.bn}" + (f"<{trans}>" if trans else "")
    half = f"wgmma_m64n{config.bn // 2}_at<PART * BN / 4{', ' + trans if trans else ''}>"
    if config.overlap_epilogue:
        # PART 0 / 1: the lower / upper half of the tile's columns, each its own wgmma (see
        # _consumer_overlapped). A half's B columns start BN/2 rows (K-major) or BN/2 / 64 chunks
        # (MN-major) into the tile: (BN/2)·128 bytes either way.
        head = """template <int PART>  // 0 / 1: the lower / upper BN/2 columns (overlap_epilogue)
__device__ __forceinline__ void mma_stage(float (&acc)[M_BLOCKS][BN / 2], const in_t* a, const in_t* b, int consumer,
                                          bool fresh = false) {
    const char* a_bytes = reinterpret_cast<const char*>(a) + consumer * CONSUMER_ROWS * 128;
    const char* b_bytes = reinterpret_cast<const char*>(b) + PART * BN / 2 * 128;"""
        issue = f"{half}(acc[mb], desc_a, desc_b, !(fresh && ks == 0));  // fresh: D = A·B"
    else:
        head = """__device__ __forceinline__ void mma_stage(float (&acc)[M_BLOCKS][BN / 2], const in_t* a, const in_t* b, int consumer) {
    const char* a_bytes = reinterpret_cast<const char*>(a) + consumer * CONSUMER_ROWS * 128;
    const char* b_bytes = reinterpret_cast<const char*>(b);"""
        issue = f"{call}(acc[mb], desc_a, desc_b);"
    advances = ("""    // tf32 tiles are K-major in shared memory (an MN-major operand is transposed by the consumers)
    constexpr int A_K_ADVANCE = K_STEP * 4, B_K_ADVANCE = K_STEP * 4;""" if spec.dtype == "tf32" else
                f"""    constexpr int A_K_ADVANCE = A_K_MAJOR ? K_STEP * {size} : K_STEP * 128;
    constexpr int B_K_ADVANCE = B_K_MAJOR ? K_STEP * {size} : K_STEP * 128;""")
    return f"""
// Consumer: this warpgroup's rows times the whole B tile for one k-block, BK / K_STEP wgmma per
// 64-row block. Descriptor steps: K-major operands advance K_STEP·{size} bytes along the swizzled
// row; MN-major ones advance K_STEP rows of 128 bytes. SBO = 1024: eight 128-byte rows per core
// matrix group; LBO (MN-major only) = BK·128: the distance between 64-wide chunks.
{head}
{advances}
    #pragma unroll
    for (int ks = 0; ks < BK / K_STEP; ++ks) {{
        const u64 desc_b = smem_descriptor(b_bytes + ks * B_K_ADVANCE, BK * 128, 1024);
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            const u64 desc_a = smem_descriptor(a_bytes + mb * 64 * 128 + ks * A_K_ADVANCE, BK * 128, 1024);
            {issue}
        }}
    }}
}}
"""


# A consumer's share of a stage, per operand: its float4s (A_PIECES, B_PIECES) and its rows of M or N
# (its own rows of A, half of B's). SHARE_PIECES declares the float4 counts (8 in a 128-byte row) in
# the functions that split or transpose a share.
CONSUMER_SHARES = (("A_PIECES", "ROWS_PER_CONSUMER"), ("B_PIECES", "BN / CONSUMERS"))
SHARE_PIECES = ("    constexpr int " + ", ".join(f"{pieces} = {rows} * 128 / 16" for pieces, rows in CONSUMER_SHARES)
                + ";  // float4s")


def _share(tile: str) -> str:
    """The first float4 of this consumer's share of `tile` (a, b, a_small or b_small)."""
    return f"reinterpret_cast<float4*>({tile}) + consumer * {tile[0].upper()}_PIECES"


def exact_piece(spec: GemmSpec, config: WgmmaConfig) -> str:
    """3xtf32's exact path: a piece whose k-blocks held a value too small to split (tf32_split_key)
    is summed again with fp32 FMAs from A and B in global memory, as SGEMM would, over what the
    tensor cores summed; each thread its write-back fragment (writeback.FRAGMENT's rows and
    columns). Out of the main loop, so the loop keeps its registers and its speed; a few 8-column
    groups at a time, so the partial stays small beside the running sum."""
    a_at = "(size_t)m * K + k" if k_major(spec)[0] else "(size_t)k * M + m"
    b_at = "(size_t)n * K + k" if k_major(spec)[1] else "(size_t)k * N + n"
    groups = next(g for g in (4, 2, 1) if (config.bn // 8) % g == 0)
    return f"""
// 3xtf32's exact path, for a piece (tile_m, tile_n, k-blocks kb_begin .. kb_end) whose operands hold
// a value too small to split: each thread sums its own fragment (rows m, columns n, as the write-back
// stores it) again with fp32 FMAs from A and B in global memory, a k-block at a time into a fresh
// partial added to the running sum, as the tensor-core path does; EXACT_GROUPS 8-column groups j at
// a time (A read again for each). Slow (CUDA cores, values from L2 and L1), and taken only
// for such pieces.
constexpr int EXACT_GROUPS = {groups};
__device__ __forceinline__ void exact_piece(float (&acc)[M_BLOCKS][BN / 2], const in_t* __restrict__ A,
                                            const in_t* __restrict__ B, int tile_m, int tile_n, int consumer,
                                            int kb_begin, int kb_end) {{
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int k_end = min(kb_end * BK, K);
    #pragma unroll
    for (int mb = 0; mb < M_BLOCKS; ++mb)
        #pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;
    #pragma unroll 1
    for (int k_block = kb_begin * BK; k_block < k_end; k_block += BK) {{
        #pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += EXACT_GROUPS) {{
            float part[M_BLOCKS][EXACT_GROUPS][4] = {{}};  // [mb][j - j0][2·half + e]: acc[mb][4·j + 2·half + e]
            #pragma unroll 1
            for (int k = k_block; k < min(k_block + BK, k_end); ++k) {{
                float x[M_BLOCKS][2];  // A at this thread's rows
                #pragma unroll
                for (int mb = 0; mb < M_BLOCKS; ++mb)
                    #pragma unroll
                    for (int half = 0; half < 2; ++half) {{
                        const int m = {FRAGMENT.row};
                        x[mb][half] = m < M ? A[{a_at}] : 0.0f;
                    }}
                #pragma unroll
                for (int jj = 0; jj < EXACT_GROUPS; ++jj)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {{
                        const int j = j0 + jj, n = {FRAGMENT.col} + e;
                        const float y = n < N ? B[{b_at}] : 0.0f;
                        #pragma unroll
                        for (int mb = 0; mb < M_BLOCKS; ++mb)
                            #pragma unroll
                            for (int half = 0; half < 2; ++half)
                                part[mb][jj][2 * half + e] = fmaf(x[mb][half], y, part[mb][jj][2 * half + e]);
                    }}
            }}
            #pragma unroll
            for (int mb = 0; mb < M_BLOCKS; ++mb)
                #pragma unroll
                for (int jj = 0; jj < EXACT_GROUPS; ++jj)
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mb][4 * (j0 + jj) + i] += part[mb][jj][i];
        }}
    }}
}}
"""


def _split_stage(spec: GemmSpec, config: WgmmaConfig) -> str:
    """3xtf32: the residuals of one k-block, written beside its stage; each consumer splits its own
    rows of A and its share of B's rows (the other consumer reads those too: consumer_split waits
    for both at a named barrier). An MN-major operand is transposed into the K-major layout on the
    way (split_transposed): tf32 wgmma reads K-major tiles only."""
    if config.round_big:  # big rounded to nearest, written over x; the residual is x - big
        write = """
    const float4 big = make_float4(tf32_round(x.x), tf32_round(x.y), tf32_round(x.z), tf32_round(x.w));
    *big_at = big;
    *small_at = make_float4(tf32_round(x.x - big.x), tf32_round(x.y - big.y), tf32_round(x.z - big.z),
                            tf32_round(x.w - big.w));
    return tf32_split_key(x);"""
    else:  # big is x itself, which the tensor cores truncate
        write = """
    if (MOVED) *big_at = x;
    *small_at = make_float4(tf32_residual(x.x), tf32_residual(x.y), tf32_residual(x.z), tf32_residual(x.w));
    return tf32_split_key(x);"""
    a_split, b_split = (  # each returns its operand's smallest split key
        f"split_part({_share(name)}, {_share(name + '_small')}, {pieces})" if kmajor else
        f"split_transposed({_share(name)}, {_share(name + '_small')}, {rows} / MN_CHUNK)"
        for name, kmajor, (pieces, rows) in zip("ab", k_major(spec), CONSUMER_SHARES))
    transposed = "" if k_major(spec) == (True, True) else transpose_chunks(True)
    return f"""
// 3xtf32: x = big + small, both tf32. The residual goes to the same place of the residual tile as x
// has in its stage, so both read with the same descriptors; MOVED: x itself is written to big_at too
// (a transposing split moves it). The swizzle moves 16-byte pieces only: a float4 at a time keeps it.
// Returns x's split key (tf32_split_key: below UNSPLITTABLE_KEY, a value too small to split).
template <bool MOVED>
__device__ __forceinline__ u32 split_write(float4 x, float4* big_at, float4* small_at) {{{write}
}}

// A K-major operand: every value of this consumer's part, split where it lies. Each load is issued
// one value ahead of its split (SPLIT_LOAD_AHEAD): with the wgmma reading the same shared memory, a
// load's latency bounds this loop more than the split's arithmetic does. A second value ahead does
// not fit beside the two partial sums' registers, nor does one beside round_big's rounded big part
// (those splits load as they go).
constexpr bool SPLIT_LOAD_AHEAD = {"false" if config.round_big else "true"};
__device__ __forceinline__ u32 split_part(float4* from, float4* to, int count) {{
    u32 key = ~0u;  // the smallest split key (tf32_split_key)
    int i = threadIdx.x % 128;
    float4 next = SPLIT_LOAD_AHEAD ? from[i] : float4{{}};
    #pragma unroll
    for (; i < count; i += 128) {{
        const float4 x = SPLIT_LOAD_AHEAD ? next : from[i];
        if (SPLIT_LOAD_AHEAD && i + 128 < count) next = from[i + 128];
        key = min(key, split_write<false>(x, from + i, to + i));
    }}
    return key;
}}
{transposed}
// This consumer's share of a k-block. Returns whether this thread found a value too small to
// split: the consumers OR that over a piece once its k-blocks are done, and sum the piece again
// exactly (exact_piece) if any did.
__device__ __forceinline__ bool split_stage(in_t* a, in_t* b, in_t* a_small, in_t* b_small, int consumer) {{
{SHARE_PIECES}
    return min({a_split}, {b_split}) < UNSPLITTABLE_KEY;
}}
{exact_piece(spec, config)}
// 3xtf32: one k-block's three products, summed by the tensor cores into a fresh partial (its first
// wgmma overwrites it): the running sum stays out of the tensor cores' accumulation, which truncates
// (consumer_split adds the partial in fp32). The residual products of all k-steps come first and
// big·big last: each wgmma truncates its sum to the partial's magnitude, so the residual products
// are summed while the partial is still about 2^-10 of its final size, and only the last k-steps'
// wgmma truncate at full size (4 of them a k-block, where small·big, big·small, big·big per k-step
// gave 12).
__device__ __forceinline__ void mma_stage_split(float (&part)[M_BLOCKS][BN / 2], const in_t* a, const in_t* b,
                                                const in_t* a_small, const in_t* b_small, int consumer) {{
    const char* a_bytes = reinterpret_cast<const char*>(a) + consumer * CONSUMER_ROWS * 128;
    const char* as_bytes = reinterpret_cast<const char*>(a_small) + consumer * CONSUMER_ROWS * 128;
    const char* b_bytes = reinterpret_cast<const char*>(b);
    const char* bs_bytes = reinterpret_cast<const char*>(b_small);
    // the descriptor of k-step ks of a K-major tile (or of one 64-row block of A)
    const auto at = [](const char* tile, int ks) {{ return smem_descriptor(tile + ks * K_STEP * 4, BK * 128, 1024); }};
    #pragma unroll
    for (int ks = 0; ks < BK / K_STEP; ++ks)
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            wgmma_m64n{config.bn}(part[mb], at(as_bytes + mb * 64 * 128, ks), at(b_bytes, ks), ks != 0);  // small·big (fresh at the first k-step)
            wgmma_m64n{config.bn}(part[mb], at(a_bytes + mb * 64 * 128, ks), at(bs_bytes, ks), 1);         // big·small
        }}
    #pragma unroll
    for (int ks = 0; ks < BK / K_STEP; ++ks)
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb)
            wgmma_m64n{config.bn}(part[mb], at(a_bytes + mb * 64 * 128, ks), at(b_bytes, ks), 1);  // big·big
}}
"""


TRANSPOSE_NOTE = r"""
// An MN-major operand: TMA stores each chunk of MN_CHUNK (32) values of M or N as BK (32) rows of K,
// 128 bytes of M/N values each. The K-major layout of those 32 M/N values is 32 rows of 128 bytes
// of K values: the same 4 KB under the same swizzle, so a chunk is transposed in place, as 64 blocks
// of 4x4 values (block (mn4, k4): M/N values 4·mn4.., K values 4·k4..). Block (mn4, k4) goes where
// block (k4, mn4) was, so a set of blocks closed under that swap is written exactly where it was
// read: each half of a chunk (mn4 ^ k4 below 4, or not) is one warp's, a block per lane, read
// wholly before any lane writes. Reads and writes spread each 512 bytes over all 8 16-byte columns:
// 4 wavefronts, no bank conflicts beyond.
__device__ __forceinline__ float float4_lane(const float4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
"""


def transpose_chunks(split: bool) -> str:
    """The in-place transpose of an MN-major operand's chunks (TRANSPOSE_NOTE); with `split` (3xtf32)
    each value is split on the way, its residual written to the K-major place of the residual tile."""
    name, params = ("split_transposed", "float4* from, float4* to, int chunks") if split else \
        ("transpose_chunks", "float4* from, int chunks")
    small = "\n        float4* small_chunk = to + half / 2 * CHUNK_PIECES;" if split else ""
    write = ("key = min(key, split_write<true>(x, x_chunk + at, small_chunk + at));" if split else
             "x_chunk[at] = x;")
    result, begin, end = (("u32", "\n    u32 key = ~0u;  // the smallest split key (tf32_split_key)", "\n    return key;")
                          if split else ("void", "", ""))
    return f"""{TRANSPOSE_NOTE}
__device__ __forceinline__ {result} {name}({params}) {{
    constexpr int CHUNK_PIECES = MN_CHUNK * BK / 4;  // float4s in a chunk (256)
    const int lane = threadIdx.x % 32, mn4 = lane % 8;{begin}
    #pragma unroll 1  // one block's 16 values live at a time: registers are few beside the sums
    for (int half = (threadIdx.x % 128) / 32; half < 2 * chunks; half += 4) {{  // a warp takes one at a time
        float4* x_chunk = from + half / 2 * CHUNK_PIECES;{small}
        const int k4 = mn4 ^ (lane / 8 + 4 * (half % 2));
        float4 rows[4];  // rows[j]: the block's 4 M/N values at K = 4·k4 + j
        #pragma unroll
        for (int j = 0; j < 4; ++j) {{
            const int row = 4 * k4 + j;  // a K value (MN-major: rows of K)
            rows[j] = x_chunk[row * 8 + (mn4 ^ (row % 8))];
        }}
        __syncwarp();
        #pragma unroll
        for (int j = 0; j < 4; ++j) {{
            const int row = 4 * mn4 + j;  // an M/N value (K-major: rows of M/N)
            const float4 x = make_float4(float4_lane(rows[0], j), float4_lane(rows[1], j),
                                         float4_lane(rows[2], j), float4_lane(rows[3], j));
            const int at = row * 8 + (k4 ^ (row % 8));
            {write}
        }}
    }}{end}
}}
"""


def _transpose_stage(spec: GemmSpec) -> str:
    """tf32 with an MN-major operand: each consumer transposes its own rows of A and its share of B
    (consumer_transposing waits for both consumers' shares at a named barrier)."""
    body = "".join(f"\n    transpose_chunks({_share(name)}, {rows} / MN_CHUNK);"
                   for name, kmajor, (_, rows) in zip("ab", k_major(spec), CONSUMER_SHARES) if not kmajor)
    return f"""{transpose_chunks(False)}
// tf32 wgmma reads K-major tiles only: this consumer's MN-major rows of a stage, transposed in place.
__device__ __forceinline__ void transpose_stage(in_t* a, in_t* b, int consumer) {{
{SHARE_PIECES}{body}
}}
"""


# --- CUDA text: the kernels ------------------------------------------------------------------------
def _signature(spec: GemmSpec, config: WgmmaConfig, entry: str, maps: tuple[TensorMapArg, ...]) -> str:
    cluster = f" __cluster_dims__({config.cluster_m}, 1, 1)" if config.cluster_m > 1 else ""
    params = ["const in_t* __restrict__ A", "const in_t* __restrict__ B", *operand_decls(spec.epilogue),
              "out_t* __restrict__ D", *(f"const __grid_constant__ TmaDescriptor {t.name}" for t in maps)]
    return (f'extern "C" __global__ void __launch_bounds__({config.threads}, 1){cluster}\n'
            f"{entry}({', '.join(params)})")


def _shared_storage(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The block's dynamic shared memory as a struct: the ring of A and B tiles, the store buffer and
    the barriers, each member only where the kernel uses it (the layout barrier_bytes() reserves:
    C's barriers and ping-pong's turns keep their places when absent)."""
    c_barriers = config.c_path(spec).waits_on_buffer
    members = ["unsigned char a[STAGES][A_TILE_BYTES];  // the ring's A tiles",
               "unsigned char b[STAGES][B_TILE_BYTES];  // the ring's B tiles"]
    if splits_fp32(spec):
        members += [f"unsigned char a_small[{SPLIT_BUFFERS}][A_TILE_BYTES];  // 3xtf32: residuals of A, a k-block each",
                    f"unsigned char b_small[{SPLIT_BUFFERS}][B_TILE_BYTES];  // and of B"]
    members += ["unsigned char out[EPI_BYTES];          // the store buffer (TMA store)"] if config.epilogue_bytes(spec) else []
    members += ["u64 full[STAGES];                        // stage s has landed",
                "u64 empty[STAGES];                       // stage s may be refilled"]
    members += (["u64 c_full[TILE_TURNS];                  // [turn] the C tile has landed",
                 "u64 c_empty[TILE_TURNS];                 // [turn] the epilogue tile is free"] if c_barriers
                else ["u64 c_unused[2 * TILE_TURNS];            // (no C tile: C's barriers' place)"] if config.pingpong else [])
    members += ["u64 mainloop_done[TILE_TURNS];            // [turn] a main loop ended"] if config.pingpong else []
    body = "".join(f"\n    {m}" for m in members)
    # Offsets are checked as sums of member sizes: NVRTC 13.0 rejects __builtin_offsetof, and byte
    # arrays of 8-byte multiples followed by u64 arrays leave no padding between members.
    c_sizes = "sizeof(SharedStorage::c_full) + sizeof(SharedStorage::c_empty)" if c_barriers else "sizeof(SharedStorage::c_unused)"
    turns = (f"""
static_assert(sizeof(SharedStorage::full) + sizeof(SharedStorage::empty) + {c_sizes} ==
              (2 * STAGES + 2 * TILE_TURNS) * 8, "turns after C's barriers");"""
             if config.pingpong else "")
    before = "sizeof(SharedStorage::a) + sizeof(SharedStorage::b)" + (" + sizeof(SharedStorage::out)" if config.epilogue_bytes(spec) else "")
    split = " + SPLIT_BYTES" if splits_fp32(spec) else ""
    before += " + sizeof(SharedStorage::a_small) + sizeof(SharedStorage::b_small)" if split else ""
    split_bytes = (f"\nconstexpr int SPLIT_BYTES = {config.split_bytes(spec)};  // 3xtf32's residual tiles"
                   if split else "")
    return f"""
// The block's dynamic shared memory, laid out once. The host allocates SMEM_BYTES: the struct and
// up to 1024 bytes of realignment (dynamic shared memory starts at least 16-byte aligned).
struct SharedStorage {{{body}
}};
constexpr int SMEM_BYTES = {config.smem_bytes(spec)};{split_bytes}
static_assert(sizeof(SharedStorage) + 1024 - 16 <= SMEM_BYTES, "the shared storage outgrows the allocation");
static_assert({before} == STAGES * STAGE_BYTES{split} + EPI_BYTES, "barriers after the tiles and buffer");{turns}
"""


def _smem_setup(spec: GemmSpec, config: WgmmaConfig) -> str:
    """Where the SharedStorage sits: dynamic shared memory realigned to 1024 bytes, and the names
    the loops use for its members."""
    c_barriers = config.c_path(spec).waits_on_buffer
    lines = ["u64* c_full = shared.c_full;", "u64* c_empty = shared.c_empty;"] if c_barriers else []
    lines += ["u64* mainloop_done = shared.mainloop_done;"] if config.pingpong else []
    # No store buffer (direct stores, or D over C in the ring): the name is kept, pointing where a
    # buffer would start; nothing reads or writes through it.
    out = "shared.out" if config.epilogue_bytes(spec) else "reinterpret_cast<unsigned char*>(shared.full)"
    barriers = "".join(f"\n    {line}" for line in lines)
    small = ("""
    in_t* a_small = reinterpret_cast<in_t*>(shared.a_small);  // 3xtf32's residual tiles
    in_t* b_small = reinterpret_cast<in_t*>(shared.b_small);""" if splits_fp32(spec) else "")
    return f"""
    // Dynamic shared memory realigned to 1024 bytes: the 128-byte swizzle repeats every 8 rows, and
    // wgmma descriptors assume tiles start on that boundary.
    extern __shared__ unsigned char smem_raw[];
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
    in_t* a_tiles = reinterpret_cast<in_t*>(shared.a);
    in_t* b_tiles = reinterpret_cast<in_t*>(shared.b);
    unsigned char* out_buf = {out};
    u64* full = shared.full;
    u64* empty = shared.empty;{barriers}{small}
    constexpr int A_ELEMS = A_TILE_BYTES / sizeof(in_t), B_ELEMS = B_TILE_BYTES / sizeof(in_t);
"""


def _epilogue_args(spec: GemmSpec) -> str:
    return "".join(f", {op.name}" for op in spec.epilogue.operands())


def _turn_barrier_init(spec: GemmSpec, config: WgmmaConfig) -> str:
    """C's barriers per epilogue buffer turn (where the C path waits on them) and ping-pong's turns."""
    lines = (["mbarrier_init(&c_full[turn], 1);", "mbarrier_init(&c_empty[turn], CONSUMERS / TILE_TURNS);"]
             if config.c_path(spec).waits_on_buffer else [])
    lines += ["mbarrier_init(&mainloop_done[turn], 1);"] if config.pingpong else []
    if not lines:
        return ""
    body = "".join(f"\n            {line}" for line in lines)
    return f"""
        for (int turn = 0; turn < TILE_TURNS; ++turn) {{{body}
        }}"""


def _setup(spec: GemmSpec, config: WgmmaConfig) -> str:
    """Barrier initialisation, the block's place in its cluster, and what every warpgroup shares."""
    ring_c = config.c_path(spec).through_ring
    sync = "cluster_sync()" if config.cluster_m > 1 else "__syncthreads()"
    rank = "(int)cluster_cta_rank()" if config.cluster_m > 1 else "0"
    c_slots = ("""
    unsigned char* c_slots = reinterpret_cast<unsigned char*>(C_IN_A_REGION ? a_tiles : b_tiles);  // slot 0's C region"""
               if ring_c else "")
    return f"""
    const int rank = {rank};   // this block's place in its cluster (0 without clusters)
    const int worker = blockIdx.x / CLUSTER_M;
    if (threadIdx.x == 0) {{
        tma_prefetch_descriptor(&tma_A);
        tma_prefetch_descriptor(&tma_B);
        for (int s = 0; s < STAGES; ++s) {{
            mbarrier_init(&full[s], 1);                           // the producer's expect_tx arrival
            mbarrier_init(&empty[s], STAGE_READERS * CLUSTER_M);  // every reader in every block that shares B
        }}{_turn_barrier_init(spec, config)}
        fence_barrier_init();
    }}
    {sync};

    auto release_stage = [&](int s) {{ release_ring_slot(&empty[s]); }};{c_slots}
    int cursor = 0;  // pieces of its work this thread has taken (next_piece)
    int unit, kb_begin, kb_end;
"""


def _body_specialized(spec: GemmSpec, config: WgmmaConfig, plan: Schedule) -> str:
    """A producer warpgroup (producer.py) fills the ring; consumer warpgroups (consumer.py) multiply."""
    split = plan.tail_workers > 0  # the tail's tiles are split along K
    loop = (consumer_split if splits_fp32(spec) else consumer_transposing if transposes_tf32(spec)
            else consumer_overlapped if config.overlap_epilogue
            else consumer_plain)
    consumers = loop(spec, config, split, schedule.share_call(plan, spec))
    drain = ("\n        if (threadIdx.x % 128 == 0) tma_store_wait_all();  // the last stores have left shared memory"
             if config.tma_store else "")
    cluster_end = "cluster_sync();  // no block leaves while its pair may still arrive on its barriers"
    return f"""{_smem_setup(spec, config)}{_setup(spec, config)}
    if (threadIdx.x < 128) {{{producer(spec, config)}    }} else {{{consumers}{drain}
    }}
    {cluster_end if config.cluster_m > 1 else ""}
"""


def _body_unified(spec: GemmSpec, config: WgmmaConfig) -> str:
    epi = _epilogue_args(spec)
    return f"""{_smem_setup(spec, config)}
    if (threadIdx.x == 0) {{
        for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
        fence_barrier_init();
    }}
    __syncthreads();
    // No producer warpgroup: every warpgroup computes; thread 0 also issues the copies, first
    // filling the whole ring, then refilling each stage as soon as all warpgroups are done with it.
    int unit_m, tile_n;
    unit_coords(blockIdx.x, unit_m, tile_n);
    const int tile_m = unit_m, consumer = threadIdx.x / 128;
    if (threadIdx.x == 0)
        for (int kb = 0; kb < STAGES && kb < K_BLOCKS; ++kb)
            load_stage(tma_A, tma_B, a_tiles + kb * A_ELEMS, b_tiles + kb * B_ELEMS, &full[kb], tile_m, tile_n, kb, 0);
    float acc[M_BLOCKS][BN / 2];
    #pragma unroll
    for (int mb = 0; mb < M_BLOCKS; ++mb)
        #pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;
    for (int kb = 0; kb < K_BLOCKS; ++kb) {{
        const int s = kb % STAGES;
        mbarrier_wait(&full[s], (kb / STAGES) & 1);
        wgmma_fence();
        mma_stage(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads();  // every warpgroup has finished reading stage s
        if (threadIdx.x == 0 && kb + STAGES < K_BLOCKS)
            load_stage(tma_A, tma_B, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, &full[s], tile_m, tile_n,
                       kb + STAGES, 0);
    }}
    {gated.call(spec, f"store_tile(acc, tile_m, tile_n, consumer, D{epi});")}
"""


def _code(spec: GemmSpec, config: WgmmaConfig, plan: Schedule, entry: str, maps: tuple[TensorMapArg, ...]) -> str:
    body = _body_specialized(spec, config, plan) if config.specialized else _body_unified(spec, config)
    epilogue = "" if spec.epilogue.is_identity else spec.epilogue.cuda_preamble(spec.out_dtype) + epilogue_function(spec.epilogue)
    return "\n".join([
        f"// gemmtune {FAMILY} v{VERSION}: {spec.short()}, {config.describe()}",
        "// TMA loads into a ring of 128-byte-swizzled shared-memory stages, wgmma from shared memory",
        "// into fp32 registers, the epilogue applied in registers and stored to D.",
        ptx.helpers(spec.dtype, config.bn, halves=config.overlap_epilogue), FLOAT_VIEW, _constants(spec, config), RING,
        SCHEDULER,
        schedule.cuda(plan),
        _load_stage(config.cluster_m > 1), _split_stage(spec, config) if splits_fp32(spec) else _mma_stage(spec, config),
        _transpose_stage(spec) if transposes_tf32(spec) else "",
        epilogue, _write_back(spec, config, plan),
        _shared_storage(spec, config), _signature(spec, config, entry, maps) + " {", body, "}",
    ])


def _write_back(spec: GemmSpec, config: WgmmaConfig, plan: Schedule) -> str:
    """store_tile, the shares' sum_share_to_d and store_tile_smem (with the producer's C loads); for a
    gated spec, in gated.py's namespace of D's shapes, after the SwiGLU compaction."""
    smem = ((store_tile_smem(spec, config) + (LOAD_C_TILE if spec.epilogue.reads_c else ""))
            if config.tma_store else "")
    if spec.gated:  # (no shares: schedule_for keeps a gated spec's split tiles to finishers)
        return gated.write_back(store_tile(spec, config) + smem)
    prefetch = BIAS_PREFETCH if bias_prefetch_call(spec) else ""
    return "\n".join([prefetch, store_tile(spec, config), schedule.shares_to_d(plan, spec, config), smem])


def unused_options_dropped(spec: GemmSpec, config: WgmmaConfig, plan: Schedule, arch: str) -> WgmmaConfig:
    """The config the kernel is rendered from: `config` without the options its schedule cannot use.

    overlap_epilogue hides the write-back of a *whole* tile under the next tile's first k-block; where
    every tile is split along K (no whole units: the long-K shapes) nothing overlaps, and the option
    only halves every wgmma. Rendered without it, 512x512x65536 in 128x256 tiles ran 76.8 -> 72.5 µs
    (bf16) and 131 -> 121 µs (tf32), 1024x1024x16384 59.6 -> 58.2 µs; 64x128 tiles (wgmma n64 halves)
    moved within ±2% (H100, 2026-11-27, bench/results/2026-11-27-h100-wgmma-split-only-overlap.md).
    The artifact keeps the requested config (the tuner's and the database's key)."""
    if not overlap_idle(config, plan.whole_units):
        return config
    plain = config.with_(overlap_epilogue=False)  # (never swap_ab: its write-back stores no slices)
    return config if rejections(plain, spec, arch) else plain


def _swapped_operands(args: tuple[str, ...], maps: tuple[TensorMapArg, ...], code: str, user_spec: GemmSpec
                      ) -> tuple[tuple[str, ...], tuple[TensorMapArg, ...], str]:
    """A swap_ab kernel's launch description in the user's terms: its first pointer (its A) is the user's B
    and its second the user's A, and so are the operands its tensor maps describe; the kernel text
    says so in its first lines."""
    other = {"A": "B", "B": "A"}
    args = tuple(other.get(name, name) for name in args)
    maps = tuple(replace(t, operand=other.get(t.operand, t.operand)) for t in maps)
    head, _, rest = code.partition("\n")
    note = (f"// swap-AB for {user_spec.short()}: this kernel computes Dᵀ = B·Aᵀ ({user_spec.n}x{user_spec.m}x"
            f"{user_spec.k}): its A is the\n// caller's B (the weights, N×K) and its B the caller's A (M×K); "
            f"D is written transposed, at col * M + row.")
    return args, maps, f"{head}\n{note}\n{rest}"


def render(spec: GemmSpec, config: WgmmaConfig, arch: str = "sm_90a", gpu: Geometry | None = None) -> KernelSource:
    """The kernel for `spec`; its persistent grid is sized for `gpu` (None: the arch table's GPU for
    `arch`, gemmtune.arch)."""
    problems = rejections(config, spec, arch)
    if problems:
        raise ConfigError("; ".join(f"{name}: {reason}" for name, reason in problems.items()))
    user_spec, spec = spec, kernel_spec(config, spec)  # with swap_ab the kernel computes Dᵀ = B·Aᵀ
    plan = schedule_for(spec, config, gpu or geometry(None, arch))
    requested, config = config, unused_options_dropped(spec, config, plan, arch)
    entry, maps = entry_name(user_spec) + ("_swap_ab" if config.swap_ab else ""), tensor_maps(spec, config)
    # Parameter order: the pointers (A, B, epilogue operands, D) as native kernels take them, then
    # the TMA descriptors the runtime builds from those pointers.
    args = ("A", "B", *(op.name for op in spec.epilogue.operands()), "D", *(t.name for t in maps))
    staged = staged_operands(spec) if config.stage_operands else ()
    code = _code(spec, config, plan, entry, maps) + (stage_kernel(entry, staged) if staged else "")
    if config != requested:
        head, _, rest = code.partition("\n")
        code = (f"{head}\n// (asked for: {requested.describe()}; every tile of this schedule is split along K, so no\n"
                f"// write-back can overlap a next tile: rendered without overlap_epilogue, whole-width wgmma)\n{rest}")
    if config.swap_ab:
        args, maps, code = _swapped_operands(args, maps, code, user_spec)
    return KernelSource(
        code=code, entry=entry, grid=(plan.workers * config.cluster_m, 1, 1),
        block=(config.threads, 1, 1), args=args, spec=user_spec, family=FAMILY, family_version=VERSION,
        config=requested.to_json(), dynamic_smem=config.smem_bytes(spec), tensor_maps=maps, arch_specific=True,
        co_resident=plan.tail_workers > 0,  # split tiles' finishers spin on their contributors' partial sums
        staged=staged, stage_kernel=bool(staged),
    )
