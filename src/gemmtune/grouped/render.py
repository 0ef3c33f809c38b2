"""GroupedConfig + GroupedSpec -> KernelSource: every group's GEMM in one persistent launch on sm_90a.

Warpgroup 0's thread 0 walks the block's tiles (schedule.py) and TMA-copies each k-block's A and B
tiles into a ring of STAGES slots (rows of 128 bytes in the 128-byte swizzle wgmma reads). The
consumer warpgroups multiply them (wgmma m64nBNk16, fp32 sums; each its rows of every tile, or in
ping-pong alternate tiles whole) and store their rows from registers below the group's end row: the
A tile's rows past it (the next group's, or zeros) are multiplied for nothing and never stored. No
TMA store: its box would write them.

SwiGLU (spec.swiglu): the weights are (G, 2N, K), gate rows [0, N) and up rows [N, 2N). A tile's B is
loaded as two boxes of BN / 2 rows, gate rows from n0 and up rows from N + n0, one after the other in
the slot, so the one wgmma's accumulator columns j < BN / 2 are gate and j + BN / 2 up of the same
output column n0 + j, held by the same thread: the write-back stores silu(gate) * up, BN / 2 columns a
tile. The masked layout changes only the scheduler's reading of group rows (schedule.py).

Clusters of two (config.cluster = 2): the blocks of a pair take the same m-tile and adjacent tile columns
(schedule.py hands out pairs). A's tile is the same for both: each producer loads half its rows and multicasts
them into the same slot of both blocks, so a slot of A is written by both producers and may be refilled only
once both blocks' consumers have released it: consumers arrive on the `empty` barrier of both blocks
(parts/cluster_ring.py), and each `full` barrier expects both halves of A plus the block's own B. Where the
column count is odd, the last pair's second block has no tile: its producer still loads its half of A (its
`full` expecting A alone) and its consumers wait for each slot and release it without multiplying.

fp8 promotion (config.promote_every, tensor/rowwise scales): wgmma sums a chunk of k-blocks into fresh `sums` and
the consumer adds them into the fp32 `acc` after each chunk (PROMOTED_LOOP), as block scales do every k-block
(BLOCK_SCALED_LOOP). Both wait for their last wgmma before promoting, so the tensor cores idle meanwhile. With
config.promote_overlap the sums alternate between two buffers: the next k-block's (or chunk's) first wgmma is issued
into the other buffer before the one before is promoted, so the CUDA cores' promotion runs under it
(BLOCK_SCALED_OVERLAP_LOOP, PROMOTED_OVERLAP_LOOP); block scales are loaded a k-block before their promotion.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arch import geometry
from ..kernel_source import KernelSource, TensorMapArg
from ..kernels.parts.cluster_ring import RELEASE_SLOT
from ..kernels.parts.epilogue import SWIGLU, CArg, Operands, VectorArg, epilogue_function
from ..kernels.parts.floats import FLOAT_VIEW, TO_OUT
from ..kernels.parts.ring import RING
from ..kernels.parts.staged_rows import STAGED_ROWS, staged_pair_writes
from ..kernels.parts.writeback import CRead, OddEdge, PairFragment, PairOutput, pair_io, pair_stores
from ..kernels.wgmma import ptx
from ..kernels.wgmma.consumer import CONSUMER_REGS
from ..kernels.wgmma.producer import PRODUCER_REGS
from ..errors import ConfigError
from .config import GroupedConfig, default_config, rejections
from .schedule import scheduler
from .spec import BLOCK, GroupedSpec

FAMILY, VERSION = "grouped_wgmma", "1"
ROW_BYTES = 128  # a k-block's row in shared memory: one 128-byte swizzle span (64 16-bit or 128 fp8 values of K)
C_TYPES = {"bf16": "bf16_t", "fp16": "fp16_t", "fp32": "float", "e4m3": "unsigned char", "e5m2": "unsigned char"}
K_STEPS = {"bf16": 16, "fp16": 16, "e4m3": 32, "e5m2": 32}  # K of one wgmma instruction


def bk(spec: GroupedSpec) -> int:
    """K per k-block: the values of one 128-byte row."""
    return ROW_BYTES // spec.element_bytes

TMA_3D = r"""
// TMA: one box of a 3-D tensor (coordinates innermost first) into shared memory, as tma_load_2d.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* map, u64* bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
"""


def entry_name(spec: GroupedSpec, config: GroupedConfig) -> str:
    band = f"b{config.band_m}" if config.band_m else ""
    pingpong = "pp" if config.pingpong else ""
    staged = "st" if config.staged_store else ""
    cluster = f"cl{config.cluster}" if config.cluster > 1 else ""
    promote = f"pr{config.promote_every}" if config.promoted else ""
    overlap = ("ovs" if config.overlap_static else "ov") if config.promote_overlap else ""
    return (f"{spec.slug()}_{config.bm}x{config.bn}s{config.stages}c{config.consumers}"
            f"{pingpong}{staged}{band}{cluster}{promote}{overlap}")


def out_bn(spec: GroupedSpec, config: GroupedConfig) -> int:
    """Columns of D a tile writes: BN, or BN / 2 with SwiGLU (the other half of the wgmma's are up)."""
    return config.bn // 2 if spec.swiglu else config.bn


def swiglu_rejections(config: GroupedConfig, spec: GroupedSpec) -> dict[str, str]:
    """The limit SwiGLU adds to config.rejections: staged rows of BN / 2 columns need 8 16-byte pieces a row
    (the staging swizzle XORs a piece index with the row's low 3 bits), so BN >= 128 there."""
    if spec.swiglu and config.staged_store and config.bn < 128:
        return {"swiglu_staged": f"swiglu stages rows of BN / 2 = {config.bn // 2} columns; staged_store needs BN >= 128"}
    return {}


def tensor_maps(spec: GroupedSpec, config: GroupedConfig) -> tuple[TensorMapArg, TensorMapArg]:
    """A: a 2-D map over (K, total_m); B (weights stored (G, N, K), SwiGLU (G, 2N, K)): a 3-D map over
    (K, rows, G), so a box never reads the next group's weights (rows past the last arrive as zeros). A
    SwiGLU tile loads two boxes of BN / 2 rows, its gate and its up rows. With clusters of two, A's box is half
    the tile's rows: each block of the pair loads one half for both."""
    kind, row, rows, block_k = spec.dtype, spec.k * spec.element_bytes, spec.weight_rows, bk(spec)
    a = TensorMapArg("tma_A", "A", kind, (spec.k, spec.total_m), (row,), (block_k, config.a_share_rows))
    b = TensorMapArg("tma_B", "B", kind, (spec.k, rows, spec.groups), (row, row * rows), (block_k, out_bn(spec, config), 1))
    return a, b


def _constants(spec: GroupedSpec, config: GroupedConfig) -> str:
    return f"""
// Problem and tile shape, baked in at generation time (the groups' rows come at run time: offs or counts).
constexpr int GROUPS = {spec.groups}, TOTAL_M = {spec.total_m}, N = {spec.n}, K = {spec.k};
constexpr int BM = {config.bm}, BN = {config.bn}, BK = {bk(spec)};   // block tile; BK values of K = one 128-byte row
constexpr int IN_BYTES = {spec.element_bytes};                   // bytes of one A or B value
constexpr int STAGES = {config.stages};                  // shared-memory ring depth
constexpr int CONSUMERS = {config.consumers};            // warpgroups issuing wgmma
// Ping-pong: the consumers take alternate tiles of the block, each tile whole, so one's epilogue runs
// while the other's wgmma run. Otherwise both work on every tile, each on its own rows.
constexpr bool PINGPONG = {str(config.pingpong).lower()};
constexpr int ROWS_PER_CONSUMER = {config.rows_per_consumer}, M_BLOCKS = ROWS_PER_CONSUMER / 64;
constexpr int K_STEP = {K_STEPS[spec.dtype]};                               // K of one wgmma instruction
constexpr int K_BLOCKS = (K + BK - 1) / BK;              // the last block's tail is TMA zero-fill
constexpr int N_BLOCKS = (N + {BLOCK} - 1) / {BLOCK};                // fp8 block scales: {BLOCK}-row blocks of a group's weights
{_tile_columns(spec)}
constexpr int A_TILE_BYTES = BM * 128, B_TILE_BYTES = BN * 128, STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;
constexpr int STAGING_BYTES = {config.staging_bytes // max(config.consumers, 1)};  // a consumer's staged rows (0: stored from registers)
typedef {C_TYPES[spec.dtype]} in_t;
typedef {C_TYPES[spec.out_dtype]} out_t;{_cluster_constants(config)}{_promotion_constants(config)}
"""


def _promotion_constants(config: GroupedConfig) -> str:
    if not config.promoted:
        return ""
    return f"""
// fp8 promotion: wgmma sums PROMOTE_EVERY k-blocks ({config.promote_every * 128} values of K) in its reduced-precision
// accumulator, then the consumer adds them into fp32 registers
constexpr int PROMOTE_EVERY = {config.promote_every};"""


def _cluster_constants(config: GroupedConfig) -> str:
    if config.cluster == 1:
        return ""
    return f"""
// Clusters: CLUSTER blocks take one m-tile and CLUSTER adjacent tile columns; each loads A_SHARE_ROWS rows of
// the shared A tile and multicasts them to every block of the cluster (CLUSTER_MASK).
constexpr int CLUSTER = {config.cluster};
constexpr int PAIRS_N = (TILES_N + CLUSTER - 1) / CLUSTER;  // scheduled columns a tile row: pairs of tile columns
constexpr int A_SHARE_ROWS = BM / CLUSTER, A_SHARE_BYTES = A_SHARE_ROWS * 128;  // 1024-byte multiples: whole swizzle spans
constexpr unsigned short CLUSTER_MASK = (1 << CLUSTER) - 1;"""


def _tile_columns(spec: GroupedSpec) -> str:
    if not spec.swiglu:
        return """constexpr int OUT_BN = BN;                               // columns of D a tile writes
constexpr int TILES_N = (N + OUT_BN - 1) / OUT_BN;"""
    return """// SwiGLU: weights (G, 2N, K), gate rows [0, N), up rows [N, 2N). B's tile is two boxes of BN / 2 rows
// (gate rows n0.., up rows N + n0..), so accumulator columns j and j + BN / 2 are gate and up of one output
// column, in the same thread: a tile writes BN / 2 columns of D.
constexpr int OUT_BN = BN / 2;                           // columns of D a tile writes
constexpr int TILES_N = (N + OUT_BN - 1) / OUT_BN;"""


LOAD_B = """
    tma_load_3d(slot + A_TILE_BYTES, &tma_B, full, kb * BK, tile.tile_n * BN, tile.group);"""
LOAD_B_SWIGLU = """
    tma_load_3d(slot + A_TILE_BYTES, &tma_B, full, kb * BK, tile.tile_n * OUT_BN, tile.group);                   // gate
    tma_load_3d(slot + A_TILE_BYTES + OUT_BN * 128, &tma_B, full, kb * BK, N + tile.tile_n * OUT_BN, tile.group);  // up"""
LOAD_STAGE_HEAD = """
__device__ __forceinline__ void load_stage(const TmaDescriptor& tma_A, const TmaDescriptor& tma_B, unsigned char* slot,
                                           u64* full, const GroupTile& tile, int kb) {
    mbarrier_arrive_expect_tx(full, STAGE_BYTES);
    tma_load_2d(slot, &tma_A, full, kb * BK, tile.row_begin + tile.tile_m * BM);"""

LOAD_STAGE = """
// Producer: k-block `kb` of `tile` into a ring slot. TMA counts whole boxes (zero-filled edges too).""" + \
    LOAD_STAGE_HEAD + LOAD_B + "\n}\n"

LOAD_STAGE_SWIGLU = """
// Producer: k-block `kb` of `tile` into a ring slot, B as its gate rows then its up rows (OUT_BN each,
// 1024-byte multiples: the second box starts a swizzle pattern of its own). The last tile's gate box runs
// past row N into up rows: those columns are past N in D and never stored. TMA counts whole boxes.""" + \
    LOAD_STAGE_HEAD + LOAD_B_SWIGLU + "\n}\n"

LOAD_STAGE_CLUSTER = """
// Producer (clusters): k-block `kb` of `tile` into a ring slot of every block of the cluster. The A tile is
// the cluster's (one group, the same rows): this block loads its A_SHARE_ROWS of them and multicasts them to
// the same slot, and the same `full` barrier, of each block. B is this block's own tile{swiglu}.
// `full` expects the whole A tile (every block's share) and this block's B, or A alone where the block has no
// tile (tile_n == TILES_N, the last pair of an odd column count). A peer's share may land before this block's
// expect_tx: the phase completes only after that arrival too, and it cannot be the phase before (the producer
// waited on `empty`, which every block's consumers release only after their wait on this slot's `full`).
__device__ __forceinline__ void load_stage(const TmaDescriptor& tma_A, const TmaDescriptor& tma_B, unsigned char* slot,
                                           u64* full, const GroupTile& tile, int kb, int rank) {{
    const bool has_b = tile.tile_n < TILES_N;
    mbarrier_arrive_expect_tx(full, has_b ? STAGE_BYTES : A_TILE_BYTES);
    tma_load_2d_multicast(slot + rank * A_SHARE_BYTES, &tma_A, full, kb * BK,
                          tile.row_begin + tile.tile_m * BM + rank * A_SHARE_ROWS, CLUSTER_MASK);
    if (!has_b) return;{b}
}}
"""


def _load_stage(spec: GroupedSpec, config: GroupedConfig) -> str:
    if config.cluster == 1:
        return LOAD_STAGE_SWIGLU if spec.swiglu else LOAD_STAGE
    swiglu = "\n// (SwiGLU: its gate rows, then its up rows)" if spec.swiglu else ""
    return LOAD_STAGE_CLUSTER.format(swiglu=swiglu, b=LOAD_B_SWIGLU if spec.swiglu else LOAD_B)



def _mma_stage(spec: GroupedSpec, config: GroupedConfig) -> str:
    transposes = "" if spec.fp8 else "<0, 0>"  # fp8 wgmma reads K-major operands only: no transpose flags
    return f"""
// Consumer: this warpgroup's rows of A times the B tile for one k-block. Both operands K-major: a
// step along K is K_STEP·IN_BYTES bytes into the swizzled row; SBO = 1024 (8 rows of 128 bytes).
__device__ __forceinline__ void mma_stage(float (&acc)[M_BLOCKS][BN / 2], const unsigned char* slot, int consumer) {{
    const unsigned char* a_rows = slot + consumer * ROWS_PER_CONSUMER * 128;
    const unsigned char* b_rows = slot + A_TILE_BYTES;
    #pragma unroll
    for (int ks = 0; ks < BK / K_STEP; ++ks) {{
        const u64 desc_b = smem_descriptor(b_rows + ks * K_STEP * IN_BYTES, BK * 128, 1024);
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb) {{
            const u64 desc_a = smem_descriptor(a_rows + mb * 64 * 128 + ks * K_STEP * IN_BYTES, BK * 128, 1024);
            wgmma_m64n{config.bn}{transposes}(acc[mb], desc_a, desc_b);
        }}
    }}
}}
"""


# apply_epilogue takes the bias element as a value; the write-back reads it from the group's row of bias.
OPERANDS = Operands(CArg.VALUE, VectorArg.VALUE)
OUTPUT = PairOutput(OPERANDS, CRead.VIEW, bias="group_bias", odd_edge=OddEdge.PAIR_OR_FIRST)


def _fragment(spec: GroupedSpec, config: GroupedConfig) -> PairFragment:
    """wgmma's fragment from the group's first row; 256-column tiles read the bias in place (staged, it spills).
    SwiGLU: the pairs of the first OUT_BN columns, each with its up pair OUT_BN columns on (OUT_BN / 8 j's)."""
    values = ("acc[mb][4 * j + 2 * half]", "acc[mb][4 * j + 2 * half + 1]")
    if spec.fp8 and spec.scaling != "block":  # the product of fp8 codes times A's and B's scales, before the epilogue
        values = tuple(f"{v} * {scale}" for v, scale in zip(values, _scale_factors(spec)))
    if spec.swiglu:
        up = ("acc[mb][4 * (j + OUT_BN / 8) + 2 * half]", "acc[mb][4 * (j + OUT_BN / 8) + 2 * half + 1]")
        values = (f"swiglu({values[0]}, {up[0]})", f"swiglu({values[1]}, {up[1]})")
    return PairFragment(
        loops=(("mb", "M_BLOCKS"), ("half", "2"), ("j", "OUT_BN / 8")),
        row="tile.row_begin + tile.tile_m * BM + consumer * ROWS_PER_CONSUMER + mb * 64 + warp * 16 + lane / 4 + 8 * half",
        col="tile.tile_n * OUT_BN + j * 8 + 2 * (lane % 4)",
        values=values, row_depth=2, col_loop="j" if config.bn <= 128 else "", row_loops=("mb", "half"))


def _scale_params(spec: GroupedSpec) -> str:
    return ",\n                                           const float* __restrict__ scale_a, const float* __restrict__ scale_b" \
        if spec.fp8 else ""


def _scale_setup(spec: GroupedSpec) -> str:
    """fp8: the tile's scale (tensor) or its group's row of column scales (rowwise), before the stores."""
    if not spec.fp8 or spec.scaling == "block":  # block scales are applied in the main loop
        return ""
    if spec.scaling == "tensor":
        return "\n    const float scale = scale_a[0] * scale_b[0];  // A's and B's one scale each"
    return "\n    const float* __restrict__ group_scale_b = scale_b + (size_t)tile.group * N;  // this group's column scales"


def _scale_factors(spec: GroupedSpec) -> tuple[str, str]:
    """The factors of a pair (row, col), (row, col + 1): rows and columns past the edge read the last scale
    (their outputs are not stored)."""
    if spec.scaling == "tensor":
        return "scale", "scale"
    row = "scale_a[min(row, TOTAL_M - 1)]"
    return (f"{row} * group_scale_b[min(col, N - 1)]", f"{row} * group_scale_b[min(col + 1, N - 1)]")


def _store_tile(spec: GroupedSpec, config: GroupedConfig) -> str:
    gemm, fragment = spec.as_gemm(), _fragment(spec, config)
    pieces = epilogue_function(spec.epilogue, OPERANDS, out_dtype=spec.out_dtype) + (SWIGLU if spec.swiglu else "") + TO_OUT
    bias = ("\n    const FloatView<out_t> group_bias{bias + (size_t)tile.group * N};  // this group's row of bias"
            if spec.has_bias else "")
    staging = ",\n                                           unsigned char* staging, int barrier" if config.staged_store else ""
    # store_tile's signature and first lines, the same for every way of storing
    head = f"""__device__ __forceinline__ void store_tile(const float (&acc)[M_BLOCKS][BN / 2], const GroupTile& tile, int consumer,
                                           out_t* __restrict__ D, const out_t* __restrict__ bias{_scale_params(spec)}{staging}) {{
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int M = tile.row_end;{bias}{_scale_setup(spec)}"""
    row0 = "const int row0 = tile.row_begin + tile.tile_m * BM + consumer * ROWS_PER_CONSUMER, col0 = tile.tile_n * OUT_BN;"
    if config.staged_store:
        return (pieces + STAGED_ROWS + f"""
// One consumer's rows of a tile to D through its staging buffer (parts/staged_rows.py): 16-byte stores
// of whole rows. M is the group's end row: rows past it are not copied. `barrier`: this warpgroup's.
{head}
    {row0}
    named_barrier(barrier, 128);  // the buffer's rows of the tile before are copied out
{staged_pair_writes(gemm, fragment, OUTPUT, "staging", "row0", "col0", "OUT_BN")}
    named_barrier(barrier, 128);  // every pair of the tile is in the buffer
    copy_staged_rows<ROWS_PER_CONSUMER, OUT_BN>(staging, D, row0, col0, M, threadIdx.x % 128);
}}
""")
    return (pieces + pair_io(gemm, OUTPUT) + f"""
// One consumer's rows of a tile to D. M is the group's end row: the pair stores skip rows past it.
{head}
{pair_stores(gemm, fragment, OUTPUT)}}}
""")


def _staging_args(config: GroupedConfig) -> str:
    """store_tile's staging buffer (after the ring, one per consumer) and named barrier (1 + consumer)."""
    if not config.staged_store:
        return ""
    return ", ring_base + STAGES * STAGE_BYTES + consumer * STAGING_BYTES, 1 + consumer"


def _registers(config: GroupedConfig, side: str) -> str:
    """setmaxnreg with two consumers only: 256 threads may hold 255 registers each already."""
    if config.consumers == 1:
        return ""
    return (f"setmaxnreg_dec<{PRODUCER_REGS}>();  // to the consumers"
            if side == "producer" else f"setmaxnreg_inc<{CONSUMER_REGS}>();")


MAIN_LOOP = """            #pragma unroll 1
            for (int kb = 0; kb < K_BLOCKS; ++kb) {
                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();
                mma_stage(acc, ring_base + ring.s * STAGE_BYTES, part);
                wgmma_commit();
                wgmma_wait<1>();  // one group in flight: the k-block before is done reading its slot
                RELEASE_PREVIOUS
                previous = ring.s;
                ring.advance();
            }"""

# fp8 block scales: two-level accumulation. A k-block (128 values of K, one scale block) is summed by wgmma into
# `sums` alone, then scaled by its A row scale times its B block scale and added into acc on the CUDA cores, so
# the tensor cores' reduced-precision accumulation never runs across blocks of different scale.
# Both block-scaled loops: where this thread's A scales (its two fragment rows) and the tile's B scales start.
BLOCK_SCALE_POINTERS = """            // this thread's two rows of the fragment (lane / 4 and 8 below it) and the tile's column block
            const int fragment_row = tile.row_begin + tile.tile_m * BM + part * ROWS_PER_CONSUMER
                                     + (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4;
            const float* __restrict__ a_scales = scale_a + (size_t)min(fragment_row, TOTAL_M - 1) * K_BLOCKS;
            const float* __restrict__ a_scales_8 = scale_a + (size_t)min(fragment_row + 8, TOTAL_M - 1) * K_BLOCKS;
            const float* __restrict__ b_scales = scale_b + ((size_t)tile.group * N_BLOCKS + tile.tile_n) * K_BLOCKS;
"""

BLOCK_SCALED_LOOP = """            float sums[BN / 2];  // one k-block's sums (M_BLOCKS == 1: 64 rows a consumer)
""" + BLOCK_SCALE_POINTERS + """            #pragma unroll 1
            for (int kb = 0; kb < K_BLOCKS; ++kb) {
                const float scale_row = a_scales[kb], scale_row_8 = a_scales_8[kb], scale_block = b_scales[kb];
                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();
                mma_stage_sums(sums, ring_base + ring.s * STAGE_BYTES, part, false);  // fresh sums
                wgmma_commit();
                wgmma_wait<0>();  // the sums are read below
                RELEASE_CURRENT
                ring.advance();
                const float upper = scale_row * scale_block, lower = scale_row_8 * scale_block;
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i)  // fragment float i is row lane / 4 + 8 * ((i / 2) % 2)
                    acc[0][i] = fmaf(sums[i], (i & 2) ? lower : upper, acc[0][i]);
            }"""


# fp8 tensor/rowwise scales, promoted (config.promote_every > 0): Hopper's fp8 wgmma accumulates with about 14
# bits, so one sum over the whole K loses precision as K grows (git show 78435b0:bench/results/2026-11-29-h200-fp8-error.md). wgmma
# sums a chunk of PROMOTE_EVERY k-blocks into fresh `sums`, pipelined as MAIN_LOOP (one wgmma group in flight, the
# slot before released); at the chunk's end the consumer waits for the last group, releases its slot and adds the
# sums into the fp32 acc on the CUDA cores. No scaling here: the tensor or row/column scales multiply the tile in
# the epilogue, as without promotion. Slots are released once each, in ring order.
PROMOTED_LOOP = """            float sums[M_BLOCKS][BN / 2];  // a chunk's sums, at the end the tile's (M_BLOCKS == 1: 64 rows a consumer)
            #pragma unroll 1
            for (int chunk = 0; chunk < K_BLOCKS; chunk += PROMOTE_EVERY) {
                const int chunk_end = min(chunk + PROMOTE_EVERY, K_BLOCKS);  // the last chunk may be shorter
                #pragma unroll 1
                for (int kb = chunk; kb < chunk_end; ++kb) {
                    mbarrier_wait(&full[ring.s], ring.phase);
                    wgmma_fence();  // also orders the adds below before the next chunk's first wgmma overwrites sums
                    mma_stage_sums(sums[0], ring_base + ring.s * STAGE_BYTES, part, kb > chunk);  // a chunk starts fresh
                    wgmma_commit();
                    wgmma_wait<1>();  // one group in flight: the k-block before is done reading its slot
                    RELEASE_PREVIOUS
                    previous = ring.s;
                    ring.advance();
                }
                wgmma_wait<0>();  // promotion: the chunk's last k-block is done, its sums are read below
                RELEASE_LAST
                previous = -1;  // the chunk's slots are all released: the next chunk's first has none before it
                // The same fp32 adds either way; the last chunk's sums take acc and the tile is stored from them,
                // wgmma's own registers as without promotion (stored from acc, ptxas spilled in the rowwise
                // epilogue with a bias)
                if (chunk_end < K_BLOCKS) {
                    #pragma unroll
                    for (int i = 0; i < BN / 2; ++i) acc[0][i] += sums[0][i];
                } else {
                    #pragma unroll
                    for (int i = 0; i < BN / 2; ++i) sums[0][i] += acc[0][i];
                }
            }"""


# fp8 block scales, overlapped (config.promote_overlap): two `sums` buffers in turn, k-block kb into sums[kb % 2].
# Each k-block's wgmma is issued before the one before is waited for (wgmma_wait<1>), so the CUDA cores promote
# k-block kb - 1 while kb runs on the tensor cores. Each buffer is a fixed set of registers (a buffer picked at run
# time would live in local memory): the first k-block is peeled, the loop takes pairs (sums[1] then sums[0]) and an
# even count's last k-block follows it (K_BLOCKS is a constant, so that test is compiled away). Each pair ends with
# wgmma_wait<0>: where a wgmma stayed in flight across the loop's back edge and its buffer was promoted in the next
# iteration, ptxas (CUDA 13 NVRTC) serialised every wgmma of the kernel (C7514), so the tensor cores idle once a
# pair, between its last wgmma's end and the next pair's first issue (no promotion in that gap). A k-block's
# scales are loaded at its issue and read at its promotion a k-block later, under that wgmma.
BLOCK_SCALED_OVERLAP_LOOP = """            float sums[2][BN / 2];  // k-block kb's sums in sums[kb % 2] (M_BLOCKS == 1: 64 rows a consumer)
            float scale_row[2], scale_row_8[2], scale_block[2];  // and its scales: loaded at its issue, read at its promotion
""" + BLOCK_SCALE_POINTERS + """            {
STEP_FIRST
            }
            #pragma unroll 1
            for (int kb = 1; kb + 1 < K_BLOCKS; kb += 2) {
STEP_ODD
STEP_EVEN
                wgmma_wait<0>();  // nothing in flight across the loop's back edge: see above (C7514)
            }
            if (K_BLOCKS % 2 == 0) {  // an even count: its last k-block, into sums[1]
STEP_LAST
            }
            wgmma_wait<0>();  // the last k-block's sums are read below
            RELEASE_LAST
            previous = -1;  // every slot of the tile is released
            if (K_BLOCKS % 2 == 0)  // the last k-block's buffer
                promote_block(acc[0], sums[1], scale_row[1] * scale_block[1], scale_row_8[1] * scale_block[1]);
            else
                promote_block(acc[0], sums[0], scale_row[0] * scale_block[0], scale_row_8[0] * scale_block[0]);"""

BLOCK_SCALED_STEP = """                // k-block KB into sums[CUR]ABOUT_PREV
                scale_row[CUR] = a_scales[KB], scale_row_8[CUR] = a_scales_8[KB], scale_block[CUR] = b_scales[KB];
                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();  // also orders the reads of sums[CUR] at its last promotion before wgmma overwrites it
                mma_stage_sums(sums[CUR], ring_base + ring.s * STAGE_BYTES, part, false);  // fresh sums
                wgmma_commit();
                wgmma_wait<1>();  // only KB in flight: the k-block before is summed and done reading its slot
                RELEASE_PREVIOUS
                previous = ring.s;
                ring.advance();"""
PROMOTE_PREV = """
                promote_block(acc[0], sums[PREV], scale_row[PREV] * scale_block[PREV], scale_row_8[PREV] * scale_block[PREV]);"""


def _block_scaled_overlap_loop(config: GroupedConfig, release_previous: str) -> str:
    def step(cur: int, kb: str, promote: bool = True) -> str:  # (RELEASE_PREVIOUS first: it contains PREV)
        about = "; the one before, in sums[PREV], is promoted under its wgmma" if promote else ""
        text = BLOCK_SCALED_STEP.replace("RELEASE_PREVIOUS", release_previous).replace("ABOUT_PREV", about)
        text += PROMOTE_PREV if promote else ""
        return text.replace("CUR", str(cur)).replace("PREV", str(1 - cur)).replace("KB", kb)
    return (BLOCK_SCALED_OVERLAP_LOOP.replace("STEP_FIRST", step(0, "0", promote=False))
            .replace("STEP_ODD", step(1, "kb")).replace("STEP_EVEN", step(0, "kb + 1"))
            .replace("STEP_LAST", step(1, "K_BLOCKS - 1")).replace("RELEASE_LAST", _release(config, "previous")))


# fp8 block scales: a k-block's sums into the fp32 accumulators, times its rows' A scales and the B block scale.
PROMOTE_BLOCK = """
// fp8 block scales: one k-block's sums into the fp32 accumulators, scaled by this thread's two rows' A scales
// times the tile's B block scale (upper: row lane / 4, lower: 8 rows below).
__device__ __forceinline__ void promote_block(float (&acc)[BN / 2], const float (&sums)[BN / 2], float upper, float lower) {
    #pragma unroll
    for (int i = 0; i < BN / 2; ++i)  // fragment float i is row lane / 4 + 8 * ((i / 2) % 2)
        acc[i] = fmaf(sums[i], (i & 2) ? lower : upper, acc[i]);
}
"""


# fp8 tensor/rowwise scales, promoted and overlapped (config.promote_overlap): chunk c of PROMOTE_EVERY k-blocks is
# summed into sums[c % 2]. The chunks are pipelined as MAIN_LOOP (one wgmma group in flight, the slot before
# released) across their boundaries too: at a chunk's first k-block, once wgmma_wait<1> says the chunk before is
# complete, the consumer adds its buffer into acc while this k-block runs on the tensor cores. Each buffer is a
# fixed set of registers: the loop takes pairs of chunks and an odd count's last chunk follows it (a constant
# test), each pair ending with wgmma_wait<0> (ptxas serialised wgmma otherwise: BLOCK_SCALED_OVERLAP_LOOP), so of
# two chunk boundaries one overlaps its promotion and the other waits, without the adds in the wait. The last chunk's sums take acc and the tile is stored from them,
# as PROMOTED_LOOP.
PROMOTED_OVERLAP_LOOP = """            float sums[2][M_BLOCKS][BN / 2];  // chunk c's sums in sums[c % 2] (M_BLOCKS == 1: 64 rows a consumer)
            const int chunks = (K_BLOCKS + PROMOTE_EVERY - 1) / PROMOTE_EVERY;  // constants: folded
            #pragma unroll 1
            for (int chunk = 0; chunk + 1 < chunks; chunk += 2) {
CHUNK_EVEN
CHUNK_ODD
                wgmma_wait<0>();  // nothing in flight across the loop's back edge (C7514, as BLOCK_SCALED_OVERLAP_LOOP)
            }
            if (chunks % 2) {  // an odd count: its last chunk, into sums[0]
CHUNK_LAST
            }
            wgmma_wait<0>();  // the last k-block: the last chunk's sums are read below
            RELEASE_LAST
            previous = -1;  // every slot of the tile is released
            const int last_sums = (chunks - 1) % 2;
            #pragma unroll
            for (int i = 0; i < BN / 2; ++i) sums[last_sums][0][i] += acc[0][i];"""

PROMOTED_CHUNK = """                {  // chunk CHUNK_INDEX into sums[CUR]; the chunk before, in sums[PREV], is promoted under its first wgmma
                    const int begin = (CHUNK_INDEX) * PROMOTE_EVERY, end = min(begin + PROMOTE_EVERY, K_BLOCKS);  // the last may be shorter
                    #pragma unroll 1
                    for (int kb = begin; kb < end; ++kb) {
                        mbarrier_wait(&full[ring.s], ring.phase);
                        wgmma_fence();  // also orders the promotion's reads of sums[CUR] before wgmma overwrites them
                        mma_stage_sums(sums[CUR][0], ring_base + ring.s * STAGE_BYTES, part, kb > begin);  // a chunk starts fresh
                        wgmma_commit();
                        wgmma_wait<1>();  // one group in flight: the k-block before (at kb == begin, the chunk before) is done
                        RELEASE_PREVIOUS
                        previous = ring.s;
                        ring.advance();
                        if (begin > 0 && kb == begin) {  // promotion: the chunk before, on the CUDA cores under this wgmma
                            #pragma unroll
                            for (int i = 0; i < BN / 2; ++i) acc[0][i] += sums[PREV][0][i];
                        }
                    }
                }"""


def _promoted_overlap_loop(config: GroupedConfig, release_previous: str) -> str:
    def chunk(cur: int, index: str) -> str:  # (RELEASE_PREVIOUS first: it contains PREV)
        return (PROMOTED_CHUNK.replace("RELEASE_PREVIOUS", release_previous).replace("CHUNK_INDEX", index)
                .replace("CUR", str(cur)).replace("PREV", str(1 - cur)))
    return (PROMOTED_OVERLAP_LOOP.replace("CHUNK_EVEN", chunk(0, "chunk")).replace("CHUNK_ODD", chunk(1, "chunk + 1"))
            .replace("CHUNK_LAST", chunk(0, "chunks - 1")).replace("RELEASE_LAST", _release(config, "previous")))


# fp8 tensor/rowwise scales, promoted and overlapped with both buffers named statically (config.overlap_static):
# chunk c of PROMOTE_EVERY k-blocks is summed into `sums` (c even) or `sums_odd` (c odd), two arrays rather than an
# indexed one. Every k-block is one step (mbarrier wait, wgmma, commit, wgmma_wait<1>, release the slot before), so
# one wgmma group stays in flight across every boundary, chunk boundaries and the loop's back edge included: no
# wgmma_wait<0> until the tile's last k-block. A chunk's first step starts its buffer fresh (wgmma's scale-d 0: no
# zeroing) and, once its wgmma_wait<1> says the chunk before is complete, adds that chunk's buffer into acc while
# its own wgmma runs. Steps are unrolled (PROMOTE_EVERY and the last chunk's length are constants); the runtime loop
# runs from inside one odd chunk to inside the next (the rest of chunk c, chunk c + 1, the first step of c + 2), so
# the group in flight at its back edge is continued by the next wgmma on the same buffer, as in MAIN_LOOP: where the
# back edge fell between chunks (the next wgmma on the other buffer), ptxas (CUDA 13 NVRTC) serialised every wgmma
# (C7514), hence promote_every >= 2. K_BLOCKS is a constant, so the `if`s on the chunk count fold away.
# fence_operand pins each promotion between its wait and the next k-block (without it the compiler moved the adds
# to the next promotion, two buffers' registers live at once: spills and serialised wgmma). The last chunk's
# buffer takes acc, copied into `sums` where it is `sums_odd`, and the tile is stored from `sums`.
PROMOTED_STATIC_LOOP = """            // chunk c's sums: even c in sums, odd c in sums_odd (M_BLOCKS == 1: 64 rows a consumer)
            float sums[M_BLOCKS][BN / 2], sums_odd[M_BLOCKS][BN / 2];
            const int chunks = (K_BLOCKS + PROMOTE_EVERY - 1) / PROMOTE_EVERY;  // constants: folded
            const int last_blocks = K_BLOCKS - (chunks - 1) * PROMOTE_EVERY;  // the last chunk's k-blocks (1 .. PROMOTE_EVERY)
CHUNK_FIRST
            if (chunks >= 2) {  // chunk 1's first k-block
FIRST_ODD
            }
            #pragma unroll 1
            for (int chunk = 1; chunk + 2 < chunks; chunk += 2) {  // from inside odd chunk `chunk` to inside chunk + 2
REST_ODD
CHUNK_EVEN
FIRST_ODD
            }
            if (chunks >= 2 && chunks % 2 == 0) {  // the last chunk (odd) has begun: its other k-blocks
REST_LAST_ODD
            }
            if (chunks >= 3 && chunks % 2 == 1) {  // chunk chunks - 2 (odd) has begun: its other k-blocks, then the last
REST_ODD
LAST_EVEN
            }
            wgmma_wait<0>();  // the tile's last k-block: the last chunk's sums are read below
            RELEASE_LAST
            previous = -1;  // every slot of the tile is released
            if (chunks % 2 == 0) {  // the last chunk's sums plus acc, into sums: the tile is stored from them
                fence_operand(sums_odd[0]);
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) sums[0][i] = sums_odd[0][i] + acc[0][i];
            } else {
                fence_operand(sums[0]);
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) sums[0][i] += acc[0][i];
            }"""

STATIC_STEP = """                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();  // also orders the promotion's reads of BUF before wgmma overwrites it
                mma_stage_sums(BUF[0], ring_base + ring.s * STAGE_BYTES, part, ADD);
                wgmma_commit();
                wgmma_wait<1>();  // one group in flight: the k-block before is done (and its slot read)
                RELEASE_PREVIOUS
                previous = ring.s;
                ring.advance();"""

STATIC_PROMOTE = """
                fence_operand(PREV[0]);  // the reads below stay after the wait
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[0][i] += PREV[0][i];  // under this chunk's first wgmma
                fence_operand(acc[0]);  // ... and here, not moved down to the next promotion"""


def _first_step(buf: str, prev: str | None, release_previous: str) -> str:
    """A chunk's first k-block into `buf`, fresh, then (`prev`) the chunk before added into acc under it."""
    about = f"                // a chunk's first k-block, into {buf} fresh" + (f"; {prev} (the chunk before) promoted" if prev else "")
    step = STATIC_STEP.replace("RELEASE_PREVIOUS", release_previous).replace("BUF", buf).replace("ADD", "false")
    return about + "\n" + step + (STATIC_PROMOTE.replace("PREV", prev) if prev else "")


def _rest_steps(buf: str, blocks: str, release_previous: str) -> str:
    """A chunk's k-blocks after its first (`blocks` in all, a constant), accumulated into `buf`, unrolled."""
    step = STATIC_STEP.replace("RELEASE_PREVIOUS", release_previous).replace("BUF", buf).replace("ADD", "true")
    return (f"                #pragma unroll  // a chunk's other k-blocks, into {buf}\n"
            f"                for (int j = 1; j < {blocks}; ++j) {{\n"
            + step.replace("\n                ", "\n                    ").replace("                mbarrier", "                    mbarrier", 1)
            + "\n                }")


def _promoted_static_loop(config: GroupedConfig, release_previous: str) -> str:
    def first(buf: str, prev: str | None) -> str:
        return _first_step(buf, prev, release_previous)

    def rest(buf: str, blocks: str) -> str:
        return _rest_steps(buf, blocks, release_previous)
    return (PROMOTED_STATIC_LOOP
            .replace("CHUNK_FIRST", first("sums", None) + "\n" + rest("sums", "(chunks == 1 ? last_blocks : PROMOTE_EVERY)"))
            .replace("FIRST_ODD", first("sums_odd", "sums"))
            .replace("REST_ODD", rest("sums_odd", "PROMOTE_EVERY"))
            .replace("CHUNK_EVEN", first("sums", "sums_odd") + "\n" + rest("sums", "PROMOTE_EVERY"))
            .replace("REST_LAST_ODD", rest("sums_odd", "last_blocks"))
            .replace("LAST_EVEN", first("sums", "sums_odd") + "\n" + rest("sums", "last_blocks"))
            .replace("RELEASE_LAST", _release(config, "previous")))


# fence_operand: an empty asm that reads and writes each register of a sums buffer, ordered (volatile) with the
# wgmma asm around it, so the compiler cannot move the buffer's reads before the wgmma_wait that completes it.
FENCE_OPERAND = """
// The registers of `sums` as read and written here (no instruction): a volatile asm stays in order with the wgmma
// waits, so reads of a buffer just completed are not moved above its wgmma_wait (ptxas would serialise wgmma).
__device__ __forceinline__ void fence_operand(float (&sums)[BN / 2]) {
    #pragma unroll
    for (int i = 0; i < BN / 2; ++i) asm volatile("" : "+f"(sums[i]) :: "memory");
}
"""


def _release(config: GroupedConfig, slot: str, after: str = "") -> str:
    """A consumer warpgroup's release of ring slot `slot` (when `after` holds): one arrival on this block's
    `empty`, or with clusters one on `empty` of every block of the cluster (parts/cluster_ring.py)."""
    if config.cluster == 1:
        return f"if ({after}threadIdx.x % 128 == 0) mbarrier_arrive(&empty[{slot}]);"
    condition = f"if ({after[:-len(' && ')]}) " if after else ""
    return f"{condition}release_slot(&empty[{slot}]);"


def _main_loop(spec: GroupedSpec, config: GroupedConfig) -> str:
    release_previous = _release(config, "previous", "previous >= 0 && ")
    if spec.scaling == "block" and config.promote_overlap:
        return _block_scaled_overlap_loop(config, release_previous)
    if spec.scaling == "block":
        return BLOCK_SCALED_LOOP.replace("RELEASE_CURRENT", _release(config, "ring.s"))
    if config.promoted and config.overlap_static:
        return _promoted_static_loop(config, release_previous)
    if config.promoted and config.promote_overlap:
        return _promoted_overlap_loop(config, release_previous)
    if config.promoted:
        return PROMOTED_LOOP.replace("RELEASE_PREVIOUS", release_previous).replace("RELEASE_LAST", _release(config, "previous"))
    return MAIN_LOOP.replace("RELEASE_PREVIOUS", release_previous)


def _stored(config: GroupedConfig) -> str:
    """The registers a consumer stores its tile from: acc, or with promotion the last chunk's sums plus acc (with
    promote_overlap, the buffer the last chunk went to)."""
    if config.promoted:
        return "sums[last_sums]" if config.promote_overlap and not config.overlap_static else "sums"
    return "acc"


def _uses_sums(spec: GroupedSpec, config: GroupedConfig) -> bool:
    """Whether the main loop sums k-blocks apart from acc: block scales (one k-block) or promotion (a chunk)."""
    return spec.scaling == "block" or config.promoted


def _mma_stage_sums(spec: GroupedSpec, config: GroupedConfig) -> str:
    """A k-block's wgmma into `sums`, added to them (`add`) or overwriting them (a block scale's or a promotion
    chunk's first k-block: the first K step overwrites, so no zeroing runs beside wgmma in flight)."""
    if not _uses_sums(spec, config):
        return ""
    promote = PROMOTE_BLOCK if spec.scaling == "block" and config.promote_overlap else ""
    promote += FENCE_OPERAND if config.overlap_static else ""
    return ptx.wgmma_function(spec.dtype, config.bn, fresh=True) + promote + f"""
__device__ __forceinline__ void mma_stage_sums(float (&sums)[BN / 2], const unsigned char* slot, int consumer, bool add) {{
    const unsigned char* a_rows = slot + consumer * ROWS_PER_CONSUMER * 128;
    const unsigned char* b_rows = slot + A_TILE_BYTES;
    #pragma unroll
    for (int ks = 0; ks < BK / K_STEP; ++ks) {{
        const u64 desc_b = smem_descriptor(b_rows + ks * K_STEP * IN_BYTES, BK * 128, 1024);
        const u64 desc_a = smem_descriptor(a_rows + ks * K_STEP * IN_BYTES, BK * 128, 1024);
        wgmma_m64n{config.bn}(sums, desc_a, desc_b, ks > 0 || add);
    }}
}}
"""


@dataclass(frozen=True)
class Walk:
    """How the kernel's warpgroups walk its work, as text spliced into _kernel: a block's tiles, or with
    clusters the cluster's pairs of tiles (one block, one tile column of each)."""

    attribute: str = ""  # after __launch_bounds__
    empty_init: str = "mbarrier_init(&empty[s], PINGPONG ? 1 : CONSUMERS);  // the consumers that read slot s"
    sync: str = "__syncthreads();"
    rank: str = ""  # declarations after `tiles`
    units: str = "int t = blockIdx.x; t < tiles; t += gridDim.x"
    tile: str = "group_tile(group_end, tile_end, t)"
    load_args: str = ""  # load_stage's arguments after kb
    idle: str = ""  # a consumer's k-blocks of a unit without a tile of this block
    end: str = ""


CLUSTER_IDLE = """
            if (tile.tile_n == TILES_N) {  // no tile column for this block (an odd TILES_N's last pair): its
                // slots still take the pair's A, both shares: wait for each and release it in every block
                for (int kb = 0; kb < K_BLOCKS; ++kb) {
                    mbarrier_wait(&full[ring.s], ring.phase);
                    release_slot(&empty[ring.s]);
                    ring.advance();
                }
                if (PINGPONG && threadIdx.x % 128 == 0) mbarrier_arrive(&mainloop_done[consumer]);  // the other's turn
                continue;
            }"""


def walk(config: GroupedConfig) -> Walk:
    if config.cluster == 1:
        return Walk()
    return Walk(
        attribute=f" __cluster_dims__({config.cluster}, 1, 1)",
        empty_init="mbarrier_init(&empty[s], (PINGPONG ? 1 : CONSUMERS) * CLUSTER);  // its readers in every block",
        sync="cluster_sync();  // every block's barriers are initialised before a peer's copy or arrival reaches them",
        rank="\n    const int rank = (int)cluster_cta_rank();  // this block's tile column of each pair",
        units="int t = blockIdx.x / CLUSTER; t < tiles; t += gridDim.x / CLUSTER",
        tile="cluster_tile(group_end, tile_end, t, rank)", load_args=", rank", idle=CLUSTER_IDLE,
        end="\n    cluster_sync();  // no block leaves while a peer may still multicast into it or arrive on its barriers")


def _late(config: GroupedConfig) -> bool:
    """Whether the consumer finds its tile after the main loop: overlap_static without clusters, whose main loop
    reads nothing of it, so its five registers are free beside acc and two sums buffers (found before the loop,
    ptxas spilled 8-88 bytes at some K, rowwise scales or a bias). Clusters need it first (a block without a tile)."""
    return config.overlap_static and config.cluster == 1


def _early_tile(config: GroupedConfig, w: Walk) -> str:
    return "" if _late(config) else f"            const GroupTile tile = {w.tile};\n"


def _late_tile(config: GroupedConfig, w: Walk) -> str:
    if not _late(config):
        return ""
    return f"            const GroupTile tile = {w.tile};  // found here, not live across the main loop\n"


def _kernel(spec: GroupedSpec, config: GroupedConfig, entry: str) -> str:
    bias = "const out_t* __restrict__ bias, " if spec.has_bias else ""
    scales = "const float* __restrict__ scale_a, const float* __restrict__ scale_b, " if spec.fp8 else ""
    rows_in = spec.rows_operand  # offs (cumulative ends), or counts in the masked layout
    w = walk(config)
    return f"""
extern "C" __global__ void __launch_bounds__({config.threads}, 1){w.attribute}
{entry}(const int* __restrict__ {rows_in}, {bias}{scales}out_t* __restrict__ D,
        const __grid_constant__ TmaDescriptor tma_A, const __grid_constant__ TmaDescriptor tma_B) {{
    __shared__ int group_end[GROUPS], tile_end[GROUPS];  // filled by scan_groups (schedule.py)
    __shared__ alignas(8) u64 full[STAGES];   // slot s has landed
    __shared__ alignas(8) u64 empty[STAGES];  // slot s may be refilled (each consumer reading it arrives once)
    // Ping-pong: consumer c's main loop is done (all its slots landed). The other waits for it before its
    // own, so its waits on `full` are never a lap ahead of the producer (parity alone cannot tell laps apart).
    __shared__ alignas(8) u64 mainloop_done[2];
    // The ring, realigned to 1024 bytes: where wgmma descriptors assume the swizzle pattern starts.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* ring_base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {{
        tma_prefetch_descriptor(&tma_A);
        tma_prefetch_descriptor(&tma_B);
        for (int s = 0; s < STAGES; ++s) {{
            mbarrier_init(&full[s], 1);
            {w.empty_init}
        }}
        mbarrier_init(&mainloop_done[0], 1);
        mbarrier_init(&mainloop_done[1], 1);
        fence_barrier_init();
    }}
    if (threadIdx.x < 32) scan_groups({rows_in}, group_end, tile_end);  // read on the device: no host sync
    {w.sync}
    // tiles (every group's tiles, this launch{" (pairs of them)" if config.cluster > 1 else ""}) is read in each warpgroup after its
    // setmaxnreg: a value live across setmaxnreg went to local memory (ptxas, rowwise fp8 overlap_static: 4 bytes).{w.rank}
    if (warpgroup == 0) {{
        {_registers(config, "producer")}
        const int tiles = tile_end[GROUPS - 1];
        if (threadIdx.x == 0) {{
            Ring ring;
            for ({w.units}) {{
                const GroupTile tile = {w.tile};
                for (int kb = 0; kb < K_BLOCKS; ++kb) {{
                    mbarrier_wait(&empty[ring.s], ring.phase ^ 1);  // passes at once on the first lap
                    load_stage(tma_A, tma_B, ring_base + ring.s * STAGE_BYTES, &full[ring.s], tile, kb{w.load_args});
                    ring.advance();
                }}
            }}
        }}
    }} else {{
        {_registers(config, "consumer")}
        const int tiles = tile_end[GROUPS - 1];
        const int consumer = warpgroup - 1;
        const int part = PINGPONG ? 0 : consumer;  // which rows of its tiles this warpgroup multiplies
        Ring ring;  // walks the ring in step with the producer, tile after tile
        int turn = 0;  // the block's tiles so far: in ping-pong, consumer c takes those with turn % 2 == c
        for ({w.units}, ++turn) {{
            if (PINGPONG && turn % 2 != consumer) {{
                ring.skip(K_BLOCKS);  // the other consumer's tile: its k-blocks fill the slots in between
                continue;
            }}
{_early_tile(config, w)}            float acc[M_BLOCKS][BN / 2];
            #pragma unroll
            for (int mb = 0; mb < M_BLOCKS; ++mb)
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;
            int previous = -1;  // the slot of the k-block before: released once its wgmma are done
            // Ping-pong: the block's tile before was the other consumer's, its ((turn - 1) / 2)-th.
            if (PINGPONG && turn > 0) mbarrier_wait(&mainloop_done[1 - consumer], ((turn - 1) / 2) & 1);{w.idle}
            // Not unrolled: with one or two k-blocks a tile, ptxas unrolled this loop and then waited on the
            // wgmma in flight before the epilogue's use of acc (C7519, warpgroup.arrive injected).
{_main_loop(spec, config)}
            if (PINGPONG && threadIdx.x % 128 == 0) mbarrier_arrive(&mainloop_done[consumer]);  // the other's turn
            wgmma_wait<0>();
            {_release(config, "previous", "previous >= 0 && ")}
{_late_tile(config, w)}            store_tile({_stored(config)}, tile, part, D, {"bias" if spec.has_bias else "nullptr"}{", scale_a, scale_b" if spec.fp8 else ""}{_staging_args(config)});
        }}
    }}{w.end}
}}
"""


def code(spec: GroupedSpec, config: GroupedConfig, entry: str) -> str:
    capacity = spec.capacity if spec.masked_layout else 0
    return (ptx.helpers(spec.dtype, config.bn) + TMA_3D + FLOAT_VIEW + _constants(spec, config) + RING
            + (RELEASE_SLOT if config.cluster > 1 else "")
            + scheduler(config.band_m, capacity, config.cluster) + _load_stage(spec, config)
            + _mma_stage(spec, config) + _mma_stage_sums(spec, config) + _store_tile(spec, config)
            + _kernel(spec, config, entry))


def render(spec: GroupedSpec, config: GroupedConfig | None = None, sm_count: int | None = None) -> KernelSource:
    """The kernel on `sm_count` blocks (None: the sm_90a table's SMs; with clusters, the whole clusters that
    always fit at once); ConfigError names a broken limit."""
    config = config or default_config(spec)
    problems = {**rejections(config, spec), **swiglu_rejections(config, spec)}
    if problems:
        raise ConfigError(f"grouped config {config.to_json()}: " + "; ".join(problems.values()))
    entry = entry_name(spec, config)
    # The launch names the group-rows argument offs in both layouts (kernel_source.POINTER_ARGS); the masked
    # kernel calls its parameter counts.
    args = ("offs", *(("bias",) if spec.has_bias else ()), *(("scale_a", "scale_b") if spec.fp8 else ()), "D", "tma_A", "tma_B")
    # A persistent grid: a block per SM, with clusters as many whole clusters as always fit at once
    grid = geometry(None, "sm_90a", sm_count).cluster_grid(config.cluster)
    return KernelSource(code=code(spec, config, entry), entry=entry, grid=(grid, 1, 1), block=(config.threads, 1, 1),
                        args=args, spec=spec.as_gemm(), family=FAMILY, family_version=VERSION,
                        config=config.to_json(), dynamic_smem=config.dynamic_smem,
                        tensor_maps=tensor_maps(spec, config), arch_specific=True)
