"""WgmmaConfig + GemmSpec → KernelSource: a Hopper GEMM written as readable CUDA with inline PTX.

The kernel is assembled from stages, each one function here: the tile scheduler, the TMA loads of
one k-block (producer), the wgmma of one k-block (consumer), the epilogue write-back, and the two
main loops (warp-specialized, or every warpgroup computing while thread 0 issues the copies).

Shared memory per stage: the A tile then the B tile, each as rows of 128 bytes (64 16-bit or 32
tf32 values of K, or 64 values of M/N when the operand is stored MN-major), in TMA's 128-byte
swizzle, which is also the layout wgmma's descriptors read without bank conflicts.
"""
from __future__ import annotations

from ...arch import Geometry, geometry
from ...errors import ConfigError
from ...kernel_source import KernelSource, TensorMapArg
from ...spec import GemmSpec
from . import ptx, schedule
from .schedule import Schedule, schedule_for
from .writeback import (FLOAT_VIEW, LOAD_C_TILE, epilogue_function, operand_decls, store_tile,
                        store_tile_smem)
from .config import FAMILY, INPUT_BYTES, OUT_BYTES, VERSION, WgmmaConfig, k_major, out_dtype, rejections

C_TYPES = {"bf16": "bf16_t", "fp16": "fp16_t", "tf32": "float", "fp32": "float"}
TMA_TYPES = {"bf16": "bf16", "fp16": "fp16", "tf32": "fp32"}
K_STEP = {"bf16": 16, "fp16": 16, "tf32": 8}  # K per wgmma instruction
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # setmaxnreg budgets: 128·40 + 256·232 ≤ 64K registers
CHUNK = 64  # 16-bit values in one 128-byte swizzled row: the MN width of one MN-major box


def entry_name(spec: GemmSpec) -> str:
    return f"wgmma_{spec.slug().removeprefix('gemm_')}"


