"""The wgmma kernel's work schedule: how many blocks run, and which (unit, k-range) pieces each takes.

A *unit* is one output tile per block of a cluster; a *worker* is one cluster (one block without
clusters). Without stream-K, worker w takes whole units w, w + W, w + 2W, ... With stream-K the
first SK_UNITS units are cut along K instead: their UNITS·K_BLOCKS k-block iterations are dealt out
evenly as one contiguous range per worker, so every worker ends within one k-block of the others
even where the unit count is not a multiple of the worker count (the last partial wave of a plain
persistent kernel leaves SMs idle: 512 tiles on 132 SMs run as 4 waves, the last 88% full). The
remaining units (a whole number of waves) follow as whole tiles.

A tile cut between workers is finished by the worker whose piece holds the tile's first k-block:
that piece is the last of its range, so the workers holding the rest of the tile (the next ones)
met it first in theirs. They store their fp32 partial sums and raise a flag; the finisher adds them
and runs the epilogue. Each worker has at most one partial to store (its first piece), so one slot
per block is enough. Dependencies point only to later workers, which start at the same time or
earlier than the finisher waits, so the kernel needs only that blocks are dispatched in index order.

This module is the Python twin of the CUDA scheduler (`next_piece` in the generated code): the
tests walk it to check that every k-block of every tile is done exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...spec import GemmSpec
from .config import CLUSTER_GRID, SM90_SMS, WgmmaConfig

# k-blocks a worker must at least get in the stream-K phase: less, and storing and gathering the
# partial tile (bm·bn·4 bytes through L2) costs more than the iterations it spreads.
MIN_SHARE = 8


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Schedule:
    """workers: clusters launched (grid = workers · cluster_m); units: tiles per cluster block;
    k_blocks: k-blocks per tile; sk_units: the leading units cut along K (0: whole tiles only)."""

    workers: int
    units: int
    k_blocks: int
    sk_units: int = 0

    @property
    def sk_iters(self) -> int:
        return self.sk_units * self.k_blocks

    def sk_begin(self, worker: int) -> int:
        """Where worker's stream-K range starts in the flattened (unit, k-block) order."""
        return worker * self.sk_iters // self.workers

    def pieces(self, worker: int) -> list[tuple[int, int, int]]:
        """(unit, kb_begin, kb_end) in the order the worker runs them (mirrors `next_piece`)."""
        out = []
        pos, end = self.sk_begin(worker), self.sk_begin(worker + 1)
        while pos < end:
            unit, kb = divmod(pos, self.k_blocks)
            stop = min(self.k_blocks, kb + end - pos)
            out.append((unit, kb, stop))
            pos += stop - kb
        out.extend((unit, 0, self.k_blocks) for unit in range(self.sk_units + worker, self.units, self.workers))
        return out

    def contributors(self, worker: int, unit: int) -> list[int]:
        """Workers whose first piece holds a later part of `unit` (the finisher adds their partials)."""
        tile_end = (unit + 1) * self.k_blocks
        found = []
        for v in range(worker + 1, self.workers):
            begin = self.sk_begin(v)
            if begin >= tile_end:
                break
            if begin < self.sk_begin(v + 1):  # an empty range holds nothing
                found.append(v)
        return found


