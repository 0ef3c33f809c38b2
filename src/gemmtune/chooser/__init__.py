"""The config chooser: a fast pick for a shape nobody tuned, and the reason for it.

    picks = rank(spec, "sm_90")     # every candidate of the family, best first, on the arch table's GPU
    picks = rank(spec, "sm_90", sm_count=device.sm_count)   # ... or on a GPU of that many SMs
    picks = rank_configs(spec, "gemv", configs, sm_count)   # a given list of one family's configs, ranked
    picks[0].config, picks[0].predicted_s, picks[0].why()

The family's candidates (``candidates``) are scored by the shipped model (``model``: boosted trees
over ``features``: wave quantization, tile waste, occupancy, bytes per FLOP...) or, for a family the
model has not seen, by a roofline estimate that charges for empty wave slots and padded tiles.
Deterministic: the same spec, arch and model give the same ranking.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..arch import geometry as arch_geometry
from ..errors import ConfigError
from ..kernels import family_for, get_family
from ..kernels.wgmma.config import WgmmaConfig, overlap_idle, staging_seconds
from ..kernels.wgmma.gated import fallbacks as gated_fallbacks
from ..kernels.wgmma.schedule import schedule_for
from ..spec import GemmSpec
from .candidates import (candidates, fitted_twin, small_tile_ring, swap_ab_config, wave_fit_config, wave_share,
                         wave_width_config)
from .features import (HBM_BYTES_PER_S, PEAK_FLOPS, EpilogueCost, epilogue_cost, features, has_geometry, output_tiles,
                       roofline_s)
from .model import ChooserModel, FamilyModel, feature_matrix, load

# Features shown by --explain, in this order.
EXPLAINED = ("waves", "last_wave_full", "tile_waste", "blocks_per_sm", "warps_per_sm", "bytes_per_flop", "splits")


@dataclass(frozen=True)
class SplitTail:
    """How a split-tail config's schedule runs (kernels/wgmma/schedule.py), for the explanation. The
    model sees it through its schedule features (features.schedule_features: tile_times, tail_ways,
    scatter); its wave features count the launched blocks. Counts are blocks and tiles (a cluster's
    blocks each count)."""

    tiles: int  # output tiles
    whole_tiles: int  # run whole first, round robin (a whole number of rounds)
    splits: int  # K ranges per tile after them (0: even shares that run across tiles)
    pieces: int  # the tail's shares, one block each, all running at once
    blocks: int  # blocks launched
    slots: int  # blocks the GPU runs at once (blocks per SM × SMs)
    share_k_blocks: float = 0.0  # k-blocks per share
    k_blocks: int = 0  # k-blocks per tile

    @property
    def split_tiles(self) -> int:
        return self.tiles - self.whole_tiles

    @property
    def ways(self) -> float:
        """Pieces per split tile: the K ranges, or (even shares) the average blocks per tile."""
        return float(self.splits) if self.splits else self.pieces / self.split_tiles

    def text(self) -> str:
        which = f"all {self.tiles} tiles" if self.whole_tiles == 0 else f"the last {self.split_tiles} tiles"
        if self.splits:
            how = f"split along K into {self.splits} ranges, {self.pieces} pieces"
            size = f"1/{self.splits}-tile pieces"
        else:
            how = f"shared along K in even runs of {self.share_k_blocks:.1f} of their {self.k_blocks} k-blocks, {self.pieces} shares"
            size = "shares"
        tail = f"{self.pieces / self.slots:.2f} waves of {size}"
        if self.whole_tiles:
            tail = f"{self.whole_tiles / self.slots:.2f} waves of whole tiles, then {tail}"
        return f"split tail: {which} {how} on {self.blocks} blocks ({tail})"


def split_tail(spec: GemmSpec, config: Any, sm_count: int, blocks_per_sm: float = 1.0) -> SplitTail | None:
    """The split tail of a config whose schedule splits tiles along K (wgmma split_tail), else None."""
    if not isinstance(config, WgmmaConfig) or not config.split_tail:
        return None
    s = schedule_for(spec, config, arch_geometry(None, "sm_90a", sm_count))
    if not s.tail_workers:
        return None
    c = config.cluster_m
    return SplitTail(tiles=s.units * c, whole_tiles=s.whole_units * c, splits=s.splits,
                     pieces=s.tail_workers * c, blocks=s.workers * c,
                     slots=max(1, round(blocks_per_sm * sm_count)), share_k_blocks=s.share_k_blocks,
                     k_blocks=s.k_blocks)


@dataclass(frozen=True)
class Pick:
    family: str
    config: Any
    predicted_s: float
    scored_by: str  # "model (N rows, S shapes)" or "roofline estimate"
    features: tuple[tuple[str, float], ...]
    split: SplitTail | None = None  # the schedule's split tail, as the explanation tells it
    fitted_from: int = 0  # the measured tile width this config's width was fitted from (0: not fitted)
    epilogue: EpilogueCost | None = None  # the fused epilogue's estimated cost, in predicted_s
    plain_tile: bool = False  # put first as the plain GEMM's pick's tile (on_plain_tile), not by its prediction
    scattered_behind: int = 0  # better-predicted configs of a scattered tail put behind it (scattered_tails_last)

    def feature(self, name: str) -> float:
        return dict(self.features)[name]

    def shown(self) -> dict[str, float]:
        """The features as the explanation's table shows them: `splits` is the K ranges the kernel
        really runs a split tile in (the model's feature is left as it is in `features`)."""
        f = dict(self.features)
        if self.split is not None:
            f["splits"] = self.split.ways
        return f

    def why(self) -> str:
        if not self.features:
            return self.scored_by
        f = dict(self.features)
        return (f"predicted {self.predicted_s * 1e6:.1f} µs by the {self.scored_by}: {f['waves']:.2f} waves "
                f"(last wave {100 * f['last_wave_full']:.0f}% full), {100 * f['tile_waste']:.1f}% of the tiles "
                f"outside D, {f['blocks_per_sm']:.0f} block(s)/SM, {f['bytes_per_flop']:.3f} B/FLOP"
                + (f", split-K {f['splits']:.0f}" if f["splits"] > 1 else "")
                + (f"; {self.split.text()}" if self.split is not None else "")
                + (f"; tile width fitted to N: {self.config.bn} columns for {self.fitted_from}, predicted as "
                   f"{self.fitted_from} (candidates.FIT_MIN_SAVING)" if self.fitted_from else "")
                + ("; every tile is split along K, so it runs without overlap_epilogue (whole-width wgmma)"
                   if self.overlap_dropped() else "")
                + (f"; {self.epilogue.text()}" if self.epilogue is not None else "")
                + ("; first as the plain GEMM's pick's tile and schedule (chooser.on_plain_tile)" if self.plain_tile else "")
                + (f"; {self.scattered_behind} config(s) predicted faster put behind: their split tail shares a long K "
                   f"in even runs over a large part of the tiles (chooser.scattered_tails_last)" if self.scattered_behind else ""))

    def overlap_dropped(self) -> bool:
        """Whether the kernel is rendered without the config's overlap_epilogue (no whole tile to overlap:
        wgmma render.unused_options_dropped)."""
        return (isinstance(self.config, WgmmaConfig) and self.split is not None
                and overlap_idle(self.config, self.split.whole_tiles))


_MODEL_CACHE: dict[str, ChooserModel | None] = {}


def shipped_model() -> ChooserModel | None:
    if "shipped" not in _MODEL_CACHE:
        _MODEL_CACHE["shipped"] = load()
    return _MODEL_CACHE["shipped"]


def estimate_s(spec: GemmSpec, f: dict[str, float]) -> float:
    """Roofline with penalties, for families without a trained model: compute time stretched by empty
    wave slots and padded tiles, or the tiling's traffic at HBM speed, whichever is slower."""
    busy = max(f["last_wave_full"] * f["sm_fill"], 1e-3)  # share of the SM slots doing work
    compute = spec.flops / PEAK_FLOPS[spec.dtype] / busy / max(1 - f["tile_waste"], 1e-3)
    memory = f["bytes_per_flop"] * spec.flops / HBM_BYTES_PER_S
    return max(compute, memory, roofline_s(spec))


def _scores(spec: GemmSpec, configs: list[Any], sm_count: int, model: FamilyModel | None
            ) -> tuple[np.ndarray, str]:
    if model is None:
        estimates = np.array([estimate_s(spec, features(spec, c, sm_count)) for c in configs])
        return estimates + _staging_s(spec, configs), "roofline estimate"
    x, _ = feature_matrix([(spec, c, sm_count) for c in configs], model.feature_names)
    scored = f"model ({model.rows} measured rows, {model.shapes} shapes)"
    return np.exp(model.predict_log_ratio(x)) * roofline_s(spec) + _staging_s(spec, configs), scored


def _staging_s(spec: GemmSpec, configs: list[Any]) -> np.ndarray:
    """The estimated time of each config's staging copies (wgmma's stage_operands; the model times
    the kernel alone)."""
    copies = staging_seconds(spec)
    return np.array([copies if getattr(c, "stage_operands", False) else 0.0 for c in configs])


def rank(spec: GemmSpec, arch: str, sm_count: int | None = None, family: str | None = None,
         model: ChooserModel | None = None, scattered_last: bool = True) -> list[Pick]:
    """Every candidate of the family chosen for the spec (or `family`), best predicted first, on a GPU
    of `sm_count` SMs (None: the arch table's GPU for `arch`, gemmtune.arch). `scattered_last`:
    scattered_tails_last applies (never where the epilogue reads C)."""
    chosen = family_for(spec, arch, family)
    if sm_count is None:
        sm_count = arch_geometry(None, arch).sm_count
    if spec.gated:
        return gated_picks(spec, arch, rank(spec.ungated(), arch, sm_count, chosen.name, model))
    picks = rank_configs(spec, chosen.name, candidates(chosen.name, spec, arch, sm_count), sm_count, model)
    if scattered_last and not spec.epilogue.reads_c:
        picks = scattered_tails_last(spec, picks)
    picks = wave_fitted(spec, on_plain_tile(spec, fitted(spec, picks, sm_count), arch, sm_count, model), sm_count)
    picks = deeper_ring_first(spec, one_wave_first(spec, wave_width_first(spec, picks, sm_count), sm_count), sm_count)
    return swapped_first(spec, arch, picks, sm_count) if chosen.name == "wgmma" else picks


# A split tail shared along K in even runs (schedule.py: stream-K on the last wave) starts its pieces at
# scattered k offsets, so the blocks running together stop sharing A's and B's k-slabs in L2. Where K is
# long and that tail is a large part of the work, the model (which sees the tail's length, not where its
# slabs come from) ranks such configs too high. H100, shapes outside every evaluation set with 64+ k-blocks
# and 15%+ of the tiles in such a tail (the 2026-11-26 rounds and 2026-12-07's, timed in turn): the fastest
# config with one trailed the fastest without on 63 of 68 16-bit shapes (geomean 1.30x slower; the 5 it led,
# by 0.4-7%) and 66 of 68 tf32 ones (1.41x). 3xTF32 (fp32) ran the other way (8 of 8) and keeps its ranking;
# so does a short tail (8192^3 in 128x256 tiles: 3% of its tiles, 1.9% faster shared). Its moved picks on an
# H200 (bench/results/2026-12-07-h200-chooser-rules.md): bf16 8 of 10 faster (geomean 1.15x), tf32 3 of 3
# (1.41x); with a residual add 3 of 3 slower (those tiles read C by C-spread, not the ring), so an epilogue
# reading C, and the plain pick it follows (on_plain_tile), keeps the model's order.
SCATTERED_TAIL_MIN_K_BLOCKS = 64
SCATTERED_TAIL_MIN_SHARE = 0.15


def scattered_tail(spec: GemmSpec, pick: Pick) -> bool:
    """Whether `pick` runs a long-K 16-bit or tf32 GEMM with a large tail of even shares (SCATTERED_TAIL_*)."""
    tail = pick.split
    return (spec.dtype in ("bf16", "fp16", "tf32") and tail is not None and tail.splits == 0
            and tail.k_blocks >= SCATTERED_TAIL_MIN_K_BLOCKS
            and tail.split_tiles >= SCATTERED_TAIL_MIN_SHARE * tail.tiles)


def scattered_tails_last(spec: GemmSpec, picks: list[Pick]) -> list[Pick]:
    """`picks` with those of a scattered tail (scattered_tail) after all others, each group in its order."""
    is_scattered = [scattered_tail(spec, p) for p in picks]
    if not any(is_scattered) or all(is_scattered):
        return picks
    kept = [p for p, s in zip(picks, is_scattered) if not s]
    scattered = [p for p, s in zip(picks, is_scattered) if s]
    ahead = is_scattered.index(False)  # the scattered configs the model ranked above the new first pick
    return [replace(kept[0], scattered_behind=ahead) if ahead else kept[0]] + kept[1:] + scattered


def swapped_first(spec: GemmSpec, arch: str, picks: list[Pick], sm_count: int) -> list[Pick]:
    """The wgmma family's ranked picks with the swap-AB rule's config first where it applies
    (candidates.swap_ab_config: a few rows of A, the kernel of Dᵀ = B·Aᵀ). The model has not seen swap_ab:
    its prediction is shown, the rule put it first."""
    config = swap_ab_config(spec, arch)
    if config is None:
        return picks
    f = features(spec, config, sm_count)
    model = shipped_model()
    kernel_s, _ = _scores(spec, [config], sm_count, model.for_family("wgmma") if model else None)
    first = Pick("wgmma", config, float(kernel_s[0]), "swap-AB rule (a few rows of A: candidates.swap_ab_config)",
                 tuple(f.items()), split_tail(spec, config, sm_count, f["blocks_per_sm"]))
    return [first] + [p for p in picks if p.config != config]


def gated_picks(spec: GemmSpec, arch: str, plain: list[Pick]) -> list[Pick]:
    """A gated spec's picks: those of the plain GEMM it runs (N' = 2N columns: the same tiles, grid and
    main loop), each config replaced by its first twin the gated kernel takes (gated.fallbacks: without
    overlap_epilogue, fewer store slices), in the plain ranking's order; a twin already in the list
    stays where it first appears. The model times plain GEMMs; SwiGLU's own work is a few FLOPs an output."""
    family = get_family(plain[0].family) if plain else None
    seen, out = set(), []
    for pick in plain:
        config = next((c for c in gated_fallbacks(pick.config) if not family.rejections(c, spec, arch)), None)
        if config is not None and config not in seen:
            seen.add(config)
            out.append(pick if config == pick.config else replace(pick, config=config))
    if not out:
        raise ConfigError(f"the {plain[0].family if plain else 'wgmma'} family has no valid config for {spec.short()}")
    return out


def _twin_first(spec: GemmSpec, picks: list[Pick], twin: Any, sm_count: int, in_place: bool = False,
                **fields: Any) -> list[Pick]:
    """`picks` with `twin`, a rule's variant of the first pick's config, put first: the first pick's fields with
    the twin's features and split tail, and `fields`; the first pick stays in the list unless the twin takes its
    place (`in_place`). `picks` unchanged where the rule gives no twin."""
    if twin is None:
        return picks
    f = features(spec, twin, sm_count)
    first = replace(picks[0], config=twin, features=tuple(f.items()),
                    split=split_tail(spec, twin, sm_count, f["blocks_per_sm"]), **fields)
    return [first] + [p for p in (picks[1:] if in_place else picks) if p.config != twin]


def wave_fitted(spec: GemmSpec, picks: list[Pick], sm_count: int) -> list[Pick]:
    """The ranked picks with the first one's 192-row twin put first where its tiles fill whole waves and
    the pick's do not (candidates.wave_fit_config); the model, which has never seen 3 consumers, does not
    rank it: its prediction is the pick's scaled by the two wave shares."""
    twin = wave_fit_config(spec, picks[0].config, sm_count) if picks else None
    if twin is None:
        return picks
    pick = picks[0]
    share = wave_share(spec, pick.config.bm, pick.config.bn, sm_count) / wave_share(spec, twin.bm, twin.bn, sm_count)
    return _twin_first(spec, picks, twin, sm_count, predicted_s=pick.predicted_s * share, fitted_from=0,
                       plain_tile=False, scored_by="wave-fit rule (192-row tiles fill whole waves)")


WAVE_WIDTH_RULE = "wave-width rule (two rows of tiles in one wave)"  # its picks' scored_by


def wave_width_first(spec: GemmSpec, picks: list[Pick], sm_count: int) -> list[Pick]:
    """The ranked picks with the first one's one-wave-width twin first where it has one
    (candidates.wave_width_config), its prediction scaled by the widths: the rule, not the model, puts it there."""
    twin = wave_width_config(spec, picks[0].config, sm_count) if picks else None
    if twin is None:
        return picks
    return _twin_first(spec, picks, twin, sm_count, predicted_s=picks[0].predicted_s * twin.bn / picks[0].config.bn,
                       scored_by=WAVE_WIDTH_RULE)


# One partial wave: where the pick's tiles number fewer than the SMs, every tile runs alone on its SM and the
# GEMM lasts as long as one tile, so a narrower tile of the same height that still fits one wave (more SMs busy,
# each with less to do) is faster; the model, fitted on shapes of many waves, ranks the two within a few percent.
# H100, 2026-12-07 round of 74 bf16 shapes outside every evaluation set (timed in turn): where this rule moves the
# pick (4 shapes), all 4 faster, 1.06-1.33x (geomean 1.14x): 480x4224x2944 128x192 -> 128x128 (88 -> 132 tiles).
# Then on 22 moved picks of a grid of its own (M 90-1180, bf16/fp16, plain and bias+GELU; H100, same day,
# bench/results/2026-12-07-h100-one-wave.md): 20 faster (1.01-1.17x, geomean 1.10x), 2 slower (0.89-0.90x), both
# moved from a split tail's 96-100 busy blocks to 69-70 whole tiles: a candidate must keep 90% of the pick's busy
# blocks (which leaves those two alone and the 20 moved).
ONE_WAVE_LOOK = 12          # ranked picks looked through for the narrower tile
ONE_WAVE_MAX_PREDICTED = 1.10  # at most this times the pick's predicted time
# Not where the pick's split tail already keeps 90% of the SMs busy (long K over few tiles: its pieces fill the wave;
# the round's moved picks with a tail kept 68% and 82% busy, and gained 1.06x and 1.11x)
ONE_WAVE_BUSY_SHARE = 0.9


def _busy_blocks(spec: GemmSpec, pick: Pick) -> int:
    """Blocks with work in the pick's one wave: its split tail's pieces where it has one, else its tiles."""
    return pick.split.blocks if pick.split is not None else output_tiles(spec, pick.config.bm, pick.config.bn)


def one_wave_first(spec: GemmSpec, picks: list[Pick], sm_count: int) -> list[Pick]:
    """16-bit wgmma picks of fewer tiles than SMs whose blocks with work (tiles, or a split tail's pieces) leave a
    tenth of the SMs idle: the ranked pick of the same tile height and consumers with the most tiles up to one a SM
    put first (ONE_WAVE_*), where one has more tiles than the pick and 90% of its busy blocks; else `picks`."""
    if not picks or spec.dtype not in ("bf16", "fp16"):
        return picks
    first = picks[0].config
    if not isinstance(first, WgmmaConfig) or first.swap_ab or picks[0].scored_by == WAVE_WIDTH_RULE:
        return picks  # (the wave-width rule's width already fits its one wave)
    most, busy = output_tiles(spec, first.bm, first.bn), _busy_blocks(spec, picks[0])
    if most >= sm_count or busy >= ONE_WAVE_BUSY_SHARE * sm_count:
        return picks
    chosen = None
    for pick in picks[1:ONE_WAVE_LOOK]:
        c = pick.config
        if not isinstance(c, WgmmaConfig) or c.swap_ab or (c.bm, c.consumers) != (first.bm, first.consumers):
            continue
        tiles = output_tiles(spec, c.bm, c.bn)
        if (most < tiles <= sm_count and _busy_blocks(spec, pick) >= ONE_WAVE_BUSY_SHARE * busy
                and pick.predicted_s <= ONE_WAVE_MAX_PREDICTED * picks[0].predicted_s):
            most, chosen = tiles, pick
    if chosen is None:
        return picks
    chosen = replace(chosen, scored_by=f"{chosen.scored_by}; one-wave rule ({most} tiles on {sm_count} SMs)")
    return [chosen] + [p for p in picks if p.config != chosen.config]


def deeper_ring_first(spec: GemmSpec, picks: list[Pick], sm_count: int) -> list[Pick]:
    """The ranked picks with the first one's deeper-ring twin in its place where it is a small tile
    (candidates.small_tile_ring), at its prediction: the rule, not the model, deepens it."""
    twin = small_tile_ring(picks[0].config, spec) if picks else None
    if twin is None:
        return picks
    return _twin_first(spec, picks, twin, sm_count, in_place=True,
                       scored_by=f"{picks[0].scored_by}; small-tile ring rule ({twin.stages} stages)")


def fitted(spec: GemmSpec, picks: list[Pick], sm_count: int) -> list[Pick]:
    """The ranked picks with each wgmma config replaced by its twin of fitted width where it has one
    (candidates.fitted_twin), at its parent's place and prediction; a twin already in the list
    stays where it first appears."""
    seen, out = set(), []
    for pick in picks:
        twin = fitted_twin(spec, pick.config)
        if twin is not None:
            f = features(spec, twin, sm_count)
            pick = Pick(pick.family, twin, pick.predicted_s, pick.scored_by, tuple(f.items()),
                        split_tail(spec, twin, sm_count, f["blocks_per_sm"]), fitted_from=pick.config.bn,
                        epilogue=pick.epilogue)
        if pick.config not in seen:
            seen.add(pick.config)
            out.append(pick)
    return out


def rank_configs(spec: GemmSpec, family: str, configs: list[Any], sm_count: int,
                 model: ChooserModel | None = None) -> list[Pick]:
    """`configs` of `family` (valid for the spec), best predicted first on a GPU of `sm_count` SMs:
    rank's scoring of a candidate list given by the caller (a probe comparing two lists, say)."""
    if not configs:
        raise ConfigError(f"the {family} family has no valid config for {spec.short()} to choose from")
    if not has_geometry(configs[0]):  # a family the chooser does not model yet: its default, unranked
        return [Pick(family, c, math.nan, f"the {family} family's default (the chooser has no model of it)", ())
                for c in configs]
    model = model if model is not None else shipped_model()
    kernel_s, scored_by = _scores(spec, configs, sm_count, model.for_family(family) if model else None)
    # The model times plain GEMMs: a fused epilogue's own work is added (features.epilogue_cost).
    epilogues = [epilogue_cost(spec, c, sm_count, float(s)) for c, s in zip(configs, kernel_s)]
    scores = kernel_s + np.array([e.seconds if e is not None else 0.0 for e in epilogues])
    order = sorted(range(len(configs)), key=lambda i: (scores[i], i))  # ties: the candidate list's order
    picks = []
    for i in order:
        f = features(spec, configs[i], sm_count)
        picks.append(Pick(family, configs[i], float(scores[i]), scored_by, tuple(f.items()),
                          split_tail(spec, configs[i], sm_count, f["blocks_per_sm"]), epilogue=epilogues[i]))
    return picks


def choose(spec: GemmSpec, arch: str, sm_count: int | None = None, family: str | None = None,
           model: ChooserModel | None = None) -> Pick:
    return rank(spec, arch, sm_count, family, model)[0]


def explain(picks: list[Pick], top: int = 5) -> str:
    """A few lines: the pick and why, then the runners-up with their predictions."""
    if not picks[0].features:
        return f"chooser: {picks[0].family} {picks[0].config.describe()}\n  why: {picks[0].why()}"
    lines = [f"chooser: {picks[0].family} {picks[0].config.describe()}", f"  why: {picks[0].why()}",
             f"  {len(picks)} candidates ranked; the best {min(top, len(picks))}:",
             "  " + " | ".join(["rank", "predicted µs", *EXPLAINED, "config"])]
    for i, p in enumerate(picks[:top], start=1):
        f = p.shown()
        cells = [f"{f[n]:.3f}" if isinstance(f[n], float) and not math.isclose(f[n], round(f[n])) else f"{f[n]:.0f}"
                 for n in EXPLAINED]
        lines.append("  " + " | ".join([str(i), f"{p.predicted_s * 1e6:.1f}", *cells, p.config.describe()]))
    if any(p.split is not None for p in picks[:top]):
        lines.append("  (splits: the K ranges a split-tail schedule cuts its tail tiles into)")
    return "\n".join(lines)


def tile_key(config: Any) -> tuple:
    """What a wgmma config's speed mostly is, beside its write-back: tile, grid, schedule, cluster and staging."""
    return (config.bm, config.bn, config.consumers, config.persistent, config.split_tail, config.cluster_m,
            config.stage_operands)


def plain_tile_pick(spec: GemmSpec, picks: list[Pick], arch: str, sm_count: int,
                    model: ChooserModel | None = None) -> Pick | None:
    """Of `picks` (the fused spec's, ranked), the first on the tile, grid and schedule of the plain GEMM's
    pick; None where the plain pick is not a wgmma config or no fused candidate shares its tile."""
    plain = rank(spec.without_epilogue(), arch, sm_count, model=model,
                 scattered_last=not spec.epilogue.reads_c)[0].config
    if not isinstance(plain, WgmmaConfig):
        return None
    return next((p for p in picks if isinstance(p.config, WgmmaConfig) and tile_key(p.config) == tile_key(plain)), None)


def on_plain_tile(spec: GemmSpec, picks: list[Pick], arch: str, sm_count: int,
                  model: ChooserModel | None = None) -> list[Pick]:
    """For an epilogue that reads C and adds no bias (add, alpha+beta, relu+add ...): the ranked picks with
    the one on the plain GEMM's pick's tile first. The model was trained on plain GEMMs; on such specs it
    ranks every tile's C path by the bytes C adds and often lands on another tile than the plain pick's,
    which ran slower on every such shape measured (H200, 2026-11-28, git show b22fc74:bench/results/2026-11-28-h200-fused-tile.md:
    5 of 5 shapes 0-18% faster on the plain pick's tile; with a bias too, 3 of 5 slower, so those keep the
    model's order)."""
    if not spec.epilogue.reads_c or spec.epilogue.reads_bias:
        return picks
    found = plain_tile_pick(spec, picks, arch, sm_count, model)
    if found is None or found is picks[0]:
        return picks
    return [replace(found, plain_tile=True)] + [p for p in picks if p is not found]