# --- host-side descriptions ------------------------------------------------------------------------
def tensor_maps(spec: GemmSpec, config: WgmmaConfig) -> tuple[TensorMapArg, ...]:
    """TMA descriptors of A and B. A K-major operand is one box of bk × rows; an MN-major one is
    loaded as 64-wide chunks (a swizzled box row is at most 128 bytes)."""
    size, bk = INPUT_BYTES[spec.dtype], config.bk(spec.dtype)
    a_kmajor, b_kmajor = k_major(spec)
    kind = TMA_TYPES[spec.dtype]
    m, n, k = spec.m, spec.n, spec.k
    a = (TensorMapArg("tma_A", "A", kind, (k, m), (k * size,), (bk, config.bm)) if a_kmajor
         else TensorMapArg("tma_A", "A", kind, (m, k), (m * size,), (CHUNK, bk)))
    b_rows = config.bn // config.cluster_m  # each block of a cluster loads its share of B
    b = (TensorMapArg("tma_B", "B", kind, (k, n), (k * size,), (bk, b_rows)) if b_kmajor
         else TensorMapArg("tma_B", "B", kind, (n, k), (n * size,), (CHUNK, bk)))
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
def _constants(spec: GemmSpec, config: WgmmaConfig) -> str:
    a_kmajor, b_kmajor = k_major(spec)
    bk, size = config.bk(spec.dtype), INPUT_BYTES[spec.dtype]
    epi_bytes = ("constexpr int EPI_BYTES = 0;  // d_over_c: no store buffer (D is staged in C's ring slots)"
                 if config.d_in_ring_only else
                 "constexpr int EPI_BYTES = TMA_STORE ? TILE_TURNS * BM * SLICE_COLS * (int)sizeof(out_t) : 0;  // a buffer per turn")
    return f"""
// Problem and tile shape, baked in at generation time.
constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};
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
constexpr int OUT_CHUNK = 128 / sizeof(out_t), C_TILE_BYTES = BM * BN * (int)sizeof(out_t);
constexpr int C_BOX_ROWS = {config.c_box_rows};  // rows of one C box (TMA)
constexpr int C_BOXES_PER_KB = {1 if config.c_spread else "1 << 30"};  // C boxes issued per k-block (all at once)
// c_ring: C comes through the ring, one slice per slot, in the slot's larger operand region.
constexpr bool C_IN_A_REGION = A_TILE_BYTES >= B_TILE_BYTES;
constexpr int C_SLOT_BYTES = C_IN_A_REGION ? A_TILE_BYTES : B_TILE_BYTES;  // that region's stride, slot to slot
constexpr int C_SLICE_BYTES = BM * SLICE_COLS * (int)sizeof(out_t);
{epi_bytes}
// The C tile shares the buffer with the previous tile's D. Each consumer hands the buffer back at
// k-block C_RELEASE_KB of its next piece (by then its TMA store has long finished reading it, so
// nobody waits), and the producer fetches C at C_LOAD_KB, a full ring later: C is waiting in shared
// memory when the math ends, and neither side ever blocks on the other.
constexpr int C_RELEASE_KB = K_BLOCKS > 2 ? 2 : K_BLOCKS - 1;
constexpr int C_LOAD_KB = C_RELEASE_KB + STAGES < K_BLOCKS - 1 ? C_RELEASE_KB + STAGES : K_BLOCKS - 1;
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
// is counted on `bar`. A K-major operand is one box; an MN-major one is BM/64 (BN/64) boxes.
__device__ __forceinline__ void load_stage(const TmaDescriptor& tma_A, const TmaDescriptor& tma_B,
                                           in_t* a, in_t* b, u64* bar, int tile_m, int tile_n, int kb, int rank) {{
    mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
    if (A_K_MAJOR) {{
        tma_load_2d(a, &tma_A, bar, kb * BK, tile_m * BM);
    }} else {{
        #pragma unroll
        for (int chunk = 0; chunk < BM / 64; ++chunk)
            tma_load_2d(a + chunk * 64 * BK, &tma_A, bar, tile_m * BM + chunk * 64, kb * BK);
    }}
    // With a cluster, this block loads its share of B and multicasts it to every block of the pair.
    constexpr int B_SHARE = BN / CLUSTER_M;
    if (B_K_MAJOR) {{
        in_t* b_dst = b + rank * B_SHARE * BK;
        const int c0 = kb * BK, c1 = tile_n * BN + rank * B_SHARE;
        {b_call};
    }} else {{
        #pragma unroll
        for (int chunk = 0; chunk < B_SHARE / 64; ++chunk) {{
            in_t* b_dst = b + (rank * B_SHARE / 64 + chunk) * 64 * BK;
            const int c0 = tile_n * BN + rank * B_SHARE + chunk * 64, c1 = kb * BK;
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
    return f"""
// Consumer: this warpgroup's rows times the whole B tile for one k-block, BK / K_STEP wgmma per
// 64-row block. Descriptor steps: K-major operands advance K_STEP·{size} bytes along the swizzled
// row; MN-major ones advance K_STEP rows of 128 bytes. SBO = 1024: eight 128-byte rows per core
// matrix group; LBO (MN-major only) = BK·128: the distance between 64-wide chunks.
{head}
    constexpr int A_K_ADVANCE = A_K_MAJOR ? K_STEP * {size} : K_STEP * 128;
    constexpr int B_K_ADVANCE = B_K_MAJOR ? K_STEP * {size} : K_STEP * 128;
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


# --- CUDA text: the kernels ------------------------------------------------------------------------
def _signature(spec: GemmSpec, config: WgmmaConfig, entry: str, maps: tuple[TensorMapArg, ...]) -> str:
    cluster = f" __cluster_dims__({config.cluster_m}, 1, 1)" if config.cluster_m > 1 else ""
    params = ["const in_t* __restrict__ A", "const in_t* __restrict__ B", *operand_decls(spec.epilogue),
              "out_t* __restrict__ D", *(f"const __grid_constant__ TmaDescriptor {t.name}" for t in maps)]
    return (f'extern "C" __global__ void __launch_bounds__({config.threads}, 1){cluster}\n'
            f"{entry}({', '.join(params)})")


