"""The grouped tile scheduler (one tile index over all groups' tiles), as CUDA and its Python twin.

Each block reads offs (masked layout: counts) into shared memory, counts each group's tiles
(ceil(rows / BM) · ceil(N / BN)) and scans them with one warp. Tile t is in the first group whose prefix exceeds t (binary search).
In a group, tiles go in bands of BAND_M tile rows (0: the whole group is one band); in a band tile_m
runs fastest, so blocks running together share B panels in L2, and a band bounds the A rows they
read (a large group's rows need not all stay in L2 while its column tiles pass). Producer and
consumers map tiles alike from the same arrays: nothing passes between them.

The layout decides only where a group's rows are: contiguous (offs are cumulative ends, a group starts
where the one before ends) or masked (group g owns rows g·capacity onwards and holds counts[g] of them).

Clusters of two blocks (config.cluster = 2): the scheduler hands out *pairs*, one m-tile and two adjacent
tile columns 2j and 2j + 1, counted and banded as tiles are without clusters but over ceil(tiles_n / 2)
pair columns. Both blocks of a cluster walk the same pairs; rank r takes tile column 2j + r, none where
that is past the last column (an odd column count). The pair's blocks share the m-tile's rows of A.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ..kernels.config_base import ceil_div
from .spec import GroupedSpec, group_ends


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
    begins: tuple[int, ...] = ()  # each group's first row where it is not the end before (masked layout)
    cluster: int = 1  # blocks per cluster: the prefix counts units of `cluster` adjacent tile columns

    @property
    def units_n(self) -> int:
        """Scheduled columns: tile columns (cluster 1) or pairs of them (cluster 2)."""
        return ceil_div(self.tiles_n, self.cluster)

    @property
    def total(self) -> int:
        """Scheduled units: tiles, or pairs of tiles with clusters of two."""
        return self.tile_prefix[-1] if self.tile_prefix else 0

    def tile(self, t: int, rank: int = 0) -> Tile:
        """Unit t's tile for the cluster's block `rank`: tile_n == tiles_n where that block has none."""
        g = bisect_right(self.tile_prefix, t)  # the first group whose prefix exceeds t
        first = self.tile_prefix[g - 1] if g else 0
        begin = self.begins[g] if self.begins else self.ends[g - 1] if g else 0
        tiles_m = (self.tile_prefix[g] - first) // self.units_n
        tile_m, unit_n = band_place(t - first, tiles_m, self.units_n, self.band_m)
        return Tile(g, tile_m, min(unit_n * self.cluster + rank, self.tiles_n), begin, self.ends[g])

    def cluster_tiles(self, t: int) -> list[Tile]:
        """The tiles unit t gives the blocks of a cluster (one per rank that has one), sharing group and tile_m."""
        return [tile for tile in (self.tile(t, rank) for rank in range(self.cluster)) if tile.tile_n < self.tiles_n]


def band_place(local: int, tiles_m: int, tiles_n: int, band_m: int) -> tuple[int, int]:
    """(tile_m, tile_n) of a group's tile `local`: bands of band_m tile rows, tile_m fastest in a band."""
    band = band_m if 0 < band_m < tiles_m else tiles_m
    first = local // (band * tiles_n) * band  # the band's first tile row
    rows = min(band, tiles_m - first)  # the last band may be shorter
    within = local - first * tiles_n
    return first + within % rows, within // rows


def _prefix(rows: list[int], bm: int, units_n: int) -> tuple[int, ...]:
    """Inclusive prefix of each group's scheduled units: ceil(rows / bm) tile rows of units_n."""
    prefix, running = [], 0
    for count in rows:
        running += ceil_div(count, bm) * units_n
        prefix.append(running)
    return tuple(prefix)


def plan(offs: np.ndarray, total_m: int, n: int, bm: int, bn: int, band_m: int = 0, cluster: int = 1) -> TilePlan:
    ends = [int(e) for e in group_ends(offs, total_m)]
    rows = [max(end - (ends[g - 1] if g else 0), 0) for g, end in enumerate(ends)]
    tiles_n = ceil_div(n, bn)
    return TilePlan(tuple(ends), _prefix(rows, bm, ceil_div(tiles_n, cluster)), tiles_n, band_m, cluster=cluster)


def plan_masked(counts: np.ndarray, capacity: int, n: int, bm: int, bn: int, band_m: int = 0,
                cluster: int = 1) -> TilePlan:
    """The masked layout's plan: group g's rows from g·capacity, counts clamped to [0, capacity]."""
    rows = [min(max(int(c), 0), capacity) for c in counts]
    begins = [g * capacity for g in range(len(rows))]
    tiles_n = ceil_div(n, bn)
    ends = tuple(b + r for b, r in zip(begins, rows))
    return TilePlan(ends, _prefix(rows, bm, ceil_div(tiles_n, cluster)), tiles_n, band_m, tuple(begins), cluster)


