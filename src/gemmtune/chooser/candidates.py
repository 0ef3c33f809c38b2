"""The configs the chooser ranks, per family: a short list of proven shapes of kernel, not a search.

simt: the tuned and ladder tiles from small (32×32, for shapes with few tiles) to 128×256, with k-slices
of 16 or 32 and 4 or 8 warps on small tiles, each with split-K (serial, or through a workspace for
more splits) where the shape has too few tiles to fill the GPU. wgmma: the persistent TMA-store kernel
with each tile size the family allows, plus the non-persistent variants (one tile per block). gemv:
block sizes and unrolls on CUDA cores, or the one measured tensor-core block shape where that path
runs the spec (while GEMV_TENSOR_CORES_UNTUNED is on). Every candidate returned passes the family's
constraints.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from ..kernels import get_family
from ..kernels.config_base import arch_number, ceil_div
from ..kernels.gemv.config import GemvConfig, outputs, quads, stream_kind, tensor_core_rejection, vec, vectors
from ..kernels.parts import dependent_launch
from ..kernels.simt.config import SimtConfig
from ..kernels.wgmma.config import (OUT_BYTES, WgmmaConfig, direct_stores, k_major, out_dtype, split_shapes, splits_fp32,
                                    staging_choice, swap_ab_suits, transposes_tf32, with_c_path)
from ..spec import GATE_ROWS, GemmSpec
from .features import output_tiles

SERIAL_SPLITS = (2, 3, 4)  # turns through D: the chain grows with the splits, so only a few
WORKSPACE_SPLITS = (2, 3, 4, 6, 8, 12, 16)  # the last split sums a workspace: about one turn at the end

# (bm, bn, bk, tm, tn, wm, wn, wniter): warp-tiled simt tiles that compile without spills on sm_80+.
SIMT_TILES: tuple[tuple[int, ...], ...] = (
    (128, 128, 16, 8, 4, 64, 32, 2),   # the ladder's double_buffer step
    (128, 128, 16, 8, 4, 64, 64, 4),   # tuned H100/H200 4096³
    (128, 256, 16, 16, 4, 128, 32, 2),  # tuned H200 4096³ (wide)
    (128, 256, 16, 8, 4, 32, 128, 2),  # tuned H200 2048³
    (64, 64, 16, 4, 8, 64, 16, 1),     # tuned H200 1024³
    (64, 128, 16, 8, 4, 32, 64, 2),
    (128, 64, 16, 8, 4, 64, 32, 2),
    (64, 64, 16, 4, 4, 32, 32, 2),
    (32, 64, 16, 4, 4, 32, 32, 2),     # small tiles: more blocks for small and skinny shapes
    (64, 32, 16, 4, 4, 32, 32, 2),
    (32, 128, 16, 4, 4, 32, 64, 2),
    (32, 32, 16, 4, 4, 32, 32, 2),
    # Deeper k-slices (bk 32): twice the bytes in flight per slice and half the barriers, for shapes
    # whose few blocks per SM leave each slice's global-memory latency exposed.
    (64, 64, 32, 4, 8, 64, 16, 1),
    (64, 64, 32, 4, 4, 32, 32, 2),
    (64, 128, 32, 8, 4, 32, 64, 2),
    (128, 64, 32, 8, 4, 64, 32, 2),
    (32, 64, 32, 4, 4, 32, 32, 2),
    (64, 32, 32, 4, 4, 32, 32, 2),
    (32, 32, 32, 4, 4, 32, 32, 2),
    # Eight warps on a small tile (fewer accumulators each): more warps to hide latency per block.
    (64, 64, 16, 4, 4, 32, 16, 1),
    (64, 128, 16, 4, 4, 64, 16, 2),    # tuned H200 1024³ (runner-up, there with pad 4)
    (128, 64, 16, 4, 8, 64, 16, 1),
)


def simt_tiles(async_copy: bool = True) -> list[SimtConfig]:
    """SIMT_TILES as double-buffered configs: slices copied by cp.async (sm_80+), or staged through
    registers where the arch has no cp.async (sm_75: the T4)."""
    return [SimtConfig(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, wm=wm, wn=wn, wniter=wi, vec=4, stages=2,
                       async_copy=async_copy, pad=0, unroll=8)
            for bm, bn, bk, tm, tn, wm, wn, wi in SIMT_TILES]


def useful_splits(tiles: int, k_slices: int, sm_count: int) -> list[int]:
    """split_k values worth ranking: more than 1 only for shapes with under ~3 waves of SMs' worth of
    tiles, while the blocks stay within ~6 per SM and each split keeps at least 4 k-slices."""
    if tiles >= 3 * sm_count:
        return [1]
    return [1] + [s for s in sorted(set(SERIAL_SPLITS + WORKSPACE_SPLITS))
                  if tiles * s <= 6 * sm_count and s <= k_slices // 4]


WORKSPACE_MAX_ACCUMULATORS = 64  # threads holding 128 sums spill in the workspace sum (ptxas, sm_90)


def split_variants(tile: SimtConfig, splits: int) -> list[SimtConfig]:
    if splits == 1:
        return [tile]
    found = [tile.with_(split_k=splits)] if splits in SERIAL_SPLITS else []
    if splits in WORKSPACE_SPLITS and tile.accumulators <= WORKSPACE_MAX_ACCUMULATORS:
        found.append(tile.with_(split_k=splits, split_reduce="workspace"))
    return found


def simt_candidates(spec: GemmSpec, arch: str, sm_count: int) -> list[SimtConfig]:
    found = []
    for tile in simt_tiles(async_copy=arch_number(arch) >= 80):  # cp.async: sm_80 and later
        tiles = output_tiles(spec, tile.bm, tile.bn)
        for s in useful_splits(tiles, math.ceil(spec.k / tile.bk), sm_count):
            found += split_variants(tile, s)
    return found


WGMMA_TILES = ((128, 256), (128, 128), (256, 128), (128, 192), (64, 256), (64, 128), (128, 64), (64, 64))


def wgmma_candidates(spec: GemmSpec, arch: str, sm_count: int) -> list[WgmmaConfig]:
    if splits_fp32(spec):
        return split_candidates_untuned(spec)
    found = []
    # Staged operands (copied into 128-byte rows first) where TMA refuses the rows; both ways where
    # they start 16 bytes off a sector (the model sees the rows' alignment, the chooser adds the
    # copies' estimated time: chooser._scores).
    for stage, (bm, bn) in itertools.product(staging_choice(spec), wgmma_tiles(spec)):
        # The tail split along K (split_tail) on every persistent candidate: where it splits it
        # measured 1.1-2.6x faster (H100, git show dcdd80f:bench/results/2026-11-23-h100-wgmma-variants.md run 8), and
        # elsewhere it changes nothing (the model sees its schedule: features.schedule_features).
        base = WgmmaConfig(bm=bm, bn=bn, consumers=1 if bm == 64 else 2, stages=4, specialized=True,
                           persistent=True, group_m=8, cluster_m=1, tma_store=True, split_tail=True,
                           stage_operands=stage)
        stored = (with_write_back_options(base, spec) if not spec.epilogue.reads_c
                  else _c_through_ring(base, spec, sm_count))
        found.append(stored)
        for variant in (base.with_(tma_store=False),
                        base.with_(persistent=False, group_m=1, tma_store=False, split_tail=False)):
            found.append(with_write_back_options(variant, spec))
        # Clusters that multicast B where the tiles are few (the model learned them from 194 timings:
        # bench/results/2026-11-26-h100-chooser-rows-wgmma-aligned.csv.gz).
        found += [stored.with_(cluster_m=c) for c in cluster_sizes(spec, bm, bn, sm_count)]
    return found


def cluster_sizes(spec: GemmSpec, bm: int, bn: int, sm_count: int) -> tuple[int, ...]:
    """Clusters of blocks along M that share B (each loads a share and multicasts it), where the tiles
    are fewer than the SMs, so the split tail cuts every tile along K and the blocks stream A and B out
    of L2 with little reuse between them: there a pair's shared B cut the L2 reads of 512x512x65536
    by a third, 84.8 -> 71-75 µs in bf16 and 155 -> 123-126 in tf32 (H100, 2026-11-26,
    git show dcdd80f:bench/results/2026-11-26-h100-wgmma-clusters.md), where at 4096^3, 1536x6144x1536 and
    2560x7168x2048 every cluster ran 1-15% slower. Clusters of 2 on tiles 128 or 256 wide, of 4 on
    256-wide ones; only where the tile rows fill every cluster."""
    tiles_m = math.ceil(spec.m / bm)
    if tiles_m * math.ceil(spec.n / bn) >= sm_count:
        return ()
    return tuple(c for c in (2, 4) if bn % (64 * c) == 0 and (c == 2 or bn == 256) and tiles_m >= c)


# Tile widths fitted to N (wgmma config.MEASURED_BN). The model, trained on the four measured widths,
# cannot rank other widths: among the pick and its fitted variants on 7 shapes it put first a variant
# measured up to 25% slower (H100, 2026-11-26, `git show a5c16f7:bench/results/2026-11-26-h100-wgmma-fitted-width.md`). So
# the model ranks the measured widths and each pick then takes its fitted twin: the same tiles across
# N, each as narrow as covers N in them (bn = 8*ceil(N / 8t)), where that cuts the columns computed by
# at least FIT_MIN_SAVING. The twin stores D directly (a TMA store needs 128-byte rows in every slice)
# and runs no cluster, so a parent that stores through TMA keeps its width. Measured (H100, 2026-11-26,
# that table and `git show a5c16f7:bench/results/2026-11-26-h100-wgmma-fitted-twins.md`), parents storing directly: every
# twin faster, 5-52% (5000x300x2048 tf32 0.79 -> 1.20x cuBLAS in 128x104 for 128x128; 6-8% savings
# gained 5-8%: 2048x900x2048 fp16, 2048x600x4096 tf32, 3000x300x3000 tf32 tt); parents storing through
# TMA: the twin faster once (8192x200x2048 bf16, 19% saved) and slower three times (16384x200x1024
# fp16, 22% saved, 12% slower; 4096x168x8192 bf16 and 6000x232x2048 bf16 tt).
FIT_MIN_SAVING = 0.06


def fitted_twin(spec: GemmSpec, config: Any) -> WgmmaConfig | None:
    """The config's twin with its tile width fitted to N (the GEMM's columns: 2N for a gated spec, in steps of 16;
    see FIT_MIN_SAVING), or None where it has none:
    fp32 (3xtf32), B stored N-contiguous (boxes of 64 columns), a parent storing through TMA or running
    clusters (3000x1000x1000 bf16: the cluster pick 0.89x, fitted variants without 0.49-0.62x), a saving
    under the threshold, or a twin the family rejects."""
    if (not isinstance(config, WgmmaConfig) or splits_fp32(spec) or not k_major(spec)[1] or config.tma_store
            or config.cluster_m > 1):
        return None
    n, step = spec.gemm_n, 2 * GATE_ROWS if spec.gated else 8  # a gated tile holds whole gate/up pairs
    across = math.ceil(n / config.bn)
    width = step * math.ceil(n / (step * across))
    if width < 64 or 1 - width / config.bn < FIT_MIN_SAVING:
        return None
    # (Without a TMA store the parent has none of the options a narrower tile's rows would refuse.)
    twin = _deepest(config.with_(bn=width), spec)
    return None if get_family("wgmma").rejections(twin, spec, "sm_90a") else twin


# swap-AB (WgmmaConfig.swap_ab) for A of a few rows (decode tokens, small MoE experts): the kernel of Dᵀ = B·Aᵀ,
# 64 rows of B (the weights) by all of A's rows a tile, 10 ring stages, the split tail. cuBLAS runs such
# shapes this way (ncu, H200: nvjet_sm90_tst_64x40 "TNT" on 40x5120x5120, 80 blocks, 67% of DRAM bandwidth
# against our 64x128 pick's 57%). Measured against the picks before it on 14 bf16 shapes outside the model
# suite (H200, 2026-11-29, git show 78435b0:bench/results/2026-11-29-h200-swap-ab.md): at 4-112 rows 0.94-1.04x cuBLAS where
# the picks ran 0.74-0.98x (40x5120x5120 0.859 -> 0.983, 112x5120x5120 0.754 -> 0.961, 8x5120x5120 0.873 ->
# 1.012); 1 row: the gemv rows kernel stays (1.19x against 1.04x), 200 rows: slower (0.77x against 0.83x).
# With a residual add (C read transposed, each row's C before its stores), 6 more shapes: 0.79-0.97x where the
# picks ran 0.68-0.93x (git show 78435b0:bench/results/2026-11-29-h200-swap-ab.md, second table).
# (wgmma.config.SWAP_AB_ROWS: 4-128 rows; at 4-16 the gemv family yields to it.)
SWAP_AB_STAGES = 10


def swap_ab_config(spec: GemmSpec, arch: str) -> WgmmaConfig | None:
    """The swap-AB rule's config for `spec` (wgmma.config.swap_ab_suits), or None where the rule does not apply."""
    if not swap_ab_suits(spec, arch):
        return None
    config = _deepest(WgmmaConfig(bm=64, bn=8 * ceil_div(spec.m, 8), stages=SWAP_AB_STAGES, consumers=1,
                                  specialized=True, persistent=True, group_m=8, split_tail=True, swap_ab=True),
                      spec, SWAP_AB_STAGES)
    return None if get_family("wgmma").rejections(config, spec, arch) else config