SMEM_SETUP = r"""
    // The ring of stages in dynamic shared memory, realigned to 1024 bytes: the 128-byte swizzle
    // repeats every 8 rows, and wgmma descriptors assume tiles start on that boundary.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    in_t* a_tiles = reinterpret_cast<in_t*>(smem);                          // STAGES × A tile
    in_t* b_tiles = reinterpret_cast<in_t*>(smem + STAGES * A_TILE_BYTES);  // STAGES × B tile
    unsigned char* out_buf = smem + STAGES * STAGE_BYTES;                   // epilogue tile (TMA store)
    u64* full = reinterpret_cast<u64*>(out_buf + EPI_BYTES);                // stage s has landed
    u64* empty = full + STAGES;                                             // stage s may be refilled
    u64* c_full = empty + STAGES;                                           // [turn] the C tile has landed
    u64* c_empty = c_full + TILE_TURNS;                                     // [turn] the epilogue tile is free
    u64* mainloop_done = c_empty + TILE_TURNS;                              // [turn] (ping-pong) a main loop ended
    constexpr int A_ELEMS = A_TILE_BYTES / sizeof(in_t), B_ELEMS = B_TILE_BYTES / sizeof(in_t);
"""


def _epilogue_args(spec: GemmSpec) -> str:
    return "".join(f", {op.name}" for op in spec.epilogue.operands())


