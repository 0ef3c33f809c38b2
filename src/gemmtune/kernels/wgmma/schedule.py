"""The wgmma kernel's work schedule: how many blocks run, and which (unit, k-range) pieces each takes.

A *unit* is one output tile per block of a cluster; a *worker* is one cluster (one block without
clusters). Plain: worker w takes whole units w, w + W, w + 2W, ...

With split_tail, the units of the last, partial wave (every unit, when they do not fill the GPU)
are spread over the workers along K, so the tail fills the GPU. The tail's k-blocks, unit after
unit, are cut into TAIL_WORKERS contiguous shares, one per worker:

- Where the tail is at most half the workers, the shares are equal splits of each unit (SPLITS
  ranges per unit): 64 tiles of a 1024×1024×16384 GEMM run on 128 blocks, not 64, and 320 tiles on
  an H100's 132 SMs run as two full waves and a third in halves (2.5 tile-times instead of 3).
  Every piece of the tail then starts at one of SPLITS k offsets, so the blocks running together
  share their A and B k-slabs in L2 like a plain wave does.
- Where it is more than half (say 34 units left on 66 pairs of blocks), no equal split fits, and the
  shares are even runs of k-blocks that may cross from one unit into the next (stream-K on the last
  wave only): 15.5 tile-times instead of 16 for 1024 units on 66 workers, where that shrinks the
  last wave enough (SHARE_GAIN).

Stream-K over the whole problem was tried first (every worker an even, contiguous share of all
k-blocks, so no tail at all): its shares start at scattered k offsets, the blocks running together
then read disjoint k-slabs of A and B, L2 stops holding them, and it was 30-85% slower on the large
shapes (git show dcdd80f:bench/results/2026-11-23-h100-wgmma-variants.md, run 7). Confined to the last wave, the
scattered slabs are those of the few units left.

Where a split unit has fewer than SCATTER_SPLITS pieces, the worker whose share holds its first
k-block is its finisher: it adds the fp32 partial sums of the unit's other pieces, which the next
workers store with a flag, and runs the epilogue. A share is at most one unit long, so it holds at
most two pieces: the end of one unit (stored as a partial, run first) and the start of the next
(which it finishes). Each worker stores at most one partial, so one slot per block is enough, and a
finisher waits only on later workers' first pieces, which wait on nothing.

Where each split unit has SCATTER_SPLITS pieces or more (equal splits), no piece finishes it alone:
every piece, the one holding its first k-block included, stores its partial tile, then sums a share
of the tile over all of them, runs the epilogue on that share and stores it to D (`sum_share_to_d`).
The pieces then wait on each other, which the grid's co-residency (checked at load) allows. (Until
2026-11-26 the contributors stored their sums and a finisher waited for them, read them back and
wrote D: two more L2 round trips one after another; measured side by side in
git show 982ee83:bench/results/2026-11-26-h100-wgmma-exchange-cost.md; that code: `git show 751506f:src/gemmtune/kernels/wgmma/schedule.py`.)

This module is the Python twin of the CUDA scheduler (`next_piece` in the generated code): the
tests walk it to check that every k-block of every tile is done exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...arch import Geometry, geometry
from ...spec import GemmSpec
from ..config_base import ceil_div
from ..parts.flags import ACQ_REL_ADD, ACQUIRE_RELEASE
from ..parts.writeback import PairFragment, pair_stores
from .config import IN_STEP_BLOCKS, WgmmaConfig, splits_fp32
from .writeback import operand_decls, output_of

# k-blocks a split piece must at least hold: fewer, and storing and gathering the partial tile
# (bm·bn·4 bytes through L2) costs more than the iterations it spreads (H100: 1000^3 in 128x256
# tiles split in two 8-k-block halves ran 17.6 µs against 17.0 whole).
MIN_SHARE = 16


# Even shares (a tail over half the workers) only where they shorten the last wave by this many
# k-blocks and by a quarter at least: their partial-sum exchange costs about MIN_SHARE k-blocks, and
# their pieces start at scattered k offsets, so the last wave's blocks stop sharing k-slabs in L2
# (H100, 128x256 pairs on 66 workers: 8192^3 bf16 saved 62 of 128 k-blocks and ran 1.9% faster;
# 4096^3 would save 7 of 64 and ran 4.5% slower, tf32 4096^3 15 of 128 and 19% slower).
SHARE_GAIN = 2 * MIN_SHARE


# Equal splits into this many pieces or more reduce their partial tiles in parallel (each piece a
# share of the tile over all of them): a finisher adding them one by one reads each through one SM,
# one L2 round trip and one flag after another (H100, 96x96x65536 bf16 in 64x64 tiles split 32
# ways: 34.9 µs serial, 21.0 in shares). With few pieces the extra hop (the pieces wait on each
# other) costs more than it saves: serial ran 3-4% faster at 3 and 4 pieces, the same at 5, 3-6%
# slower at 8 (`git show ab42bb6:bench/results/2026-11-26-h100-wgmma-scatter-reduce.md`, measured with the shares then
# summed for a finisher; writing D from the shares since saved 1 µs more at 64 pieces).
SCATTER_SPLITS = 6

# How many float4 loads a piece's thread may keep in flight while it sums its share of the partial
# tiles (ShareSum). Its accumulators are stored and dead by then, so 16 (64 registers) even on the
# large two-consumer tiles (512x512x65536 in 128x256 tiles: 3 L2 round trips one after another
# instead of 5; 0.4-0.8 µs); 8 in 3xtf32 kernels, whose 232 registers hold a partial beside the
# sums, and in one-consumer tiles of more than SUM_LOADS_ACCUMULATORS (NVRTC 13, the split-tail
# candidates of six long-K shapes, 2026-11-26: at 16, 64x256 spilled 4-24 bytes, 3xtf32 128x192
# ~900). The first versions kept 4 or 8 loads in flight for one or two elements at a time, so a
# 128x256 tile's 3 elements a thread over 14 partials took 12 L2 round trips one after another,
# and 96x96x65536's 31 in 64x64 tiles 4 (now 1).
SUM_LOADS = 16
SUM_LOADS_LARGE_TILE = 8
SUM_LOADS_ACCUMULATORS = 64
THREADS = 128  # a consumer warpgroup: the threads that sum a piece's share


@dataclass(frozen=True)
class ShareSum:
    """How a piece's THREADS sum their share of `contributors` partial tiles: `lanes` adjacent lanes
    sum one element together (lane g over partial tiles g, g + lanes, ...) and meet by shuffles; each
    thread `chunk` elements at a time, with `batch` partial tiles' loads of each in flight."""

    lanes: int
    chunk: int
    batch: int

    def round_trips(self, share: int, contributors: int) -> int:
        """L2 round trips one after another to sum a share of `share` float4s."""
        passes = ceil_div(share, THREADS // self.lanes * self.chunk)
        return passes * ceil_div(ceil_div(contributors, self.lanes), self.batch)


def share_sum(share: int, contributors: int, loads: int) -> ShareSum:
    """The fewest round trips with at most `loads` loads in flight a thread; on a tie fewer lanes
    (fewer shuffles), then fewer loads."""
    options = []
    for lanes in (1, 2, 4, 8, 16, 32):
        if lanes > 1 and lanes // 2 >= contributors:
            break
        mine = ceil_div(contributors, lanes)
        elements = ceil_div(share, THREADS // lanes)  # a thread's elements of the share
        for chunk in range(1, min(elements, loads) + 1):
            batch = min(mine, loads // chunk)
            plan = ShareSum(lanes, chunk, batch)
            options.append((plan.round_trips(share, contributors), lanes, chunk * batch, plan))
    return min(options, key=lambda o: o[:3])[3]


@dataclass(frozen=True)
class Schedule:
    """workers: clusters launched (grid = workers · cluster_m); units: tiles per cluster block;
    k_blocks: k-blocks per tile; whole_units: units run whole (round robin, a multiple of workers
    when any are split); tail_workers: the workers sharing the k-blocks of the units after them
    (0: none split)."""

    workers: int
    units: int
    k_blocks: int
    whole_units: int
    tail_workers: int = 0
    # Whether equal splits of SCATTER_SPLITS pieces or more write D in shares (False: a finisher adds
    # them, whatever their count). A gated GEMM's finisher: SwiGLU pairs each gate column with its up
    # column 8 columns on, which a share of the partial tile (a run of float4s) may cut apart.
    shares: bool = True

    @property
    def split_units(self) -> int:
        return self.units - self.whole_units

    @property
    def tail_k_blocks(self) -> int:
        return self.split_units * self.k_blocks

    @property
    def splits(self) -> int:
        """K ranges per split unit where the shares are equal splits of each unit; 1 when nothing is
        split; 0 when the shares run across units (see `share_k_blocks`)."""
        if not self.tail_workers:
            return 1
        return self.tail_workers // self.split_units if self.tail_workers % self.split_units == 0 else 0

    @property
    def scatter(self) -> bool:
        """Whether the pieces reduce the partial tiles in shares, each writing its share of D (see
        SCATTER_SPLITS); else a finisher adds them."""
        return self.shares and self.splits >= SCATTER_SPLITS

    @property
    def share_k_blocks(self) -> float:
        """k-blocks each tail worker runs (on average, where the shares are uneven by one)."""
        return self.tail_k_blocks / self.tail_workers if self.tail_workers else 0.0

    @property
    def tile_times(self) -> float:
        """How long the schedule runs, in times of one whole tile on a worker: its rounds of whole
        units, then the longest share of the tail."""
        rounds = ceil_div(self.whole_units, self.workers)
        return rounds + (ceil_div(self.tail_k_blocks, self.tail_workers) / self.k_blocks if self.tail_workers else 0)

    def share(self, worker: int) -> tuple[int, int]:
        """Worker's run [lo, hi) of the tail's k-blocks, numbered unit after unit."""
        t, w = self.tail_k_blocks, self.tail_workers
        return worker * t // w, (worker + 1) * t // w

    def holder(self, flat: int) -> int:
        """The tail worker whose share holds tail k-block `flat`."""
        return ((flat + 1) * self.tail_workers - 1) // self.tail_k_blocks

    def pieces(self, worker: int) -> list[tuple[int, int, int]]:
        """(unit, kb_begin, kb_end) in the order the worker runs them (mirrors `next_piece`)."""
        out = [(unit, 0, self.k_blocks) for unit in range(worker, self.whole_units, self.workers)]
        if worker >= self.tail_workers:
            return out
        lo, hi = self.share(worker)
        while lo < hi:  # cut at unit boundaries: at most two pieces
            unit, begin = divmod(lo, self.k_blocks)
            end = min(self.k_blocks, hi - unit * self.k_blocks)
            out.append((self.whole_units + unit, begin, end))
            lo = unit * self.k_blocks + end
        return out

    def contributors(self, worker: int) -> list[int]:
        """Workers holding the other pieces of the split unit that `worker` finishes (its piece that
        starts a unit without ending it), in the order the finisher adds them."""
        for unit, begin, end in self.pieces(worker):
            if unit >= self.whole_units and begin == 0 and end < self.k_blocks:
                last = self.holder((unit - self.whole_units + 1) * self.k_blocks - 1)
                return list(range(worker + 1, last + 1))
        return []


def plan(units: int, k_blocks: int, slots: int, split_tail: bool, split_cap: int = 0, split_min: int = 0) -> Schedule:
    """The schedule for `units` tiles of `k_blocks` on a persistent grid of `slots` workers; with
    `split_cap`, equal splits cut a unit into at most that many pieces; with `split_min`, a piece holds
    at least that many k-blocks instead of MIN_SHARE."""
    least = split_min or MIN_SHARE
    plain = Schedule(min(units, slots), units, k_blocks, whole_units=units)
    tail = units % slots  # the units of the last, partial wave (all of them when fewer than slots)
    if not split_tail or tail == 0:
        return plain
    if slots // tail >= 2:  # equal splits of each unit, no share under MIN_SHARE k-blocks
        tail_workers = tail * min(slots // tail, k_blocks // least, split_cap or slots)
    else:  # even shares running across units, as many as keep MIN_SHARE k-blocks each
        tail_workers = min(slots, tail * k_blocks // least)
        longest = ceil_div(tail * k_blocks, tail_workers)
        if k_blocks - longest < max(SHARE_GAIN, k_blocks // 4):
            return plain  # the wave would shrink too little to pay for the exchange and the scattered reads
    if tail_workers <= tail:
        return plain
    whole = units - tail
    return Schedule(slots if whole else tail_workers, units, k_blocks, whole_units=whole, tail_workers=tail_workers)


def schedule_for(spec: GemmSpec, config: WgmmaConfig, gpu: Geometry | None = None) -> Schedule:
    """A config's schedule on `gpu` (None: the arch table's sm_90 GPU): one block per tile, or a
    persistent grid of one block per SM: of all the SMs (as many clusters as always fit:
    Geometry.cluster_grid), or of IN_STEP_BLOCKS where that takes as few tile-times. The kernel's
    grid is `workers * cluster_m`; the chooser asks this function too, so the two cannot drift."""
    units = ceil_div(ceil_div(spec.m, config.bm), config.cluster_m) * ceil_div(spec.gemm_n, config.bn)
    k_blocks = ceil_div(spec.k, config.bk(spec.dtype))
    if not config.persistent:
        return Schedule(units, units, k_blocks, whole_units=units)
    most = (gpu or geometry(None, "sm_90a")).cluster_grid(config.cluster_m)
    plans = [plan(units, k_blocks, blocks // config.cluster_m, config.split_tail, config.split_cap,
                  config.split_min)
             for blocks in sorted({most, min(most, IN_STEP_BLOCKS)})]
    best = min(plans, key=lambda p: p.tile_times)  # the first (fewer workers) on a tie
    return replace(best, shares=False) if spec.gated else best


# --- CUDA text ------------------------------------------------------------------------------------
def constants(schedule: Schedule) -> str:
    return f"""
// The work schedule (schedule.py has its Python twin): WORKERS clusters take the first WHOLE_UNITS
// units whole, round robin; the k-blocks of the units after them (the partial last wave), numbered
// unit after unit, are cut into TAIL_WORKERS even shares, one per worker, all running at once.
constexpr int WORKERS = {schedule.workers}, WHOLE_UNITS = {schedule.whole_units}, TAIL_WORKERS = {schedule.tail_workers};
constexpr int TAIL_K_BLOCKS = {schedule.tail_k_blocks};
constexpr bool SHARES_WRITE_D = {"true" if schedule.scatter else "false"};  // the tail's pieces write their shares of D

// Whether a piece writes D through the epilogue: it holds its tile's first k-block (the finisher),
// unless its tile is a tail unit whose pieces each write their own share of D.
__device__ __forceinline__ bool piece_writes_d(int unit, int kb_begin) {{
    return kb_begin == 0 && !(SHARES_WRITE_D && unit >= WHOLE_UNITS);
}}
"""


CURSOR = r"""
// The next piece of this block's work: a unit and its k-blocks [kb_begin, kb_end); false when the
// block is done. `cursor` counts the pieces taken. The producer and the consumers walk the same
// sequence, so both sides agree on every piece.
__device__ __forceinline__ bool next_piece(int worker, int& cursor, int& unit, int& kb_begin, int& kb_end) {
    unit = worker + cursor * WORKERS;
    kb_begin = 0;
    kb_end = K_BLOCKS;
    if (unit < WHOLE_UNITS) {
        ++cursor;
        return true;
    }
    // Past the whole units (a whole number of rounds when any are split): this worker's share
    // [lo, hi) of the tail's k-blocks, cut at unit boundaries (a share is at most one unit long, so
    // two pieces at most: the end of one unit, then the start of the next).
    if (worker >= TAIL_WORKERS) return false;
    const int lo = (int)((long long)worker * TAIL_K_BLOCKS / TAIL_WORKERS);
    const int hi = (int)((long long)(worker + 1) * TAIL_K_BLOCKS / TAIL_WORKERS);
    const int taken = cursor - WHOLE_UNITS / WORKERS;  // tail pieces this worker has run
    const int start = taken == 0 ? lo : (lo / K_BLOCKS + 1) * K_BLOCKS;
    if (taken > 1 || start >= hi) return false;
    unit = WHOLE_UNITS + start / K_BLOCKS;
    kb_begin = start % K_BLOCKS;
    kb_end = min(K_BLOCKS, hi - start / K_BLOCKS * K_BLOCKS);
    ++cursor;
    return true;
}
"""


PARTIAL_SLOTS = r"""
// Partial sums of split units: one fp32 BM×BN slot per block (a block stores at most one: the
// first piece of its tail share, where that does not start a unit), each consumer's part kept as its threads' accumulators in float4 groups, thread-
// interleaved so a warp's store is 512 contiguous bytes. Module memory: no workspace to pass, and
// partial_ready starts at zero; the finisher sets each flag back to zero, ready for the next launch.
constexpr int PARTIAL_SLOTS = WORKERS * CLUSTER_M;
__device__ float4 partial_sums[(size_t)PARTIAL_SLOTS * BM * BN / 4];
__device__ unsigned int partial_ready[PARTIAL_SLOTS * CONSUMERS];

// One consumer's part of tile `slot` in an array of BM×BN fp32 tiles (partial or reduced sums).
__device__ __forceinline__ float4* consumer_part(float4* tiles, int slot, int consumer) {
    return tiles + ((size_t)slot * BM * BN + (size_t)consumer * ROWS_PER_CONSUMER * BN) / 4;
}

__device__ __forceinline__ float4* partial_slot(int block, int consumer) {
    return consumer_part(partial_sums, block, consumer) + threadIdx.x % 128;
}
"""


PARTIAL_STORE = r"""
// A contributor: store this consumer's partial sums (L2 only: another SM reads them) and raise its
// flag. The barrier orders every thread's stores before thread 0's release at GPU scope.
__device__ __forceinline__ void store_partial(const float (&acc)[M_BLOCKS][BN / 2], int consumer) {
    float4* slot = partial_slot(blockIdx.x, consumer);
    #pragma unroll
    for (int mb = 0; mb < M_BLOCKS; ++mb)
        #pragma unroll
        for (int q = 0; q < BN / 8; ++q)
            __stcg(slot + (mb * BN / 8 + q) * 128,
                   make_float4(acc[mb][4 * q], acc[mb][4 * q + 1], acc[mb][4 * q + 2], acc[mb][4 * q + 3]));
    named_barrier(1 + consumer, 128);
    if (threadIdx.x % 128 == 0) store_release(&partial_ready[blockIdx.x * CONSUMERS + consumer], 1u);
}
"""


SERIAL_ADD = r"""
// The finisher (the piece holding a split unit's first k-block): add the partial sums of the unit's
// other pieces, held by the next workers up to the one whose share ends the unit, in order (the same
// order every run: deterministic).
__device__ __forceinline__ void add_partials(float (&acc)[M_BLOCKS][BN / 2], int worker, int rank, int consumer,
                                             int unit) {
    const int unit_end = (unit - WHOLE_UNITS + 1) * K_BLOCKS - 1;  // its last k-block, in the tail's numbering
    const int last = (int)(((long long)unit_end + 1) * TAIL_WORKERS - 1) / TAIL_K_BLOCKS;  // the worker holding it
    #pragma unroll 1  // one partial tile at a time: unrolled, the loads of all would need registers
    for (int v = worker + 1; v <= last; ++v) {
        const int block = v * CLUSTER_M + rank;
        if (threadIdx.x % 128 == 0) {
            unsigned int* ready = &partial_ready[block * CONSUMERS + consumer];
            spin_until_equal(ready, 1u);  // acquire: the contributor's partial sums are visible once its flag is
            *ready = 0u;  // read once per launch: ready for the next
        }
        named_barrier(1 + consumer, 128);
        const float4* slot = partial_slot(block, consumer);
        #pragma unroll
        for (int mb = 0; mb < M_BLOCKS; ++mb)
            #pragma unroll
            for (int q = 0; q < BN / 8; ++q) {
                const float4 p = __ldcg(slot + (mb * BN / 8 + q) * 128);
                acc[mb][4 * q] += p.x;
                acc[mb][4 * q + 1] += p.y;
                acc[mb][4 * q + 2] += p.z;
                acc[mb][4 * q + 3] += p.w;
            }
    }
}
"""


# The share sum's passes (CUDA text, spliced into SHARES_TO_D, a format template, so that its own braces
# stay single): the share's float4s SUM_SLOTS * SUM_CHUNK at a time, each lane group over its SPLITS
# partial tiles, then the lanes by shuffles; SHARES_TO_D's text after it writes each pass's sums to D.
SUM_PASSES = r"""    const int lane_group = threadIdx.x % SUM_LANES, slot = threadIdx.x % 128 / SUM_LANES;
    // The same pass count for every thread, so every lane reaches the shuffles.
    const int passes = (hi - lo + SUM_SLOTS * SUM_CHUNK - 1) / (SUM_SLOTS * SUM_CHUNK);
    #pragma unroll 1
    for (int pass = 0; pass < passes; ++pass) {
        const int i0 = lo + pass * SUM_SLOTS * SUM_CHUNK + slot;  // elements i0 + SUM_SLOTS e
        float4 sum[SUM_CHUNK];
        #pragma unroll
        for (int e = 0; e < SUM_CHUNK; ++e) sum[e] = make_float4(0.f, 0.f, 0.f, 0.f);
        #pragma unroll 1
        for (int u0 = 0; u0 < SUM_MINE; u0 += SUM_BATCH) {
            float4 p[SUM_BATCH][SUM_CHUNK];
            #pragma unroll
            for (int u = 0; u < SUM_BATCH; ++u)
                #pragma unroll
                for (int e = 0; e < SUM_CHUNK; ++e) {
                    const int v = lane_group + SUM_LANES * (u0 + u), i = i0 + SUM_SLOTS * e;
                    if (v < SPLITS && i < hi) p[u][e] = __ldcg(parts + v * STRIDE + i);
                }
            #pragma unroll
            for (int u = 0; u < SUM_BATCH; ++u)
                #pragma unroll
                for (int e = 0; e < SUM_CHUNK; ++e)
                    if (lane_group + SUM_LANES * (u0 + u) < SPLITS && i0 + SUM_SLOTS * e < hi) {
                        sum[e].x += p[u][e].x;
                        sum[e].y += p[u][e].y;
                        sum[e].z += p[u][e].z;
                        sum[e].w += p[u][e].w;
                    }
        }
        #pragma unroll
        for (int offset = 1; offset < SUM_LANES; offset *= 2)
            #pragma unroll
            for (int e = 0; e < SUM_CHUNK; ++e) {
                sum[e].x += __shfl_xor_sync(0xffffffffu, sum[e].x, offset);
                sum[e].y += __shfl_xor_sync(0xffffffffu, sum[e].y, offset);
                sum[e].z += __shfl_xor_sync(0xffffffffu, sum[e].z, offset);
                sum[e].w += __shfl_xor_sync(0xffffffffu, sum[e].w, offset);
            }
"""


SHARES_TO_D = r"""
// Equal splits of SPLITS pieces, each of which writes D (SHARES_WRITE_D): a piece, once every partial
// tile of its unit is stored (its own included), sums its share of the tile over all SPLITS of them,
// runs the epilogue on it and stores it to D. The unit's last piece past its reads readies the flags
// for the next launch.
constexpr int SPLITS = {splits};
constexpr int CONSUMER_FLOAT4S = ROWS_PER_CONSUMER * BN / 4;  // one consumer's part of a tile
__device__ unsigned int shares_done[TAIL_WORKERS / SPLITS * CLUSTER_M * CONSUMERS];  // pieces past their reads

// How a piece's threads sum (schedule.ShareSum, chosen so the share takes as few L2 round trips one
// after another as the registers allow): SUM_LANES adjacent lanes sum one element together, lane g
// over pieces g, g + SUM_LANES, ... in order, and meet by shuffles (the same order every run:
// deterministic); each thread SUM_CHUNK elements at a time, with SUM_BATCH pieces' loads of each in flight.
constexpr int SUM_LANES = {lanes}, SUM_CHUNK = {chunk}, SUM_BATCH = {batch};
constexpr int SUM_SLOTS = 128 / SUM_LANES;  // elements a pass sums side by side
constexpr int SUM_MINE = (SPLITS + SUM_LANES - 1) / SUM_LANES;  // pieces a lane reads, at most

// Element i of a consumer's part (float4s, thread-interleaved: store_partial) is thread i % 128's
// accumulators 4q .. 4q + 3 of its 64-row block mb, (mb, q) = divmod(i / 128, BN / 8): rows r and r + 8,
// columns c and c + 1 of the wgmma fragment.
__device__ __forceinline__ void sum_share_to_d(int consumer, int tile_m, int tile_n, out_t* __restrict__ D{params}) {{
    const int worker = blockIdx.x / CLUSTER_M, rank = blockIdx.x % CLUSTER_M;
    const int tail_unit = worker / SPLITS;  // tail worker w holds a piece of tail unit w / SPLITS
    const int first = tail_unit * SPLITS;  // the worker holding the unit's first piece
    for (int v = threadIdx.x % 128; v < SPLITS; v += 128)  // thread v waits on piece v
        spin_until_equal(&partial_ready[((first + v) * CLUSTER_M + rank) * CONSUMERS + consumer], 1u);
    named_barrier(1 + consumer, 128);
    constexpr size_t STRIDE = (size_t)CLUSTER_M * BM * BN / 4;  // from one piece's slot to the next's
    const float4* parts = consumer_part(partial_sums, first * CLUSTER_M + rank, consumer);
    const int me = worker - first;
    const int lo = me * CONSUMER_FLOAT4S / SPLITS, hi = (me + 1) * CONSUMER_FLOAT4S / SPLITS;
{passes}        #pragma unroll
        for (int e = 0; e < SUM_CHUNK; ++e) {{
            const int i = i0 + SUM_SLOTS * e;
            if (lane_group != 0 || i >= hi) continue;
            const float4 s = sum[e];
            const int owner = i % 128, block = i / 128, mb = block / (BN / 8), q = block % (BN / 8);
            const int row0 = tile_m * BM + consumer * CONSUMER_ROWS + mb * 64 + owner / 32 * 16 + owner % 32 / 4;
            const int col0 = tile_n * BN + q * 8 + 2 * (owner % 4);
{stores}        }}
    }}
    named_barrier(1 + consumer, 128);  // every thread's reads of the partial tiles are done
    if (threadIdx.x % 128 == 0) {{
        unsigned int* done = &shares_done[(tail_unit * CLUSTER_M + rank) * CONSUMERS + consumer];
        if (acq_rel_add(done, 1u) == SPLITS - 1) {{  // the unit's last piece: every piece has read every flag
            for (int v = 0; v < SPLITS; ++v) partial_ready[((first + v) * CLUSTER_M + rank) * CONSUMERS + consumer] = 0u;
            *done = 0u;
        }}
    }}
}}

// A piece of a scattered unit never adds partial sums (it writes its share of D instead); whole units
// have nothing to add.
__device__ __forceinline__ void add_partials(float (&acc)[M_BLOCKS][BN / 2], int worker, int rank, int consumer,
                                             int unit) {{}}
"""

# A float4 of sums: the pairs (row0, col0) and (row0 + 8, col0), through the epilogue to D.
SHARE_PAIRS = PairFragment(loops=(("half", "2"),), row="row0 + 8 * half", col="col0",
                           values=("half ? s.z : s.x", "half ? s.w : s.y"), row_depth=1,
                           note="A float4 of sums holds rows row0 and row0 + 8 of columns col0 and col0 + 1.")


def shares_to_d(schedule: Schedule, spec: GemmSpec, config: WgmmaConfig) -> str:
    """sum_share_to_d (after the epilogue and store_tile's pair helpers in the kernel text) where the
    schedule's pieces write their shares of D, else nothing."""
    if not schedule.scatter:
        return ""
    plan = reduce_plan(schedule, config, share_loads(spec, config))
    params = "".join(f", {p}" for p in operand_decls(spec.epilogue))
    return SHARES_TO_D.format(splits=schedule.splits, params=params, passes=SUM_PASSES,
                              stores=pair_stores(spec, SHARE_PAIRS, output_of(config), "            "), **vars(plan))


def share_call(schedule: Schedule, spec: GemmSpec) -> str:
    """The consumer's call after store_partial where the pieces write their shares of D."""
    if not schedule.scatter:
        return ""
    operands = "".join(f", {op.name}" for op in spec.epilogue.operands())
    return f"\n                sum_share_to_d(consumer, tile_m, tile_n, D{operands});  // this piece's share of the tile, to D"


def share_loads(spec: GemmSpec, config: WgmmaConfig) -> int:
    """Float4 loads a piece's thread may keep in flight in sum_share_to_d (see SUM_LOADS)."""
    if splits_fp32(spec) or (config.consumers == 1 and config.accumulators > SUM_LOADS_ACCUMULATORS):
        return SUM_LOADS_LARGE_TILE
    return SUM_LOADS


def reduce_plan(schedule: Schedule, config: WgmmaConfig, loads: int) -> ShareSum:
    """How the pieces of `schedule`'s split units sum their shares: one consumer's part of a tile
    (THREADS * accumulators / 4 float4s) cut into `splits` shares, each over the `splits` partial tiles."""
    return share_sum(ceil_div(THREADS * config.accumulators // 4, schedule.splits), schedule.splits, loads)


def cuda(schedule: Schedule) -> str:
    """The scheduler's constants and cursor, and the partial tiles' slots, store and (serial) add when
    units are split; the shares' sum_share_to_d comes later in the kernel text (shares_to_d), after
    the epilogue it runs."""
    text = constants(schedule) + CURSOR
    if not schedule.tail_workers:
        return text
    if not schedule.scatter:
        return text + ACQUIRE_RELEASE + PARTIAL_SLOTS + PARTIAL_STORE + SERIAL_ADD
    return text + ACQUIRE_RELEASE + ACQ_REL_ADD + PARTIAL_SLOTS + PARTIAL_STORE
