"""The wgmma kernel's work schedule: how many blocks run, and which (unit, k-range) pieces each takes.

A *unit* is one output tile per block of a cluster; a *worker* is one cluster (one block without
clusters). Plain: worker w takes whole units w, w + W, w + 2W, ...

With split_tail, the units of the last, partial wave (every unit, when they do not fill the GPU)
are split along K into SPLITS equal ranges, one worker each, so the tail fills the GPU: 64 tiles of
a 1024×1024×16384 GEMM run on 128 blocks, not 64, and 320 tiles on 132 SMs run as two full waves
and a third in halves (2.5 tile-times instead of 3). The whole units come first, the split pieces
last: every piece of the tail starts at the same moment at one of SPLITS k offsets, so the blocks
running together share their A and B k-slabs in L2 like a plain wave does.

Stream-K was tried first (every worker an even, contiguous share of the flattened k-blocks, so no
tail at all): its shares start at scattered k offsets, the blocks running together then read
disjoint k-slabs of A and B, L2 stops holding them, and it was 30-85% slower on the large shapes
(bench/results/2026-11-23-h100-wgmma-variants.md, run 7). Equal splits keep the waves in step.

Piece j = 0 of a split unit (it holds the first k-block) is the finisher: it adds the other
pieces' fp32 partial sums, which they store with a flag, and runs the epilogue. Each worker stores
at most one partial (its tail piece), so one slot per block is enough. The finisher's dependencies
are later workers that run their only tail piece at the same time.

This module is the Python twin of the CUDA scheduler (`next_piece` in the generated code): the
tests walk it to check that every k-block of every tile is done exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...spec import GemmSpec
from .config import CLUSTER_GRID, SM90_SMS, WgmmaConfig

# k-blocks a split piece must at least hold: fewer, and storing and gathering the partial tile
# (bm·bn·4 bytes through L2) costs more than the iterations it spreads (H100: 1000^3 in 128x256
# tiles split in two 8-k-block halves ran 17.6 µs against 17.0 whole).
MIN_SHARE = 16


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Schedule:
    """workers: clusters launched (grid = workers · cluster_m); units: tiles per cluster block;
    k_blocks: k-blocks per tile; whole_units: units run whole (round robin, a multiple of workers
    when any are split); splits: K ranges per unit after them (1: none split)."""

    workers: int
    units: int
    k_blocks: int
    whole_units: int
    splits: int = 1

    @property
    def split_units(self) -> int:
        return self.units - self.whole_units

    def pieces(self, worker: int) -> list[tuple[int, int, int]]:
        """(unit, kb_begin, kb_end) in the order the worker runs them (mirrors `next_piece`)."""
        out = [(unit, 0, self.k_blocks) for unit in range(worker, self.whole_units, self.workers)]
        if worker < self.split_units * self.splits:
            unit, j = self.whole_units + worker // self.splits, worker % self.splits
            out.append((unit, j * self.k_blocks // self.splits, (j + 1) * self.k_blocks // self.splits))
        return out

    def contributors(self, worker: int) -> list[int]:
        """Workers holding the other pieces of the split unit whose finisher is `worker`."""
        return list(range(worker + 1, worker + self.splits))


def plan(units: int, k_blocks: int, slots: int, split_tail: bool) -> Schedule:
    """The schedule for `units` tiles of `k_blocks` on a persistent grid of `slots` workers."""
    plain = Schedule(min(units, slots), units, k_blocks, whole_units=units)
    tail = units % slots  # the units of the last, partial wave (all of them when fewer than slots)
    if not split_tail or tail == 0:
        return plain
    splits = min(slots // tail, k_blocks // MIN_SHARE)
    if splits < 2:
        return plain
    whole = units - tail
    return Schedule(slots if whole else tail * splits, units, k_blocks, whole_units=whole, splits=splits)


def schedule_for(spec: GemmSpec, config: WgmmaConfig) -> Schedule:
    """A config's schedule: one block per tile, or a persistent grid of one block per SM (as many
    clusters as always fit where clusters are asked for: CLUSTER_GRID)."""
    units = ceil_div(ceil_div(spec.m, config.bm), config.cluster_m) * ceil_div(spec.n, config.bn)
    k_blocks = ceil_div(spec.k, config.bk(spec.dtype))
    if not config.persistent:
        return Schedule(units, units, k_blocks, whole_units=units)
    blocks = CLUSTER_GRID[config.cluster_m] if config.cluster_m > 1 else SM90_SMS
    return plan(units, k_blocks, blocks // config.cluster_m, config.split_tail)


# --- CUDA text ------------------------------------------------------------------------------------
def constants(schedule: Schedule) -> str:
    return f"""