def _consumer_overlapped(store_args: str, ring_c: bool, split: bool) -> str:
    """The consumers' loop with overlap_epilogue: every wgmma is half the tile wide, and a whole tile's
    write-back runs while the tensor cores work on the other half. The tile's last k-block is two
    groups (lower, then upper): the lower half is written back while the upper group runs, and the
    last k-block's ring slot goes back as soon as that group is done. The upper half is written back
    while the next piece's first k-block runs on the lower half (its own group, fresh), before that
    k-block's upper group starts. Pieces that end with a partial sum (split tails) end as in the
    plain loop.

    ptxas keeps wgmma asynchronous only where it can prove that no other instruction touches the
    registers of a wgmma in flight. A 256-wide wgmma over both halves serialised the whole kernel
    (C7511), as did a group in flight across the loop's back edge, or paths that meet with different
    numbers of groups in flight (C7514). So every wgmma is 128 wide; the loop is rotated (an
    iteration ends by starting the next piece's first k-block); every piece ends with no group in
    flight, and every k-block with one. No instruction zeroes the accumulator: each piece's first
    k-block overwrites it (fresh)."""
    def store(first: str, last: str, slot: str) -> str:
        args = store_args.replace("s, phase", slot) if ring_c else store_args
        return f"store_tile_smem<{first}, {last}>(acc, tile_m, tile_n, consumer, out_buf, tma_D{args});"
    skip_c_slot = """
                c_s = s; c_phase = phase;  // the upper half's C slices wait in the next slots
                for (int slice = 0; slice < STORE_SLICES / 2; ++slice)
                    if (++s == STAGES) { s = 0; phase ^= 1; }""" if ring_c else ""
    ring_slot = "\n        int c_s = 0; u32 c_phase = 0;  // the upper half's first C slot" if ring_c else ""
    upper = store("STORE_SLICES / 2", "STORE_SLICES", "c_s, c_phase")
    finish = store("0", "STORE_SLICES", "s, phase")
    if split:  # no `continue` here: the iteration must still start the next piece's first k-block
        finish = f"""if (!writes_d) store_partial(acc, consumer);  // a later K range of a split tile: its finisher adds these sums
                else {{
                    if (kb_end < K_BLOCKS) add_partials(acc, worker, rank, consumer, unit);  // the tile's other K ranges
                    {finish}
                }}"""
    def first_k_block(indent: str, between: list[str] = ()) -> str:
        """A piece's first k-block: the lower half's group, then `between`, then the upper half's."""
        lines = ["mbarrier_wait(&full[s], phase);",
                 "wgmma_fence();",
                 "mma_stage<0>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer, true);",
                 "wgmma_commit();",
                 *between,
                 "mma_stage<1>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer, true);",
                 "wgmma_commit();",
                 "wgmma_wait<1>();  // the lower group: one group in flight here, as after every k-block",
                 "previous = s;",
                 "if (++s == STAGES) { s = 0; phase ^= 1; }"]
        return f"\n{indent}".join(lines)
    upper_under_lower = ["if (whole) {  // the tile before's upper half, written back under the lower group",
                         f"    {upper}",
                         "}",
                         "wgmma_fence();"]
    return f"""
        setmaxnreg_inc<{CONSUMER_REGS}>();
        const int consumer = threadIdx.x / 128 - 1;
        int s = 0; u32 phase = 0;  // the ring position, continued piece after piece as the producer fills it
        int previous = 0;          // the ring slot of the last k-block issued
        float acc[M_BLOCKS][BN / 2];{ring_slot}
        bool more = next_piece(worker, cursor, unit, kb_begin, kb_end);
        if (more) {{  // the first piece's first k-block: the lower half's group, then the upper half's
            {first_k_block(" " * 12)}
        }}
        while (more) {{  // the piece's first k-block is in flight
            const bool writes_d = kb_begin == 0;  // holds the tile's first k-block: finishes the tile
            const bool whole = writes_d && kb_end == K_BLOCKS;  // a whole tile: its write-back overlaps
            int unit_m, tile_n;
            unit_coords(unit, unit_m, tile_n);
            const int tile_m = unit_m * CLUSTER_M + rank;
            for (int kb = kb_begin + 1; kb < (whole ? kb_end - 1 : kb_end); ++kb) {{
                mbarrier_wait(&full[s], phase);
                wgmma_fence();
                mma_stage<0>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
                mma_stage<1>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
                wgmma_commit();
                wgmma_wait<1>();
                release_stage(previous);
                previous = s;
                if (++s == STAGES) {{ s = 0; phase ^= 1; }}
            }}
            if (whole) {{
                if (kb_end - kb_begin > 1) {{  // the last k-block, a group per half
                    mbarrier_wait(&full[s], phase);
                    wgmma_fence();
                    mma_stage<0>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
                    wgmma_commit();
                    mma_stage<1>(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
                    wgmma_commit();
                    wgmma_wait<1>();  // all but the upper group
                    release_stage(previous);
                    previous = s;
                    if (++s == STAGES) {{ s = 0; phase ^= 1; }}
                }}  // (a one-k-block tile: its lower group is done, its upper group in flight)
                // The lower half, written back while the upper group runs.
                {store("0", "STORE_SLICES / 2", "s, phase")}{skip_c_slot}
                wgmma_wait<0>();  // the upper group, done under that store
                release_stage(previous);  // the last k-block's slot, free before the next tile loads
            }} else {{
                wgmma_wait<0>();
                release_stage(previous);
                {finish}
            }}
            more = next_piece(worker, cursor, unit, kb_begin, kb_end);
            if (more) {{  // the next piece's first k-block
                {first_k_block(" " * 16, upper_under_lower)}
            }} else if (whole) {{  // the worker's last tile
                {upper}
            }}
        }}"""


