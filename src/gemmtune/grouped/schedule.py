"""The grouped tile scheduler (one tile index over all groups' tiles), as CUDA and its Python twin.

Each block reads offs into shared memory, counts each group's tiles (ceil(rows / BM) · ceil(N / BN))
and scans them with one warp. Tile t is in the first group whose prefix exceeds t (binary search).
In a group, tiles go in bands of BAND_M tile rows (0: the whole group is one band); in a band tile_m
runs fastest, so blocks running together share B panels in L2, and a band bounds the A rows they
read (a large group's rows need not all stay in L2 while its column tiles pass). Producer and
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
    band_m: int = 0  # tile rows per band (0: the whole group)

    @property
    def total(self) -> int:
        return self.tile_prefix[-1] if self.tile_prefix else 0

    def tile(self, t: int) -> Tile:
        g = bisect_right(self.tile_prefix, t)  # the first group whose prefix exceeds t
        first = self.tile_prefix[g - 1] if g else 0
        begin = self.ends[g - 1] if g else 0
        tiles_m = (self.tile_prefix[g] - first) // self.tiles_n
        tile_m, tile_n = band_place(t - first, tiles_m, self.tiles_n, self.band_m)
        return Tile(g, tile_m, tile_n, begin, self.ends[g])


def band_place(local: int, tiles_m: int, tiles_n: int, band_m: int) -> tuple[int, int]:
    """(tile_m, tile_n) of a group's tile `local`: bands of band_m tile rows, tile_m fastest in a band."""
    band = band_m if 0 < band_m < tiles_m else tiles_m
    first = local // (band * tiles_n) * band  # the band's first tile row
    rows = min(band, tiles_m - first)  # the last band may be shorter
    within = local - first * tiles_n
    return first + within % rows, within // rows


def plan(offs: np.ndarray, total_m: int, n: int, bm: int, bn: int, band_m: int = 0) -> TilePlan:
    ends = [int(e) for e in group_ends(offs, total_m)]
    tiles_n, prefix, running = ceil_div(n, bn), [], 0
    for g, end in enumerate(ends):
        rows = max(end - (ends[g - 1] if g else 0), 0)
        running += ceil_div(rows, bm) * tiles_n
        prefix.append(running)
    return TilePlan(tuple(ends), tuple(prefix), tiles_n, band_m)


def scheduler(band_m: int) -> str:
    """The CUDA scheduler with BAND_M tile rows a band (0: a band is the whole group)."""
    return f"\nconstexpr int BAND_M = {band_m};  // tile rows a band of a group's tiles (0: the whole group)\n" + _SCHEDULER


_SCHEDULER = r"""
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

// Tile t: its group (the first whose tile_end exceeds t), place (band_place), rows [row_begin, row_end).
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
    // Bands of BAND_M tile rows, tile_m fastest in a band: the blocks of a wave read a band's rows of A
    // and a few B panels, not every row of a large group.
    const int band = (BAND_M > 0 && BAND_M < tiles_m) ? BAND_M : tiles_m;
    const int band_first = local / (band * TILES_N) * band;
    const int rows = min(band, tiles_m - band_first);
    const int within = local - band_first * TILES_N;
    return GroupTile{lo, band_first + within % rows, within / rows, lo ? group_end[lo - 1] : 0, group_end[lo]};
}
"""