# Where M fits one 64-row tile, taller tiles are mostly rows outside D: wgmma work and, where the tiles are
# few and split along K, partial-sum traffic through L2 for nothing, while no operand is reused more. The
# model (trained on few such shapes) ranked 128-row tiles first there and they ran 0.55-0.77x cuBLAS
# where 64-row ones ran 0.77-0.89x (H200, 2026-11-29, 24x4096x4096, 40x1024x4096, 40x3072x8192 bf16,
# every ranked candidate timed: git show 6cb72f4:bench/results/2026-11-29-h200-short-m-tiles.md).
SHORT_M_ROWS = 64


def short_m_tiles(spec: GemmSpec, tiles: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """`tiles`, less those taller than SHORT_M_ROWS where M fits that many rows."""
    if spec.m > SHORT_M_ROWS:
        return tiles
    short = tuple((bm, bn) for bm, bn in tiles if bm <= SHORT_M_ROWS)
    return short or tiles


def wgmma_tiles(spec: GemmSpec) -> tuple[tuple[int, int], ...]:
    """WGMMA_TILES, less those a transposed tf32 operand (stored MN-major) makes slow: the consumers'
    transpose costs 4/BM bytes of shared memory a FLOP for B (4/BN for A), which the model, trained
    on K-major operands, does not see. With B alone transposed, tiles at least as tall as wide; with
    A alone, at least as wide as tall; never 128x192 (H100, 2026-11-26, bench/results/
    `git show a5c16f7:bench/results/2026-11-26-h100-transposed-wgmma.md`: nn 4096^3 128x192 0.68x cuBLAS, 128x256 0.74x, 256x128
    0.82x; tt 4096^3 128x192 0.71x, 128x256 0.88x). In layout nt the model keeps every tile: taking
    128x192 away there moved its picks to 128x128 and the tf32 eval geomean from 0.998 to 0.996x."""
    tiles = short_m_tiles(spec, WGMMA_TILES)
    if not transposes_tf32(spec):
        return tiles
    tiles = tuple(tile for tile in tiles if tile != (128, 192))
    a_kmajor, b_kmajor = k_major(spec)
    if a_kmajor and not b_kmajor:
        return tuple((bm, bn) for bm, bn in tiles if bm >= bn)
    if b_kmajor and not a_kmajor:
        return tuple((bm, bn) for bm, bn in tiles if bn >= bm)
    return tiles


def split_candidates_untuned(spec: GemmSpec) -> list[WgmmaConfig]:
    """fp32 as 3xtf32: the tile shapes that led on an H100 and an H200 (2026-11-26, bench/results/
    `git show a5c16f7:bench/results/2026-11-26-h100-3xtf32-wgmma.md`): 128x192 in 3 stages with D stored in 6 slices (C through the
    ring) where the tiles fill the GPU (2.04x cuBLAS SGEMM at 4096^3 against 1.88x for 128x128 on
    the H100), 64x128 in 6 stages for grids of few tiles (1.5-1.6x at 1000^3); 128x128 between
    them. The tail split on all."""
    family = get_family("wgmma")
    found = []
    for config in split_shapes(spec):  # where D's rows do not suit a TMA store: direct stores
        for variant in (config, direct_stores(config)):
            if not family.rejections(variant, spec, "sm_90a"):
                found.append(variant)
                break
    return found


# Options every tuned wgmma config in data/known_configs.json carries (bf16, fp16 and tf32 at 4096³
# and 8192³, H100 and H200) and the model cannot weigh (it was trained without them). On the untuned
# eval set's wgmma shapes (H100, 2026-11-26, git show 5f4c93d:bench/probes/wgmma_chooser_options.py), adding them to
# the chooser's pick moved the geomean from 1.024 to 1.039× cuBLAS (bf16) and from 0.877 to 0.976×
# (tf32, where the unsliced 4-byte store tile had left the 128x256 tile 2 ring stages).
WRITE_BACK_OPTIONS = ("stmatrix", "serpentine", "overlap_epilogue")
# overlap_epilogue issues every wgmma half the tile wide: 64 columns on 128-wide tiles, where it cost
# 11-14% (H200, 2026-11-29, 128x128 picks of 6336x1024x4096 bf16/fp16 and 6336x768x2048 bf16: 0.75 ->
# 0.85x cuBLAS without it; 256x128 picks 1% slower with it) and changed -1..+2% on 128x256 picks
# (git show b22fc74:bench/results/2026-11-29-h200-three-consumers.md).
OVERLAP_MIN_BN = 256


def overlap_pays(config: WgmmaConfig, spec: GemmSpec) -> bool:
    """Whether overlap_epilogue may be offered: in 16-bit types not on one consumer's 64-row tiles, nor on
    tiles of 2 consumers narrower than OVERLAP_MIN_BN (what was measured; tf32 keeps it). On 64x128
    one-consumer picks of 6 bf16 shapes outside the model suite (M 96-320), the pick with the overlap ran
    0.78-1.02x cuBLAS, without it 0.82-1.09x, and with the ring stage it costs given back 0.84-1.14x
    (git show e11d17b:bench/results/2026-11-29-h200-decode-splits.md; _deepest still stops at 6 stages)."""
    if spec.dtype not in ("bf16", "fp16"):
        return True
    return not (config.consumers == 1 or (config.consumers == 2 and config.bn < OVERLAP_MIN_BN))


def with_write_back_options(config: WgmmaConfig, spec: GemmSpec) -> WgmmaConfig:
    """The config with the TMA store in column slices (2, else 4; for a 4-byte D 4 first), the
    deepest ring that then fits, and each of WRITE_BACK_OPTIONS the family accepts with it (an option
    may cost at most one ring stage)."""
    family = get_family("wgmma")
    best = _deepest(config, spec)
    if config.tma_store:
        wide_d = OUT_BYTES.get(out_dtype(spec)) == 4
        for slices in ((4, 2) if wide_d else (2, 4)):
            sliced = _deepest(config.with_(store_slices=slices), spec)
            if not family.rejections(sliced, spec, "sm_90a") and sliced.stages >= best.stages:
                best = sliced
                break
    for option in WRITE_BACK_OPTIONS:
        if option == "overlap_epilogue" and not overlap_pays(best, spec):
            continue
        trial = _deepest(best.with_(**{option: True}), spec)
        if not family.rejections(trial, spec, "sm_90a") and trial.stages >= best.stages - 1:
            best = trial
    return best


def _c_through_ring(config: WgmmaConfig, spec: GemmSpec, sm_count: int) -> WgmmaConfig:
    """Where the epilogue reads C: C through the ring (c_ring) in the fewest store slices that fit a
    slot, the deepest ring beside them (fused fp16 4096^3 on an H100: 191.4 µs against 195.1 with
    the C tile in its own buffer), with the rest of the C path where blocks run several tiles
    (with_c_path: the model cannot see those options, measured as its docstring says); else the C
    tile in 16-row boxes (c_spread)."""
    family = get_family("wgmma")
    for slices in (1, 2, 4):
        ring = _deepest(config.with_(c_ring=True, store_slices=slices), spec)
        if not family.rejections(ring, spec, "sm_90a"):
            return with_serpentine(with_c_path(ring, spec, "sm_90a", sm_count), spec)
    return with_serpentine(_deepest(config.with_(c_spread=True), spec), spec)


def with_serpentine(config: WgmmaConfig, spec: GemmSpec) -> WgmmaConfig:
    """The config walking K back and forth (serpentine) where the family takes it: the plain picks carry
    it (WRITE_BACK_OPTIONS) and it is a matter of the schedule, not of where C goes; the C paths had
    gone without it. On the probe's shapes it changed nothing (±0.3%, H200, 2026-11-29,
    git show b22fc74:bench/results/2026-11-29-h200-fused-paths.md); where the plain pick's long-K or few-tile schedule
    needs it, C-reading kernels without it ran 17-27% slower than with it (the same day's runs with and
    without, same table)."""
    trial = config.with_(serpentine=True)
    return trial if not get_family("wgmma").rejections(trial, spec, "sm_90a") else config


# Tile widths fitted to one wave where M takes two 128-row tiles (MoE experts of 193-256 tokens, wide N): the
# pick's 128x256 or 128x192 tiles number between half the SMs and all of them, so a part of the GPU idles through
# the only wave; W = 16*ceil(N / (16 * SMs/2)) makes at most one tile a SM, each narrower. Such a width is not
# whole 128-byte rows: its TMA store ends in an overlapping box (WgmmaConfig.ragged_slice), in 2 slices (the
# buffer of one whole slice leaves 3 ring stages, which lost). H200, 2026-11-29, 8 shapes outside the suite
# (bench/results/2026-11-29-h200-small-tiles.md): where this rule applies, 3 of 3 faster by 9-11%; at 160 rows
# (outside it) 7% slower. Then on 36 of its 72 moved picks of a grid of its own (M 196-248, N 9728-16000, K
# 1536-5120, plain/bias/bias+GELU; same table): 34 faster, geomean 1.076x; the 2 slower at 196 rows and K 5120.
WAVE_WIDTH_ROWS = (193, 256)


def wave_width_config(spec: GemmSpec, pick: Any, sm_count: int) -> WgmmaConfig | None:
    """The pick's twin of the width that fits its two rows of tiles in one wave (WAVE_WIDTH_ROWS), or None."""
    if (not isinstance(pick, WgmmaConfig) or spec.dtype not in ("bf16", "fp16") or spec.layout != "nt"
            or spec.gated or spec.epilogue.reads_c or not (WAVE_WIDTH_ROWS[0] <= spec.m <= WAVE_WIDTH_ROWS[1])
            or pick.bm != 128 or pick.consumers != 2 or pick.pingpong or not pick.tma_store or pick.swap_ab):
        return None
    tiles = 2 * math.ceil(spec.n / pick.bn)
    if not sm_count // 2 < tiles < sm_count:
        return None
    width = 16 * math.ceil(spec.n / (16 * (sm_count // 2)))
    if width >= pick.bn or width % 32 or width % 64 == 0:  # measured: ragged widths in 2 slices (whole boxes: not yet)
        return None
    twin = _deepest(pick.with_(bn=width, store_slices=2, overlap_epilogue=False, cluster_m=1), spec)
    if get_family("wgmma").rejections(twin, spec, "sm_90a") or twin.stages < 4:
        return None
    return twin


# A pick of at most 64x64 (16 KB ring stages in 16-bit types; short pieces, little streamed a block) takes a
# ring of 10 stages instead of _deepest's 6: on 6 bf16 shapes outside the model suite where the pick was such a
# tile (MoE-like, M 200-400, N 512-1024, K 1536-2048) it ran 1.02-1.08x faster, 0.89-0.95 -> 0.91-1.03x cuBLAS
# (H200, 2026-11-29, bench/results/2026-11-29-h200-small-tiles.md); of the 242 picks it moves on a grid outside the
# suite (M 100-1000, N 256-2048, K 1024-7168), 61 timed: geomean 1.028x, 0.967-1.072x (4 slower, at K 4096-7168
# with N <= 512). Applied to the pick only: offered to the model as candidates, the deeper ring moved 344 of the
# grid's 560 picks (the model sees stages), most to 64x64 tiles from 64x128 ones, which nothing measured supports.
SMALL_TILE_RING_STAGES = 10


def small_tile_ring(config: Any, spec: GemmSpec) -> WgmmaConfig | None:
    """The pick with the deeper ring of SMALL_TILE_RING_STAGES where it is a wgmma tile of at most 64x64 in a
    16-bit type and fewer stages, else None."""
    if (not isinstance(config, WgmmaConfig) or config.bm * config.bn > 64 * 64 or config.swap_ab
            or spec.dtype not in ("bf16", "fp16") or config.stages >= SMALL_TILE_RING_STAGES):
        return None
    deeper = _deepest(config, spec, SMALL_TILE_RING_STAGES)
    return deeper if deeper.stages > config.stages else None


def _deepest(config: WgmmaConfig, spec: GemmSpec, most: int = 6) -> WgmmaConfig:
    """The config with the most stages (up to `most`) that fits shared memory; unchanged where none does."""
    family = get_family("wgmma")
    for stages in range(most, 1, -1):
        if not family.rejections(config.with_(stages=stages), spec, "sm_90a"):
            return config.with_(stages=stages)
    return config


# Whether the chooser hands an untuned shape the gemv tensor-core kernel. On since its GPU tests
# passed (tests/test_gpu_gemv_tensor_cores.py) and the probe (git show 5f4c93d:bench/probes/gemv_tensor_cores.py, H100,
# 2026-11-26) measured it 1.1-2.3x faster than the CUDA-core kernel at 4-16 rows in bf16 and fp16,
# 1.2-1.8x in tf32 (git show dcdd80f:bench/results/2026-11-26-h100-gemv-tensor-cores.md; tf32: git show d8ef8a3:bench/results/2026-11-26-h100-gemv-tensor-cores-tf32.md).
GEMV_TENSOR_CORES_UNTUNED = True

# The tensor-core block shape untuned shapes get: 8 warps splitting K over two 8-output mma tiles,
# 4 loads of W in flight per thread. In that probe it was within 1.2% of the fastest of 7 block
# shapes on all 10 shape/dtype rows back to back, and within 1.6% in single launches (16x4096x4096,
# 16x14336x4096, 8x4096x4096, 4x4096x4096, 16x4096x14336; bf16 and fp16), where the model's pick among
# them (it ranks by launch geometry, trained before the kernel existed) was up to 5% slower. The
# tuner's space keeps every block shape.
UNTUNED_TENSOR_CORE_CONFIG = GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True, mma_tiles=2)

# The columns kernel on tensor cores (layout nn: fp32 as 3xtf32, tf32 as one product): per dtype, the
# vectors from which untuned shapes get it (a dtype left out: never), and its block shape. H100,
# 2026-11-26 (git show 982ee83:bench/results/2026-11-26-h100-gemv-columns-tensor-cores.md, back to back): tf32 at 16
# and 8 vectors streamed 88% and 89% of copy against the CUDA-core kernel's 77% and 85%, at 4 vectors
# 89% against 90%. fp32 (three products and the split) streamed 73-77% against 77-90% at 4-16 vectors
# on 4096x4096 and level at 16x14336x4096 and 16x4096x14336 (faster only in single launches at 16
# vectors), so the CUDA-core kernel keeps fp32; the tuner's space has both.
COLUMNS_TENSOR_CORE_MIN_ROWS: dict[str, int] = {"tf32": 8}
UNTUNED_COLUMNS_TENSOR_CORE_CONFIG = GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True,
                                                mma_tiles=4)


# One vector against a K-contiguous W (the CUDA-core rows kernel, M = 1 or N = 1): two outputs a
# 512-thread block, each output's K split over 8 of its 16 warps, unroll 2 for 2-byte values and 4 for
# 4-byte ones. On sm_90 and later (dependent launch), H100, 2026-11-27 (bench/probes/
# gemv_block_shapes_stream.py, bench/results/2026-11-27-h100-gemv-one-vector-blocks.md), back to back:
# 1x1024x4096 bf16 64 -> 79% of copy, fp16 64 -> 80%, tf32 75 -> 94-95%, 4096x1x4096 bf16 91 -> 99%,
# 1x11008x4096 100 -> 102%, level (±2%) on the other M = 1 rows of the eval set; launched alone within 2%
# of the model's picks (which it ranks from single launches, where the shapes hardly differ).
ONE_VECTOR_ROWS_CONFIG = {2: GemvConfig(threads=512, warps_per_output=8, unroll=2),
                          4: GemvConfig(threads=512, warps_per_output=8, unroll=4)}


# The columns kernel walking K in quads (gemv render.quads: 4-byte values, several vectors stored
# along K) wants few wide blocks: 512 threads, as many across the outputs as still give every SM
# about one block, a short unroll at 16 vectors. In the probe (git show 5f4c93d:bench/probes/gemv_columns_quads.py,
# H100, 2026-11-26) this shape was the fastest of 45 block shapes or within 4% of it on 5 shapes at
# 2-16 vectors, while the model's pick (trained on the row-by-row kernel: 128 threads, 2 across) ran
# 1.2-1.7x slower in quads than this one.
QUAD_BLOCK_THREADS = 512
QUAD_ACROSS = (32, 16, 8, 4, 2)  # threads across the outputs, widest first
QUAD_SM_SHARE = 0.8  # the widest whose blocks number at least this share of the SMs
QUAD_RULE_MIN_ROWS = 4  # below this the model's pick is kept (at 2 vectors quads and rows ran alike)
# With 5-8 vectors, two 256-thread blocks per SM instead (the sums leave room for both): after the
# block's partial sums were reduced by shuffles (2026-11-26, bench/results/2026-11-26-h100-gemv-columns-
# reduction.md), 8x4096x4096 streamed 26.0 µs in 256-thread blocks 4 across against 29.1 at the
# 512-thread shape, and 8x14336x4096 85.4 against 104.8; at 4 and 12 vectors the 512-thread shape
# stayed the faster (git show 982ee83:bench/results/2026-11-26-h100-gemv-columns-quads-2.md). 5-7 vectors are unmeasured.
# Unroll 1 there: at unroll 4 ptxas spills 8 bytes at 8 vectors (unroll 1 and 4 streamed 26.3 and 26.0
# µs; unroll 2, tried untested first, streamed 32.6: git show 982ee83:bench/results/2026-11-26-h100-gemv-stream.md's notes).
QUAD_PAIR_ROWS = (5, 8)  # vectors, inclusive
QUAD_PAIR_THREADS = 256
QUAD_PAIR_SM_SHARE = 1.6  # blocks for about two per SM
# Above 8 vectors (128 registers a thread: one 512-thread block per SM) blocks past one per SM run
# in rounds: 172 blocks on 132 SMs leave 40 SMs a second block while the rest idle, so the widest
# width must also keep the last round this full (whole rounds over the blocks' rounds, at most
# QUAD_IMBALANCE). H100, 2026-11-26, back to back (`git show ab42bb6:bench/results/2026-11-26-h100-gemv-quads-rounds.md`):
# 16x11008x4096 16 across (172 blocks) 63% of copy, 8 across (344, 3 rounds of 2.6) 74%;
# 16x5120x4096 8 across (160) 55%, 4 across (320) 57%. At 4 vectors (68 registers) and in the paired
# shape the same rule lost (4x11008x4096: 16 across 99%, 8 across 91%; 6x11008x4096: 8 across 97%,
# 4 across 85%), so it stops at QUAD_PAIR_ROWS.
QUAD_IMBALANCE = 1.25


def widest_strips(spec: GemmSpec, sm_count: int, widths: tuple[int, ...], share: float, in_rounds: bool) -> int | None:
    """The first of `widths` (threads across the outputs, 4 fp32 outputs each, widest first) whose strips give
    at least `share` blocks an SM, and, `in_rounds` (one block an SM at a time), whose last round of blocks is at
    least 1/QUAD_IMBALANCE full; None where none does."""
    for width in widths:
        blocks = ceil_div(outputs(spec), 4 * width)
        rounds = blocks / sm_count
        balanced = not in_rounds or rounds <= 1 or math.ceil(rounds) / rounds <= QUAD_IMBALANCE
        if blocks >= share * sm_count and balanced:
            return width
    return None


def quad_config(spec: GemmSpec, sm_count: int) -> GemvConfig:
    """The columns-in-quads block shape for `spec` on a GPU of `sm_count` SMs (see QUAD_BLOCK_THREADS)."""
    paired = QUAD_PAIR_ROWS[0] <= vectors(spec) <= QUAD_PAIR_ROWS[1]
    threads, share = (QUAD_PAIR_THREADS, QUAD_PAIR_SM_SHARE) if paired else (QUAD_BLOCK_THREADS, QUAD_SM_SHARE)
    in_rounds = vectors(spec) > QUAD_PAIR_ROWS[1]
    width = widest_strips(spec, sm_count, QUAD_ACROSS, share, in_rounds) or QUAD_ACROSS[-1]
    unroll = 1 if in_rounds or paired else 4
    return GemvConfig(threads=threads, warps_per_output=1, threads_x=width, unroll=unroll)


# One vector of few outputs against W stored along the outputs (the columns kernel, layout nn at M = 1):
# strips of outputs alone give at most ~128 blocks there, and a read of 8-16 MB needs ~4 blocks an SM
# and the dependent-launch start. So K is split 16 ways over a cluster (GemvConfig.k_splits, sums meeting
# in the first block's shared memory) in 256-thread blocks, 16 across the outputs (256-byte strips of
# each row) where that still gives SPLIT_SM_SHARE blocks an SM, else 8 (128-byte strips; narrower strips
# read slower). H100, 2026-11-27, back to back against the chooser's unsplit pick (bench/results/
# 2026-11-27-h100-gemv-cluster-k-splits-early.md): fp32 1x512x4096 28 -> 55% of copy, 1x1024x4096 60 ->
# 79-81%, 1x1536x4096 71 -> 75%, 1x2048x4096 77 -> 86-89%, 1x1000x4100 58 -> 72%, 1x1024x1024 22 -> 36%,
# 1x1024x11008 77 -> 92%; bf16 (fp16 the same) 1x512x4096 19 -> 29%, 1x1024x4096 25 -> 45%, 1x2048x4096
# 57 -> 68%, 1x4096x4096 59 -> 83%. Past rows of 8 KB every split lost (fp32 2560 outputs: 80 -> 67-70%,
# 3072: 86 -> 73-85%), and 2 vectors want other shapes (2x1024x4096 fp32: 68% at 512 threads 8 ways,
# 49% in this one).
SPLIT_RULE_MAX_ROW_BYTES = 8192  # inclusive: 2048 fp32 outputs, 4096 bf16
SPLIT_WAYS = 16
SPLIT_SM_SHARE = 2.5  # blocks per SM the wider strips must still give (1536 fp32 outputs: 2.9 -> 16 across)
SPLIT_ARCHS = (90,)  # measured on sm_90 only (clusters of 16 also exist on sm_100: unmeasured)
# Off since 2026-11-29: compute-sanitizer's synccheck reports "Divergent thread(s) in warp" at the block barrier
# of the split's partial-sum pass in 1-3 of every 6-10 runs (H200), with the cluster wait moved after that
# barrier, with the dependent launch, its prefetch or the early cluster arrive each removed; the unsplit
# kernel of the same block shape stayed clean (git show 6cb72f4:bench/results/2026-11-29-h200-synccheck-k-split.md). Until
# that is understood, no untuned or tuned pick takes the split (the tuner's space holds k_splits = 1 only);
# GemvConfig(k_splits=...) still builds it when asked for by name.
CLUSTER_SPLIT_UNTUNED = False


def split_config(spec: GemmSpec, sm_count: int) -> GemvConfig:
    """The K-split columns block shape for one vector of few outputs (see SPLIT_WAYS)."""
    wide_strips = ceil_div(outputs(spec), 16 * vec(spec))
    across = 16 if wide_strips * SPLIT_WAYS >= SPLIT_SM_SHARE * sm_count else 8
    return GemvConfig(threads=256, warps_per_output=1, threads_x=across, unroll=4 if across == 8 else 2,
                      k_splits=SPLIT_WAYS)


def split_rule(spec: GemmSpec, arch: str, sm_count: int) -> GemvConfig | None:
    """split_config where its rule applies to `spec` on `arch` and the family takes it, else None."""
    if (not CLUSTER_SPLIT_UNTUNED or stream_kind(spec) != "columns" or vectors(spec) != 1
            or outputs(spec) * spec.element_bytes > SPLIT_RULE_MAX_ROW_BYTES or arch_number(arch) not in SPLIT_ARCHS):
        return None
    config = split_config(spec, sm_count)
    return None if get_family("gemv").rejections(config, spec, arch) else config


# The columns kernel in quads fed by TMA (GemvConfig.ring_stages): from 8 vectors of fp32 or tf32 on, 256
# consumer threads, a ring of 4 stages, unroll 1 above 12 vectors (2 up to 12 where a stage stays within a
# TMA box), and the widest strip of RING_ACROSS that the quads rule would take (blocks for QUAD_SM_SHARE of
# the SMs, the last round at least 1/QUAD_IMBALANCE full); where no width gives that many blocks the
# register-fed pick stays. H100, 2026-11-27,
# back to back against the chooser's register-fed pick (git show 5f4c93d:bench/probes/gemv_columns_tma.py, bench/results/
# 2026-11-27-h100-gemv-columns-ring.md): fp32 16x4096x4096 77 -> 88% of copy, 16x4096x14336 87 -> 97%,
# 16x11008x4096 74 -> 86%, 16x14336x4096 87 -> 91% (16 across; 8 across 85%), 16x2048x4096 60 -> 72% (4
# across), 12x4096x4096 82 -> 88%, 8x4096x4096 84 -> 90-91%, 8x14336x4096 93 -> 94%; tf32 (against the
# tensor-core pick) 16x4096x4096 86 -> 88%, 8x4096x4096 88 -> 90-91%. Lost: 16x1000x4100 (32-63 blocks at
# any width) 38 -> 34-35%.
# 2-7 vectors take it in 128-byte strips (8 across, unroll 2) only where those strips number at most one an
# SM: it won there on every shape measured and lost past it (bench/results/2026-11-27-h100-gemv-columns-ring.md,
# section 4): 2x1024x4096 60 -> 65%, 2x2048x4096 76 -> 85%, 4x2048x4096 78 -> 83%, 2/3/4/6x4096x4096 87/86/90/85
# -> 94/93/92/91%, 2x4096x14336 92 -> 97%, 4x4096x11008 96 -> 96%; but 4x5120x4096 (160 strips) 93 -> 89%,
# 2/4/6x11008x4096 98/98/97 -> 93-96% (8192 outputs gained in 256-byte strips, 95-96 -> 98-99%, not taken).
RING_MIN_ROWS = 8
RING_ACROSS = (16, 8, 4)
RING_CONFIG = GemvConfig(threads=256, warps_per_output=1, ring_stages=4)
RING_FEW_CONFIG = RING_CONFIG.with_(threads_x=8, unroll=2)  # 2 .. RING_MIN_ROWS - 1 vectors
RING_ARCHS = (90,)  # measured on sm_90 only


def ring_config(spec: GemmSpec, sm_count: int) -> GemvConfig | None:
    """The TMA-fed columns block shape for `spec` (see RING_MIN_ROWS), or None where no strip width gives
    blocks enough (2-7 vectors: more strips than SMs)."""
    if vectors(spec) < RING_MIN_ROWS:
        strips = ceil_div(outputs(spec), 4 * RING_FEW_CONFIG.threads_x)
        return RING_FEW_CONFIG if strips <= sm_count else None

    width = widest_strips(spec, sm_count, RING_ACROSS, QUAD_SM_SHARE, in_rounds=True)
    if width is None:
        return None
    # Unroll 2 up to 12 vectors, but at most the 256 rows a TMA box holds a stage (4 across: 64 threads along K).
    unroll = 1 if vectors(spec) > 12 or 8 * RING_CONFIG.threads // width > 256 else 2
    return RING_CONFIG.with_(threads_x=width, unroll=unroll)


def ring_rule(spec: GemmSpec, arch: str, sm_count: int) -> GemvConfig | None:
    """ring_config where its rule applies to `spec` on `arch` and the family takes it, else None."""
    if not quads(spec) or arch_number(arch) not in RING_ARCHS:
        return None
    config = ring_config(spec, sm_count)
    return None if config is None or get_family("gemv").rejections(config, spec, arch) else config


def gemv_candidates(spec: GemmSpec, arch: str, sm_count: int) -> list[GemvConfig]:
    """The measured tensor-core block shape where that kernel runs the spec on `arch` (while
    GEMV_TENSOR_CORES_UNTUNED is on), the measured quads block shape where the columns kernel walks K
    in quads, else the CUDA-core kernels as the model ranks them.

    The rows kernel on tensor cores is taken whenever it applies, without the model weighing it against
    the CUDA-core kernels: its reason to exist is that those are compute bound at 2-16 rows (0.51-0.72×
    cuBLAS on an H100), and the shipped model was trained before it existed, so it cannot compare the
    two. The columns kernel on tensor cores (layout nn) only where COLUMNS_TENSOR_CORE_MIN_ROWS says.
    One vector on the rows kernel (sm_90+) takes ONE_VECTOR_ROWS_CONFIG, measured back to back; one
    vector of few outputs on the columns kernel (sm_90) the K split over a cluster (split_rule); 2-16 vectors
    in quads (sm_90) the TMA-fed columns kernel where ring_rule says, before the tensor-core columns kernel."""
    ring = ring_rule(spec, arch, sm_count)
    if ring is not None:
        return [ring]
    if GEMV_TENSOR_CORES_UNTUNED and tensor_core_rejection(spec, arch) is None:
        if stream_kind(spec) == "rows":
            return [UNTUNED_TENSOR_CORE_CONFIG]
        least = COLUMNS_TENSOR_CORE_MIN_ROWS.get(spec.dtype)
        config = UNTUNED_COLUMNS_TENSOR_CORE_CONFIG
        wanted = spec.math == "3xtf32" or (least is not None and vectors(spec) >= least)  # 3xtf32: only there
        if wanted and not get_family("gemv").rejections(config, spec, arch):
            return [config]
    if quads(spec) and vectors(spec) >= QUAD_RULE_MIN_ROWS:
        return [quad_config(spec, sm_count)]
    if stream_kind(spec) == "rows" and vectors(spec) == 1 and dependent_launch.supported(arch):
        return [ONE_VECTOR_ROWS_CONFIG[spec.element_bytes]]
    split = split_rule(spec, arch, sm_count)
    if split is not None:
        return [split]
    return gemv_stream_candidates(spec)


def gemv_stream_candidates(spec: GemmSpec) -> list[GemvConfig]:
    """The CUDA-core kernels: only the parameters the spec's stream reads vary (rows: warps per output;
    columns: threads_x)."""
    if stream_kind(spec) == "rows":
        groups = (1, 2, 4) if vectors(spec) > 1 else (1,)  # outputs per warp pay only with several vectors
        return [GemvConfig(threads=t, warps_per_output=w, threads_x=8, unroll=u, outputs_per_warp=g)
                for t in (128, 256, 512) for w in (1, 2, 4, 8) for g in groups for u in (2, 4, 8) if w * 32 <= t]
    return [GemvConfig(threads=t, warps_per_output=1, threads_x=x, unroll=u)
            for t in (128, 256, 512, 1024) for x in (2, 4, 8, 16, 32) for u in (2, 4, 8)]


CANDIDATES = {"simt": simt_candidates, "wgmma": wgmma_candidates, "gemv": gemv_candidates}


def candidates(family: str, spec: GemmSpec, arch: str, sm_count: int) -> list[Any]:
    """The family's candidates that are valid for `spec` on `arch`, without duplicates, in a fixed order."""
    make = CANDIDATES.get(family)
    if make is None:
        return [get_family(family).default_config(spec, arch)]
    rejections = get_family(family).rejections
    seen, found = set(), []
    for config in make(spec, arch, sm_count):
        if config not in seen and not rejections(config, spec, arch):
            seen.add(config)
            found.append(config)
    return found


# --- 192-row tiles where they fill whole waves -----------------------------------------------------
# Three consumer warpgroups hold a 192-row tile (64 rows each, beside the producer). Per tile they ran
# about as fast as cuBLAS (0.99-1.03x) where their tiles filled whole waves of the SMs, and the model's
# pick then trailed by its tail wave: 6336x1024x4096 0.75 -> 1.00x, 2112x3072x1024 0.86 -> 1.03x (H200,
# 2026-11-29, 20 shapes outside the model-shape suite: git show b22fc74:bench/results/2026-11-29-h200-three-consumers.md).
# Where the pick's tiles already filled their waves, or the 192-row ones did not, the pick was as fast
# or faster (4096^3: 192x128 0.88x, the pick 1.01x). The rule was fitted on the first 12 shapes and
# held on the 8 more chosen by it; 16-bit types in layout nt (what was measured). With a bias the 192x192 tile
# spilled until the staged bias became packed pairs (937f8dd); since then the 59 bias picks it moves on a grid
# outside the suite all ran faster, 1.001-1.177x (git show 6cb72f4:bench/results/2026-11-29-h200-bias-192-and-pingpong.md).
# It holds at long K too (H200, 2026-12-07, K 4864-26624, 12 shapes: 0.997-1.22x the model's picks;
# bench/results/2026-12-07-h200-chooser-rules.md).
WAVE_FIT_MIN = 0.93  # the 192-row tiles' useful share of whole waves (3000x1024: 0.947, 0.82 -> 0.99x)
WAVE_FIT_PICK_BELOW = 0.90  # ... where the pick's own share is under this
WAVE_FIT_TILES = ((192, 128), (192, 192))


def wave_share(spec: GemmSpec, bm: int, bn: int, sm_count: int) -> float:
    """The share of the SMs' whole waves of `bm`x`bn` tiles that computes D: tiles over the slots of
    the waves they take, times the rows and columns of the edge tiles inside D."""
    tiles_m, tiles_n = ceil_div(spec.m, bm), ceil_div(spec.n, bn)
    tiles = tiles_m * tiles_n
    waves = ceil_div(tiles, sm_count)
    return tiles / (waves * sm_count) * spec.m / (tiles_m * bm) * spec.n / (tiles_n * bn)


def _wave_fit_variants(twin: WgmmaConfig, spec: GemmSpec) -> list[WgmmaConfig]:
    """The twin with D stored in 2 slices, else 1, each with the deepest ring; where C came through the
    ring, then the same with C in its own buffer (a 192-wide tile's C slices are not whole 128-byte rows
    in 2 slices, and a whole one overflows a ring slot)."""
    out = []
    for c_path in ({}, dict(c_ring=False, c_l2_prefetch=False, d_over_c=False, c_first_buffer=False)):
        if c_path and not twin.c_ring:
            break
        for slices in (2, 1):
            out.append(_deepest(twin.with_(store_slices=slices, **c_path), spec) if twin.tma_store
                       else _deepest(twin.with_(**c_path), spec))
    return out


def wave_fit_config(spec: GemmSpec, pick: Any, sm_count: int) -> WgmmaConfig | None:
    """The pick's 192-row twin (3 consumers, the deepest ring, no overlapped write-back) where it fills
    at least WAVE_FIT_MIN of whole waves and the pick under WAVE_FIT_PICK_BELOW, else None."""
    if (not isinstance(pick, WgmmaConfig) or spec.dtype not in ("bf16", "fp16") or spec.layout != "nt"
            or pick.consumers == 3 or wave_share(spec, pick.bm, pick.bn, sm_count) >= WAVE_FIT_PICK_BELOW):
        return None
    family = get_family("wgmma")
    best = None
    for bm, bn in WAVE_FIT_TILES:
        share = wave_share(spec, bm, bn, sm_count)
        if share < WAVE_FIT_MIN or (best is not None and share <= best[0]):
            continue
        twin = pick.with_(bm=bm, bn=bn, consumers=3, pingpong=False, overlap_epilogue=False, cluster_m=1)
        for trial in _wave_fit_variants(twin, spec):
            if not family.rejections(trial, spec, "sm_90a"):
                best = (share, trial)
                break
    return None if best is None else best[1]