def _body_specialized(spec: GemmSpec, config: WgmmaConfig, plan: Schedule) -> str:
    epi_args = _epilogue_args(spec)
    split = plan.tail_workers > 0  # the tail's tiles are split along K
    sync = "cluster_sync()" if config.cluster_m > 1 else "__syncthreads()"
    rank = "(int)cluster_cta_rank()" if config.cluster_m > 1 else "0"
    ring_c = config.tma_store and spec.epilogue.reads_c and config.c_ring
    deferred_c = config.tma_store and spec.epilogue.reads_c and not ring_c
    load_c = ("""
                if (kb == c_at) {  // C lands early under this tile's main loop
                    mbarrier_wait(&c_empty[epi % TILE_TURNS], ((epi / TILE_TURNS) & 1) ^ 1);
                    mbarrier_arrive_expect_tx(&c_full[epi % TILE_TURNS], C_TILE_BYTES);
                }
                if (kb >= c_at && c_box < C_BOXES) {  // C_BOXES_PER_KB boxes a k-block, the rest at the last
                    const int last = kb == kb_end - 1 ? C_BOXES : min(C_BOXES, c_box + C_BOXES_PER_KB);
                    load_c_boxes(tma_C, out_buf, &c_full[epi % TILE_TURNS], tile_m, tile_n, epi % TILE_TURNS,
                                 c_box, last);
                    c_box = last;
                    if (c_box == C_BOXES) ++epi;
                }""" if deferred_c else "")
    c_at = ("""
            // Only a piece that writes D (it holds the tile's first k-block) needs C.
            const int c_at = kb_begin == 0 ? min(C_LOAD_KB, kb_end - 1) : K_BLOCKS;
            int c_box = 0;  // C boxes issued for this piece"""
            if deferred_c else "")
    others = "".join(f", {op.name}" for op in spec.epilogue.operands() if op.name != "C")
    over_c = ring_c and config.d_over_c  # D is written over C in its ring slots
    first_own = over_c and config.c_first_buffer  # ... the first slice in a buffer of its own
    pending = ", c_pending" if over_c else ""
    pending += ", &c_full[0], epi & 1" if first_own else ""
    ring_args = f", c_slots, full, empty, s, phase{pending}{others}"  # store_tile_smem's C-through-the-ring tail
    if ring_c:  # the epilogue walks on through the ring: C waits in the slots after the tile's k-blocks
        store = f"store_tile_smem(acc, tile_m, tile_n, consumer, out_buf, tma_D{ring_args});"
    elif config.tma_store:
        store = (f"store_tile_smem(acc, tile_m, tile_n, consumer, out_buf, tma_D, &c_full[turn], "
                 f"(epi / TILE_TURNS) & 1{others});")
    else:
        store = f"store_tile(acc, tile_m, tile_n, consumer, D{epi_args});"
    own_load_c = ("""
                    mbarrier_wait(&c_empty[0], (epi & 1) ^ 1);  // the last tile's first store has read the buffer
                    mbarrier_arrive_expect_tx(&c_full[0], C_SLICE_BYTES);
                    load_c_boxes(tma_C, out_buf, &c_full[0], tile_m, tile_n, 0, 0, C_BOXES, 0);
                    ++epi;""" if first_own else "")
    ring_load_c = (f"""
                if (kb_begin == 0) {{  // the tile's C, {"the first slice into its own buffer, the others " if first_own else ""}a slice per slot, a ring's depth ahead of its epilogue{own_load_c}
                    for (int slice = {1 if first_own else 0}; slice < STORE_SLICES; ++slice) {{
                        mbarrier_wait(&empty[s], phase ^ 1);
                        mbarrier_arrive_expect_tx(&full[s], C_SLICE_BYTES);
                        load_c_boxes(tma_C, c_slots + s * C_SLOT_BYTES, &full[s], tile_m, tile_n, 0, 0, C_BOXES, slice);
                        if (++s == STAGES) {{ s = 0; phase ^= 1; }}
                    }}
                }}""" if ring_c else "")
    prefetch = ring_c and config.c_l2_prefetch
    # Box b of the tile's C is asked of L2 2·(C_TILE_BOXES - b) k-blocks before the piece's end, where
    # the ring's loads of C come: early enough for them to hit L2, late enough that C does not sit
    # in L2 through the whole tile, pushing out A and B lines that other blocks still read. (Written
    # from kb and kb_end alone: the producer has 40 registers, and two more spilled.)
    prefetch_c = ("""
                    if (kb_begin == 0 && (kb_end - kb) % 2 == 0 && (kb_end - kb) / 2 <= C_TILE_BOXES)
                        prefetch_c_box(tma_C, tile_m, tile_n, C_TILE_BOXES - (kb_end - kb) / 2);""" if prefetch else "")
    if deferred_c:
        store += "\n            c_pending = true;  // the buffer goes back to the producer early in the next piece"
    hand_back = ("""
                if (kb == release_at && c_pending) {  // the previous tile's store has read the buffer:
                    if (threadIdx.x % 128 == 0) {     // it may take the next tile's C
                        tma_store_wait_read();
                        mbarrier_arrive(&c_empty[turn]);
                    }
                    c_pending = false;
                }""" if deferred_c else "")
    if over_c:  # the slot of the last slice D was written over goes back once its store has read it
        own_back = ("\n                    if (threadIdx.x % 128 == 0) mbarrier_arrive(&c_empty[0]);  // and the first slice's buffer"
                    if first_own else "")
        hand_back = f"""
                if (c_pending >= 0) {{  // under this piece's first wgmma, the last tile's last store
                    if (threadIdx.x % 128 == 0) tma_store_wait_read();  // has read its ring slot
                    __syncwarp();
                    release_ring_slot(&empty[c_pending]);{own_back}
                    c_pending = -1;
                }}"""
    release_at = ("""
            const int release_at = kb_begin + min(C_RELEASE_KB, kb_end - kb_begin - 1);"""
                  if deferred_c else "")
    drain = ("\n        if (threadIdx.x % 128 == 0) tma_store_wait_all();  // the last stores have left shared memory"
             if config.tma_store else "")
    turns = ("""
        // Ping-pong: consumer c multiplies the block's tiles c, c + 2, ...; the producer fills the
        // ring tile after tile, so one consumer's main loop starts as the other's ends, and each
        // epilogue runs under the other consumer's wgmma.""" if config.pingpong else "")
    # Barrier waits go by phase parity, which cannot tell a stage's lap n from lap n + 2: a consumer
    # may only wait on its tile's stages once the tile before (the other consumer's) has passed all
    # of its own, which also keeps the two main loops in turn.
    wait_turn = ("""
            if (piece > 0) mbarrier_wait(&mainloop_done[1 - turn], ((piece - 1) / TILE_TURNS) & 1);"""
                 if config.pingpong else "")
    end_turn = ("""
            if (threadIdx.x % 128 == 0) mbarrier_arrive(&mainloop_done[turn]);  // the other consumer's turn"""
                if config.pingpong else "")
    partial = ("""
            if (!writes_d) {  // a later K range of a split tile: its finisher adds these sums
                store_partial(acc, consumer);
                continue;
            }
            if (kb_end < K_BLOCKS) add_partials(acc, worker, rank, consumer, unit);  // the tile's other K ranges"""
               if split else "")
    # serpentine: odd pieces walk their k-blocks backwards (the sum is the same; only the order the
    # producer loads them in changes, and the consumers take stages in ring order either way).
    serpentine = ("""
                const bool backwards = cursor % 2 == 0;  // this piece is the worker's 2nd, 4th, ..."""
                  if config.serpentine else "")
    k_block = "backwards ? kb_begin + kb_end - 1 - kb : kb" if config.serpentine else "kb"
    c_slots = ("""
    unsigned char* c_slots = reinterpret_cast<unsigned char*>(C_IN_A_REGION ? a_tiles : b_tiles);  // slot 0's C region"""
               if ring_c else "")
    consumer_loop = f"""
        // Consumer warpgroups: wait for a stage, multiply it, release the one before (one wgmma
        // group stays in flight so the tensor cores never wait on the release), then write back.{turns}
        setmaxnreg_inc<{CONSUMER_REGS}>();
        const int consumer = threadIdx.x / 128 - 1;
        const int turn = PINGPONG ? consumer : 0;  // whose epilogue buffer and C barriers
        {"bool c_pending = false;" if deferred_c else "int c_pending = -1;  // a ring slot still read by a store of D" if over_c else ""}
        int s = 0; u32 phase = 0;  // the ring position, continued piece after piece as the producer fills it
        int epi = 0;  // pieces before this one that wrote D (each used the C tile and buffer turn)
        for (int piece = 0; next_piece(worker, cursor, unit, kb_begin, kb_end); ++piece) {{
            const bool writes_d = kb_begin == 0;  // holds the tile's first k-block: finishes the tile
            if (piece % TILE_TURNS != turn) {{  // the other ping-pong consumer's tile: skip its k-blocks
                s += kb_end - kb_begin;
                phase ^= (s / STAGES) & 1;
                s %= STAGES;
                epi += writes_d;
                continue;
            }}
            int unit_m, tile_n;
            unit_coords(unit, unit_m, tile_n);
            const int tile_m = unit_m * CLUSTER_M + rank;
            float acc[M_BLOCKS][BN / 2];
            #pragma unroll
            for (int mb = 0; mb < M_BLOCKS; ++mb)
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;
            int previous = -1;{wait_turn}{release_at}
            for (int kb = kb_begin; kb < kb_end; ++kb) {{
                mbarrier_wait(&full[s], phase);
                wgmma_fence();
                mma_stage(acc, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, consumer);
                wgmma_commit();
                wgmma_wait<1>();{hand_back}
                if (previous >= 0) release_stage(previous);
                previous = s;
                if (++s == STAGES) {{ s = 0; phase ^= 1; }}
            }}
{end_turn}
            wgmma_wait<0>();
            release_stage(previous);{partial}
            {store}
            ++epi;
        }}"""
    if config.overlap_epilogue:
        # Without the ring an overlapped epilogue reads no C (constraint), so c_full is passed unused.
        store_args = ring_args if ring_c else f", &c_full[0], 0{others}"
        consumer_loop = _consumer_overlapped(store_args, ring_c, split)
    return f"""{SMEM_SETUP}
    const int rank = {rank};   // this block's place in its cluster (0 without clusters)
    const int worker = blockIdx.x / CLUSTER_M;
    if (threadIdx.x == 0) {{
        tma_prefetch_descriptor(&tma_A);
        tma_prefetch_descriptor(&tma_B);
        for (int s = 0; s < STAGES; ++s) {{
            mbarrier_init(&full[s], 1);                           // the producer's expect_tx arrival
            mbarrier_init(&empty[s], STAGE_READERS * CLUSTER_M);  // every reader in every block that shares B
        }}
        for (int turn = 0; turn < TILE_TURNS; ++turn) {{
            mbarrier_init(&c_full[turn], 1);
            mbarrier_init(&c_empty[turn], CONSUMERS / TILE_TURNS);
            if (PINGPONG) mbarrier_init(&mainloop_done[turn], 1);
        }}
        fence_barrier_init();
    }}
    {sync};

    auto release_stage = [&](int s) {{ release_ring_slot(&empty[s]); }};{c_slots}
    int cursor = 0;  // pieces of its work this thread has taken (next_piece)
    int unit, kb_begin, kb_end;

    if (threadIdx.x < 128) {{
        // Producer warpgroup: one thread issues every copy; the others only give back registers.
        setmaxnreg_dec<{PRODUCER_REGS}>();
        if (threadIdx.x == 0) {{
            int s = 0; u32 phase = 0;
            int epi = 0;  // pieces so far that end in an epilogue (whose C tile is loaded)
            while (next_piece(worker, cursor, unit, kb_begin, kb_end)) {{
                int unit_m, tile_n;
                unit_coords(unit, unit_m, tile_n);
                const int tile_m = unit_m * CLUSTER_M + rank;{c_at}{serpentine}
                for (int kb = kb_begin; kb < kb_end; ++kb) {{{prefetch_c}
                    mbarrier_wait(&empty[s], phase ^ 1);  // passes at once on the first lap
                    load_stage(tma_A, tma_B, a_tiles + s * A_ELEMS, b_tiles + s * B_ELEMS, &full[s],
                               tile_m, tile_n, {k_block}, rank);
                    if (++s == STAGES) {{ s = 0; phase ^= 1; }}{load_c}
                }}{ring_load_c}
            }}
        }}
    }} else {{{consumer_loop}{drain}
    }}
    {"cluster_sync();  // no block leaves while its pair may still arrive on its barriers" if config.cluster_m > 1 else ""}
"""