def plan(units: int, k_blocks: int, slots: int, stream_k: bool) -> Schedule:
    """The schedule for `units` tiles of `k_blocks` on a persistent grid of `slots` workers."""
    if not stream_k or k_blocks < 2 * MIN_SHARE or units % slots == 0 and units >= slots:
        return Schedule(min(units, slots), units, k_blocks)
    if units < slots:
        # Too few tiles to fill the GPU: every tile is cut (split-K over the whole grid), over as
        # many workers as get MIN_SHARE k-blocks each.
        workers = max(1, min(slots, units * k_blocks // MIN_SHARE))
        if workers * units * k_blocks >= 2**31:
            return Schedule(units, units, k_blocks)
        return Schedule(workers, units, k_blocks, sk_units=units)
    # The partial last wave plus one full wave are cut, so each worker's share is 1-2 tiles long
    # (never a sliver), and the rest run as whole tiles.
    sk_units = units % slots + slots
    if slots * sk_units * k_blocks >= 2**31:  # the kernel's 32-bit range arithmetic (K of millions)
        return Schedule(slots, units, k_blocks)
    return Schedule(slots, units, k_blocks, sk_units=sk_units)


def schedule_for(spec: GemmSpec, config: WgmmaConfig) -> Schedule:
    """A config's schedule: one block per tile, or a persistent grid of one block per SM (64
    clusters of 2 where clusters are asked for: that many pairs always fit)."""
    units = ceil_div(ceil_div(spec.m, config.bm), config.cluster_m) * ceil_div(spec.n, config.bn)
    k_blocks = ceil_div(spec.k, config.bk(spec.dtype))
    if not config.persistent:
        return Schedule(units, units, k_blocks)
    blocks = CLUSTER_GRID if config.cluster_m > 1 else SM90_SMS
    return plan(units, k_blocks, blocks // config.cluster_m, config.stream_k)


# --- CUDA text ------------------------------------------------------------------------------------
def constants(schedule: Schedule) -> str:
    return f"""
// The work schedule (schedule.py has its Python twin): WORKERS clusters; the first SK_UNITS units
// are cut along K into one contiguous range of k-blocks per worker (stream-K), the rest run whole.
constexpr int WORKERS = {schedule.workers}, SK_UNITS = {schedule.sk_units};
constexpr int SK_ITERS = SK_UNITS * K_BLOCKS;
"""


CURSOR = r"""
// A block's work, in order: its stream-K range (flattened over units 0..SK_UNITS-1, one piece per
// unit it touches), then whole units SK_UNITS + worker, + WORKERS, ... One counter walks it: a
// position in the flattened range, then past its end, the number of whole units taken. The
// producer and the consumers walk the same sequence, so both sides agree on every piece.
__device__ __forceinline__ int sk_begin(int worker) { return worker * SK_ITERS / WORKERS; }
// The next piece: a unit and its k-blocks [kb_begin, kb_end); false when the block is done.
__device__ __forceinline__ bool next_piece(int worker, int& cursor, int& unit, int& kb_begin, int& kb_end) {
    const int sk_end = sk_begin(worker + 1);
    if (cursor < sk_end) {
        unit = cursor / K_BLOCKS;
        kb_begin = cursor % K_BLOCKS;
        kb_end = min(K_BLOCKS, kb_begin + (sk_end - cursor));
        cursor += kb_end - kb_begin;
        return true;
    }
    unit = SK_UNITS + worker + (cursor - sk_end) * WORKERS;
    kb_begin = 0;
    kb_end = K_BLOCKS;
    ++cursor;
    return unit < UNITS;
}
"""


PARTIALS = r"""
// Stream-K partial sums: one fp32 BM×BN slot per block (a block stores at most one: its first
// piece), each consumer's part kept as its threads' accumulators in float4 groups, thread-
// interleaved so a warp's store is 512 contiguous bytes. Module memory: no workspace to pass, and
// sk_ready starts at zero; the finisher sets each flag back to zero, ready for the next launch.
constexpr int SK_SLOTS = WORKERS * CLUSTER_M;
__device__ float4 sk_partials[(size_t)SK_SLOTS * BM * BN / 4];
__device__ unsigned int sk_ready[SK_SLOTS * CONSUMERS];

__device__ __forceinline__ float4* partial_slot(int block, int consumer) {
    return sk_partials + ((size_t)block * BM * BN + (size_t)consumer * ROWS_PER_CONSUMER * BN) / 4
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
        asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(&sk_ready[blockIdx.x * CONSUMERS + consumer]),
                     "r"(1u) : "memory");
}

// The finisher: add the partial sums of the workers after this one whose first piece lies in this
// unit, in worker order (the same order every run: deterministic).
__device__ __forceinline__ void add_partials(float (&acc)[M_BLOCKS][BN / 2], int unit, int worker, int rank,
                                             int consumer) {
    const int unit_end = (unit + 1) * K_BLOCKS;
    for (int v = worker + 1; v < WORKERS && sk_begin(v) < unit_end; ++v) {
        if (sk_begin(v) == sk_begin(v + 1)) continue;  // an empty range holds nothing
        const int block = v * CLUSTER_M + rank;
        if (threadIdx.x % 128 == 0) {
            unsigned int* ready = &sk_ready[block * CONSUMERS + consumer];
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
    """The scheduler's constants and cursor, and the partial-sum exchange when any unit is cut."""
    return constants(schedule) + CURSOR + (PARTIALS if schedule.sk_units else "")