def plan_for(spec: GroupedSpec, offs: np.ndarray, bm: int, out_bn: int, band_m: int = 0, cluster: int = 1) -> TilePlan:
    """The plan of `spec`'s kernel with BM x out_bn tiles of D (SwiGLU: a BN-wide wgmma tile writes BN / 2)."""
    if spec.masked_layout:
        return plan_masked(offs, spec.capacity, spec.n, bm, out_bn, band_m, cluster)
    return plan(offs, spec.total_m, spec.n, bm, out_bn, band_m, cluster)


def scheduler(band_m: int, capacity: int = 0, cluster: int = 1) -> str:
    """The CUDA scheduler with BAND_M tile rows a band (0: a band is the whole group); capacity > 0: the
    masked layout's group rows (counts), else the contiguous layout's (offs); cluster 2: it counts and places
    pairs of tile columns (PAIRS_N of them a tile row), and cluster_tile gives each block its column."""
    rows = _MASKED_ROWS.replace("CAPACITY_VALUE", str(capacity)) if capacity else _CONTIGUOUS_ROWS
    walk = _SCHEDULER if cluster == 1 else _SCHEDULER.replace("TILES_N", "PAIRS_N") + _CLUSTER_TILE
    return (f"\nconstexpr int BAND_M = {band_m};  // tile rows a band of a group's tiles (0: the whole group)\n"
            + _GROUP_ROWS + rows + walk)


_GROUP_ROWS = r"""
// A group's end row and its rows (0 where it is empty), as scan_groups reads them (the layout's read_group).
struct GroupRows { int end, rows; };
"""

_CONTIGUOUS_ROWS = r"""
// Contiguous layout (torch._grouped_mm): offs[g] is group g's end row, and it starts at group g-1's end.
// offs[g] clamped to [0, TOTAL_M] (offs[-1] = 0): a bad offset empties a group, never stores outside D.
__device__ __forceinline__ int clamped_end(const int* __restrict__ offs, int g) {
    return g < 0 ? 0 : min(max(__ldg(offs + g), 0), TOTAL_M);
}

__device__ __forceinline__ GroupRows read_group(const int* __restrict__ offs, int g) {
    const int end = clamped_end(offs, g);
    return GroupRows{end, max(end - clamped_end(offs, g - 1), 0)};  // a decreasing end: an empty group
}

// Group g's first row: the end of the group before (as scan_groups stored it).
__device__ __forceinline__ int group_begin(const int* group_end, int g) {
    return g ? group_end[g - 1] : 0;
}
"""

_MASKED_ROWS = r"""
// Masked layout (fixed shapes for CUDA graphs; the counts change on the device between replays): group g
// owns rows [g·CAPACITY, (g+1)·CAPACITY) of A and D and holds the first counts[g] of them, clamped to
// [0, CAPACITY]. Its other rows are never stored.
constexpr int CAPACITY = CAPACITY_VALUE;

__device__ __forceinline__ GroupRows read_group(const int* __restrict__ counts, int g) {
    const int rows = min(max(__ldg(counts + g), 0), CAPACITY);
    return GroupRows{g * CAPACITY + rows, rows};
}

// Group g's first row: its slot of CAPACITY rows.
__device__ __forceinline__ int group_begin(const int*, int g) {
    return g * CAPACITY;
}
"""

_SCHEDULER = r"""
// Warp 0: group_end[g], and tile_end[g] (inclusive prefix of tile counts): a lane counts its groups,
// a shuffle scan adds the lanes before. `rows_in`: offs, or counts in the masked layout (read_group).
__device__ __forceinline__ void scan_groups(const int* __restrict__ rows_in, int* group_end, int* tile_end) {
    constexpr int GROUPS_PER_LANE = (GROUPS + 31) / 32;
    const int lane = threadIdx.x % 32;
    const int first = lane * GROUPS_PER_LANE, last = min(first + GROUPS_PER_LANE, GROUPS);
    int mine = 0;  // this lane's groups' tiles, running
    for (int g = first; g < last; ++g) {
        const GroupRows group = read_group(rows_in, g);
        mine += (group.rows + BM - 1) / BM * TILES_N;
        group_end[g] = group.end;
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
    return GroupTile{lo, band_first + within % rows, within / rows, group_begin(group_end, lo), group_end[lo]};
}
"""

_CLUSTER_TILE = r"""
// Clusters of two: the walk above counts and places pairs (one m-tile, tile columns 2j and 2j + 1; PAIRS_N a
// tile row) and both blocks of a cluster take the same pairs. Block `rank` takes column 2j + rank; with an odd
// TILES_N the last pair's rank 1 gets TILES_N, no tile: it still loads its half of A for its peer.
__device__ __forceinline__ GroupTile cluster_tile(const int* group_end, const int* tile_end, int pair, int rank) {
    GroupTile tile = group_tile(group_end, tile_end, pair);
    tile.tile_n = min(tile.tile_n * CLUSTER + rank, TILES_N);
    return tile;
}
"""