def _body_unified(spec: GemmSpec, config: WgmmaConfig) -> str:
    epi = _epilogue_args(spec)
    return f"""{SMEM_SETUP}
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
    store_tile(acc, tile_m, tile_n, consumer, D{epi});
"""


def _code(spec: GemmSpec, config: WgmmaConfig, plan: Schedule, entry: str, maps: tuple[TensorMapArg, ...]) -> str:
    body = _body_specialized(spec, config, plan) if config.specialized else _body_unified(spec, config)
    epilogue = "" if spec.epilogue.is_identity else spec.epilogue.cuda_preamble() + epilogue_function(spec.epilogue)
    return "\n".join([
        f"// gemmtune {FAMILY} v{VERSION}: {spec.short()}, {config.describe()}",
        "// TMA loads into a ring of 128-byte-swizzled shared-memory stages, wgmma from shared memory",
        "// into fp32 registers, the epilogue applied in registers and stored to D.",
        ptx.helpers(spec.dtype, config.bn, halves=config.overlap_epilogue), FLOAT_VIEW, _constants(spec, config), SCHEDULER,
        schedule.cuda(plan),
        _load_stage(config.cluster_m > 1), _mma_stage(spec, config), epilogue, store_tile(spec),
        (store_tile_smem(spec, config) + (LOAD_C_TILE if spec.epilogue.reads_c else ""))
        if config.tma_store else "",
        _signature(spec, config, entry, maps) + " {", body, "}",
    ])


