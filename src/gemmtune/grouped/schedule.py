"""The grouped tile scheduler (one tile index over all groups' tiles), as CUDA and its Python twin.

Each block reads offs into shared memory, counts each group's tiles (ceil(rows / BM) · ceil(N / BN))
and scans them with one warp. Tile t is in the first group whose prefix exceeds t (binary search);
in a group tile_m runs fastest, so blocks running together share B panels in L2. Producer and
consumers map tiles alike from the same arrays: nothing passes between them.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from .spec import group_ends


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Tile:
    group: int
    tile_m: int
    tile_n: int
    row_begin: int  # the group's first row
    row_end: int    # one past the group's last row: rows from here on are never stored


@dataclass(frozen=True)
class TilePlan:
    """The shared arrays' twin: clamped end rows, inclusive tile prefix."""

    ends: tuple[int, ...]
    tile_prefix: tuple[int, ...]
    tiles_n: int

    @property
    def total(self) -> int:
        return self.tile_prefix[-1] if self.tile_prefix else 0

    def tile(self, t: int) -> Tile:
        g = bisect_right(self.tile_prefix, t)  # the first group whose prefix exceeds t
        first = self.tile_prefix[g - 1] if g else 0
        begin = self.ends[g - 1] if g else 0
        tiles_m = (self.tile_prefix[g] - first) // self.tiles_n
        local = t - first
        return Tile(g, local % tiles_m, local // tiles_m, begin, self.ends[g])


def plan(offs: np.ndarray, total_m: int, n: int, bm: int, bn: int) -> TilePlan:
    ends = [int(e) for e in group_ends(offs, total_m)]
    tiles_n, prefix, running = ceil_div(n, bn), [], 0
    for g, end in enumerate(ends):
        rows = max(end - (ends[g - 1] if g else 0), 0)
        running += ceil_div(rows, bm) * tiles_n
        prefix.append(running)
    return TilePlan(tuple(ends), tuple(prefix), tiles_n)


SCHEDULER = r"""
// offs[g] clamped to [0, TOTAL_M] (offs[-1] = 0): a bad offset empties a group, never stores outside D.
__device__ __forceinline__ int clamped_end(const int* __restrict__ offs, int g) {
    return g < 0 ? 0 : min(max(__ldg(offs + g), 0), TOTAL_M);
}

// Warp 0: group_end[g], and tile_end[g] (inclusive prefix of tile counts): a lane counts its groups,
// a shuffle scan adds the lanes before.
__device__ __forceinline__ void scan_groups(const int* __restrict__ offs, int* group_end, int* tile_end) {
    constexpr int GROUPS_PER_LANE = (GROUPS + 31) / 32;
    const int lane = threadIdx.x % 32;
    const int first = lane * GROUPS_PER_LANE, last = min(first + GROUPS_PER_LANE, GROUPS);
    int mine = 0;  // this lane's groups' tiles, running
    for (int g = first; g < last; ++g) {
        const int end = clamped_end(offs, g), rows = max(end - clamped_end(offs, g - 1), 0);
        mine += (rows + BM - 1) / BM * TILES_N;
        group_end[g] = end;
        tile_end[g] = mine;
    }
    int before = mine;  // inclusive scan over lanes, then minus this lane's own
    #pragma unroll
    for (int step = 1; step < 32; step *= 2) {
        const int other = __shfl_up_sync(0xffffffffu, before, step);
        if (lane >= step) before += other;
    }
    before -= mine;
    for (int g = first; g < last; ++g) tile_end[g] += before;
}

// Tile t: its group (the first whose tile_end exceeds t), place (tile_m fastest), rows [row_begin, row_end).
struct GroupTile { int group, tile_m, tile_n, row_begin, row_end; };

__device__ __forceinline__ GroupTile group_tile(const int* group_end, const int* tile_end, int t) {
    int lo = 0, hi = GROUPS - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (tile_end[mid] > t) hi = mid; else lo = mid + 1;
    }
    const int first = lo ? tile_end[lo - 1] : 0;
    const int tiles_m = (tile_end[lo] - first) / TILES_N;
    const int local = t - first;
    return GroupTile{lo, local % tiles_m, local / tiles_m, lo ? group_end[lo - 1] : 0, group_end[lo]};
}
"""