// The work schedule (schedule.py has its Python twin): WORKERS clusters take the first WHOLE_UNITS
// units whole, round robin; each unit after them is split along K into SPLITS equal ranges, one
// worker each, all running at once (the partial last wave, spread over the whole GPU).
constexpr int WORKERS = {schedule.workers}, WHOLE_UNITS = {schedule.whole_units}, SPLITS = {schedule.splits};
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
    // Past the whole units (a whole number of rounds when any are split), the round after them is
    // the split tail: piece `tail` is K range tail % SPLITS of split unit tail / SPLITS.
    const int tail = unit - WHOLE_UNITS;
    if (SPLITS == 1 || tail >= (UNITS - WHOLE_UNITS) * SPLITS) return false;
    unit = WHOLE_UNITS + tail / SPLITS;
    kb_begin = tail % SPLITS * K_BLOCKS / SPLITS;
    kb_end = (tail % SPLITS + 1) * K_BLOCKS / SPLITS;
    ++cursor;
    return true;
}
"""


PARTIALS = r"""
// Partial sums of split units: one fp32 BM×BN slot per block (a block stores at most one: its
// tail piece), each consumer's part kept as its threads' accumulators in float4 groups, thread-
// interleaved so a warp's store is 512 contiguous bytes. Module memory: no workspace to pass, and
// partial_ready starts at zero; the finisher sets each flag back to zero, ready for the next launch.
constexpr int PARTIAL_SLOTS = WORKERS * CLUSTER_M;
__device__ float4 partial_sums[(size_t)PARTIAL_SLOTS * BM * BN / 4];
__device__ unsigned int partial_ready[PARTIAL_SLOTS * CONSUMERS];

__device__ __forceinline__ float4* partial_slot(int block, int consumer) {
    return partial_sums + ((size_t)block * BM * BN + (size_t)consumer * ROWS_PER_CONSUMER * BN) / 4
           + threadIdx.x % 128;
}

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
    if (threadIdx.x % 128 == 0)
        asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(&partial_ready[blockIdx.x * CONSUMERS + consumer]),
                     "r"(1u) : "memory");
}

// The finisher (piece 0 of a split unit): add the partial sums of the unit's other pieces, held by
// the next SPLITS - 1 workers, in order (the same order every run: deterministic).
__device__ __forceinline__ void add_partials(float (&acc)[M_BLOCKS][BN / 2], int worker, int rank, int consumer) {
    #pragma unroll 1  // one partial tile at a time: unrolled, the loads of all would need registers
    for (int v = worker + 1; v < worker + SPLITS; ++v) {
        const int block = v * CLUSTER_M + rank;
        if (threadIdx.x % 128 == 0) {
            unsigned int* ready = &partial_ready[block * CONSUMERS + consumer];
            unsigned int seen;
            do {  // acquire: the contributor's partial sums are visible once its flag is
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(ready) : "memory");
            } while (seen == 0u);
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


def cuda(schedule: Schedule) -> str:
    """The scheduler's constants and cursor, and the partial-sum exchange when units are split."""
    return constants(schedule) + CURSOR + (PARTIALS if schedule.splits > 1 else "")