def render(spec: GemmSpec, config: WgmmaConfig, arch: str = "sm_90a", gpu: Geometry | None = None) -> KernelSource:
    """The kernel for `spec`; its persistent grid is sized for `gpu` (None: the arch table's GPU for
    `arch`, gemmtune.arch)."""
    problems = rejections(config, spec, arch)
    if problems:
        raise ConfigError("; ".join(f"{name}: {reason}" for name, reason in problems.items()))
    plan = schedule_for(spec, config, gpu or geometry(None, arch))
    entry, maps = entry_name(spec), tensor_maps(spec, config)
    # Parameter order: the pointers (A, B, epilogue operands, D) as native kernels take them, then
    # the TMA descriptors the runtime builds from those pointers.
    args = ("A", "B", *(op.name for op in spec.epilogue.operands()), "D", *(t.name for t in maps))
    return KernelSource(
        code=_code(spec, config, plan, entry, maps), entry=entry, grid=(plan.workers * config.cluster_m, 1, 1),
        block=(config.threads, 1, 1), args=args, spec=spec, family=FAMILY, family_version=VERSION,
        config=config.to_json(), dynamic_smem=config.smem_bytes(spec), tensor_maps=maps, arch_specific=True,
        co_resident=plan.tail_workers > 0,  # split tiles' finishers spin on their contributors' partial sums
    )
