"""GroupedConfig: tile shape and ring depth, their limits with reasons, a default, a few candidates."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .spec import BLOCK, GroupedSpec

SMEM_LIMIT = 232448  # bytes of shared memory one block may opt in to on sm_90 (227 KB)
TILE_ROW_BYTES = 128  # a tile row in shared memory: 64 16-bit values of K (BK), one 128-byte swizzle row
MAX_ACCUMULATORS = 128  # fp32 sums a consumer thread holds: beside them the 232-register budget fits the rest
# ... with promote_overlap: acc and two `sums` buffers of a 64x128 tile (64 + 2·64), in the 232 registers beside
# the rest where the epilogue is light (candidates offer it only there: _overlap_shapes); wider tiles would not fit
MAX_OVERLAP_ACCUMULATORS = 192
# fp8 tensor/rowwise promotion intervals in k-blocks of 128 values (0: the whole K in wgmma's accumulator)
PROMOTE_INTERVALS = (0, 1, 2, 4, 8)
# The default: wgmma sums 8 k-blocks (1024 values of K) in its fp8 accumulator (about 14 bits kept), then the
# consumer adds them into fp32. Long enough that the wait at each promotion is rare, short enough that the
# reduced-precision sums stay small (issue 70: error within 1.2x cuBLAS's at K = 14336). Every 8 with bands of 8
# tile rows ran 3-22% faster than every 4 without bands on four shapes at both scalings; bands alone gave -1 to +22%
# (H100, 2026-12-07, bench/results/2026-12-07-h100-fp8-variants.md). Its error: at most 1.114x cuBLAS's (outlier
# channels; every 4: 1.047x; bench/results/2026-12-07-h100-fp8-error.md).
DEFAULT_PROMOTE_EVERY = 8
# Fields added after configs were first stored (databases, plans), with the default JSON leaves out
LATER_FIELDS = {"cluster": 1, "promote_every": 0, "promote_overlap": False, "overlap_static": False}
SMALL_GROUP_ROWS = 64  # at most this many rows per group on average: 64-row tiles (fewer rows computed for nothing)
# The default's 128-row ping-pong tiles go in bands of this many tile rows (GroupedConfig.band_m). A group of
# thousands of rows walked tile_m fastest whole puts all its rows of A (7000 rows x K 6144: 86 MB, beyond L2) under
# each wave of blocks, so every wave re-reads A from DRAM; a band of 8 rows makes a wave 8 rows of A by ~16 columns
# of B. H200, 2026-11-29, 8 large-group MoE shapes outside bench_moe (Grok-1, DBRX, Phi-3.5-MoE, Jamba, Qwen2-57B;
# bench/results/2026-11-29-h200-grouped-bands.md): Zipf-routed 0.91-1.00 -> 1.02-1.06x torch._grouped_mm on all 7,
# balanced 1.02 either way. 16 tile rows ran within 1% of 8.
DEFAULT_BAND_M = 8
# D's types the staging buffer holds (parts/staged_rows.py: 2 bytes an output); fp8's fp32 D goes from registers
STAGED_OUT_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True, order=True)
class GroupedConfig:
    bm: int = 128        # tile rows (64 or 128), split by rows over the consumer warpgroups
    bn: int = 128        # tile columns (64, 128 or 256): the width of one wgmma
    stages: int = 6      # shared-memory ring depth (k-blocks in flight)
    consumers: int = 2   # warpgroups issuing wgmma (one more warpgroup loads)
    band_m: int = 0      # tile rows a band of a group's tiles, tile_m fastest in it (0: the whole group)
    pingpong: bool = False  # two consumers take alternate tiles whole: one's epilogue under the other's mainloop
    staged_store: bool = False  # D written through shared memory in 16-byte pieces of rows (parts/staged_rows.py)
    # Blocks per thread-block cluster (1 or 2). With 2, the pair takes one m-tile and two adjacent n-tiles; each
    # block loads half of the shared A tile and multicasts it to both (TMA .multicast::cluster), B alone.
    cluster: int = 1
    # fp8 with tensor or rowwise scales: wgmma sums this many k-blocks (128 values of K each) into fresh `sums`,
    # then the consumer adds them into the fp32 `acc` (promotion: the tensor cores' fp8 accumulation keeps about
    # 14 bits). 0: the whole K in the wgmma accumulator (fastest, error growing with K). 1, 2, 4 or 8.
    promote_every: int = 0
    # fp8 block scales, or promote_every > 0: two `sums` buffers in turn, so the next k-block's (or chunk's) wgmma
    # runs on the tensor cores while the CUDA cores promote the one before (render.BLOCK_SCALED_OVERLAP_LOOP,
    # PROMOTED_OVERLAP_LOOP). False: the loops that wait for every wgmma before promoting (issue 70's A/B).
    promote_overlap: bool = False
    # With promote_overlap: the loop that names both `sums` buffers statically (k-blocks or chunks unrolled in
    # compile-time pairs) and keeps one wgmma group in flight across every boundary, the loop's back edge
    # included: no wgmma_wait<0> per pair (render.PROMOTED_STATIC_LOOP, BLOCK_SCALED_STATIC_LOOP). False: the
    # pair loops that end each pair with wgmma_wait<0> (issue 70's A/B).
    overlap_static: bool = False

    @property
    def promoted(self) -> bool:
        """Whether wgmma's sums are promoted into fp32 registers every `promote_every` k-blocks."""
        return self.promote_every > 0

    @property
    def accumulators(self) -> int:
        """fp32 values a consumer thread holds: its rows' fragment, twice with promotion (`acc` and `sums`), three
        times with promote_overlap (`acc` and two `sums`; block scales too, whose single `sums` is not counted)."""
        fragment = self.rows_per_consumer // 64 * self.bn // 2
        return fragment * (3 if self.promote_overlap else 2 if self.promoted else 1)

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def rows_per_consumer(self) -> int:
        """Rows of a tile one consumer multiplies: all of them in ping-pong, else its share."""
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * TILE_ROW_BYTES

    @property
    def staging_bytes(self) -> int:
        """Every consumer's staged rows of a tile (16-bit outputs), 0 where D is stored from registers."""
        return self.consumers * self.rows_per_consumer * self.bn * 2 if self.staged_store else 0

    @property
    def dynamic_smem(self) -> int:
        """The ring, the staged rows after it, and up to 1024 bytes to realign the ring (wgmma's swizzled
        tiles start on 1024 bytes)."""
        return self.stages * self.stage_bytes + self.staging_bytes + 1024

    def static_smem(self, spec: GroupedSpec) -> int:
        """mbarriers (two per stage, two for ping-pong's turns) and the groups' ends and tile prefix (two
        ints per group)."""
        return 16 * self.stages + 16 + 8 * spec.groups

    def with_(self, **changes: int) -> "GroupedConfig":
        return replace(self, **changes)

    def to_json(self) -> dict:
        """Every field; the fields added later (LATER_FIELDS) only where they differ from their default, so older
        configs keep their JSON."""
        data = asdict(self)
        for name, default in LATER_FIELDS.items():
            if data[name] == default:
                del data[name]
        return data

    @property
    def a_share_rows(self) -> int:
        """Rows of the A tile this block loads (and multicasts to its cluster): BM / cluster."""
        return self.bm // self.cluster


def rejections(config: GroupedConfig, spec: GroupedSpec) -> dict[str, str]:
    """{constraint: reason} for each limit the config breaks for `spec`; empty when valid."""
    c, problems = config, {}
    if c.bm not in (64, 128) or c.bn not in (64, 128, 256):
        problems["tile"] = f"{c.bm}x{c.bn}: bm is 64 or 128, bn 64, 128 or 256"
    if c.pingpong and c.consumers != 2:
        problems["pingpong"] = f"pingpong with {c.consumers} consumers: it alternates tiles between two"
    elif c.consumers not in (1, 2) or c.bm % (64 * (1 if c.pingpong else c.consumers)):
        problems["consumers"] = f"{c.consumers} consumers of a {c.bm}-row tile: 1 or 2, 64 rows (a wgmma) or more each"
    elif c.accumulators > (limit := MAX_OVERLAP_ACCUMULATORS if c.promote_overlap else MAX_ACCUMULATORS):
        twice = (" (acc and two sums: promote_overlap)" if c.promote_overlap
                 else " (acc and sums: promoted)" if c.promoted else "")
        problems["registers"] = (f"{c.rows_per_consumer}x{c.bn} per consumer is "
                                 f"{c.accumulators} fp32 sums a thread{twice}, over {limit}")
    if spec.scaling == "block" and (c.bn != BLOCK or c.rows_per_consumer != 64):
        problems["block_scales"] = (f"block scales: a {BLOCK}-column tile (one B scale a k-block) of 64 rows a "
                                    f"consumer (its k-block's sums beside the promoted ones), not {c.bm}x{c.bn}")
    problems.update(promotion_rejections(c, spec))
    problems.update(overlap_rejections(c, spec))
    if c.band_m < 0:
        problems["band_m"] = f"band_m={c.band_m}: 0 (whole groups) or a count of tile rows"
    if c.staged_store and spec.n % 8:
        problems["staged_store"] = f"staged_store writes 16-byte pieces of rows: N % 8 == 0, not N = {spec.n}"
    elif c.staged_store and spec.out_dtype not in STAGED_OUT_DTYPES:
        problems["staged_store"] = (f"staged_store stages 16-bit outputs (its swizzle is laid out for 2-byte "
                                    f"values), not {spec.out_dtype}: store D from registers")
    if c.cluster not in (1, 2):
        problems["cluster"] = f"cluster={c.cluster}: 1 (no cluster) or 2 (a pair sharing the A tile by multicast)"
    if not 2 <= c.stages <= 16:
        problems["stages"] = f"stages={c.stages}: 2 to 16 (the producer runs ahead by at least one)"
    smem = c.dynamic_smem + c.static_smem(spec)
    if smem > SMEM_LIMIT:
        problems["shared_memory"] = f"{c.stages} stages of {c.bm}x{c.bn} need {smem} B of shared memory, over {SMEM_LIMIT}"
    return problems


def promotion_rejections(config: GroupedConfig, spec: GroupedSpec) -> dict[str, str]:
    """promote_every: one of PROMOTE_INTERVALS, non-zero only for fp8 tensor/rowwise scales, and then a chunk's
    `sums` beside `acc` in 64 rows a consumer (M_BLOCKS == 1, as block scales' two-level accumulation)."""
    c = config
    if c.promote_every not in PROMOTE_INTERVALS:
        return {"promote_every": f"promote_every={c.promote_every}: one of {PROMOTE_INTERVALS} k-blocks (0: never)"}
    if not c.promoted:
        return {}
    if not spec.fp8 or spec.scaling == "block":
        why = ("block scales promote every k-block already" if spec.scaling == "block"
               else f"{spec.dtype} wgmma accumulates in fp32 already")
        return {"promote_every": f"promote_every={c.promote_every} is for fp8 tensor or rowwise scales: {why}"}
    if c.rows_per_consumer != 64:
        return {"promote_every": (f"promote_every={c.promote_every} with {c.rows_per_consumer} rows a consumer: "
                                  "promotion keeps a chunk's sums beside acc, 64 rows a consumer (one wgmma)")}
    return {}


def overlap_rejections(config: GroupedConfig, spec: GroupedSpec) -> dict[str, str]:
    """promote_overlap: only where the main loop sums apart from acc (fp8 block scales, or promote_every > 0)."""
    if config.promote_overlap and not (spec.scaling == "block" or config.promoted):
        return {"promote_overlap": ("promote_overlap overlaps promotion with the next wgmma: for fp8 block scales or "
                                    "promote_every > 0")}
    if config.overlap_static and not (config.promote_overlap and config.promoted):
        return {"overlap_static": ("overlap_static is a form of promote_overlap's tensor/rowwise loop: it needs "
                                   "promote_overlap and promote_every > 0")}
    if config.overlap_static and config.promote_every < 2:
        return {"overlap_static": (f"overlap_static with promote_every={config.promote_every}: its loop's back edge "
                                   "sits inside a chunk (between chunks ptxas serialised wgmma), so 2 or more")}
    return {}


def _deepest(config: GroupedConfig, spec: GroupedSpec) -> GroupedConfig:
    """As many stages as shared memory holds, at most 8 (deeper is untried)."""
    for stages in range(8, 1, -1):
        if not rejections(config.with_(stages=stages), spec):
            return config.with_(stages=stages)
    return config


def default_config(spec: GroupedSpec) -> GroupedConfig:
    """Ping-pong tiles with D staged through shared memory: 64x256 where groups average <= SMALL_GROUP_ROWS
    rows, else 128x128 (stored from registers where N % 8 != 0, which staged rows cannot write). fp8 block
    scales: 128x128 over two consumers, promotion overlapped with the next k-block's wgmma where there is no bias. fp8 tensor/rowwise scales: promoted every DEFAULT_PROMOTE_EVERY k-blocks
    (accuracy first, issue 70), so 64 rows a consumer: 64x128 ping-pong for small groups, else 128x128 over
    two consumers (acc and sums of 128 columns fill the 128 accumulators a thread; 256 columns do not fit),
    per-tensor scales with each promotion overlapped with the next chunk's wgmma (overlap_static) where there is no bias.

    Timed on twelve grouped shapes outside bench_moe.py (git show e11d17b:bench/results/2026-11-29-h200-grouped-configs.md,
    third run): a staged config led on all twelve, 0.97-1.41x torch._grouped_mm; 128x128 ping-pong staged was
    first or within 0.05 of the first on all ten large-group shapes, 64x256 ping-pong staged on both small ones.
    The 128-row tiles go in bands of DEFAULT_BAND_M tile rows, fp8 tensor/rowwise's too (block scales': untimed, none)."""
    small = spec.total_m <= SMALL_GROUP_ROWS * spec.groups
    shape = GroupedConfig(bm=64, bn=256) if small else GroupedConfig(bm=128, bn=128, band_m=DEFAULT_BAND_M)
    shape = shape.with_(consumers=2, pingpong=True, staged_store=True)
    if spec.scaling == "block":  # two consumers of 64 rows, each a k-block's sums beside its promoted ones
        # promote_overlap where offered (no bias): 1.16-1.18x the waiting loop on four shapes (H200,
        # git show e11d17b:bench/results/2026-11-29-h200-fp8-overlap.md)
        shape = GroupedConfig(bm=128, bn=BLOCK, consumers=2, staged_store=True, promote_overlap=not spec.has_bias)
    elif spec.fp8:  # promoted, accuracy first (its tile unpromoted: ~1% faster, H100, 2026-12-07 variants table)
        shape = (GroupedConfig(bm=64, bn=128, consumers=2, pingpong=True) if small
                 else GroupedConfig(bm=128, bn=128, consumers=2, band_m=DEFAULT_BAND_M))
        shape = shape.with_(staged_store=spec.out_dtype in STAGED_OUT_DTYPES, promote_every=DEFAULT_PROMOTE_EVERY)
        if static_by_default(spec, small):
            # 128x128 per-tensor on four shapes: 0.90-0.96x torch._scaled_mm against 0.84-0.90x waiting for each
            # promotion (5-8% faster; rowwise 1-5% on three of four; H200, bench/results/2026-11-29-h200-fp8-
            # static.md); the same chunks, so the same error.
            static = shape.with_(promote_overlap=True, overlap_static=True)
            shape = static if not rejections(_deepest(static, spec), spec) else shape
    if rejections(_deepest(shape, spec), spec):
        shape = shape.with_(staged_store=False)
    return _deepest(shape, spec)


def static_by_default(spec: GroupedSpec, small: bool) -> bool:
    """Whether the fp8 default overlaps each promotion with the next chunk's wgmma (overlap_static): per-tensor or
    rowwise scales on 128x128 tiles (not the small groups' ping-pong), without a bias. ptxas (CUDA 13 NVRTC) keeps
    that loop clean there at every K tried (16-14336, one group and eight); with one group (gt.scaled_mm) it spills
    8-260 bytes beside a bias, so those keep the waiting loop by default and the twin as a candidate. Rowwise
    spilled 4 bytes until the tile count was read after setmaxnreg (it was that value, live across it); measured
    with that spill (bench/results/2026-11-29-h200-fp8-static.md) rowwise overlap_static ran 1-6% faster than the
    waiting loop on three shapes of four and 1% slower on one."""
    return spec.scaling in ("tensor", "rowwise") and not (small or spec.has_bias)


def _cluster_shapes(spec: GroupedSpec, default: GroupedConfig) -> list[GroupedConfig]:
    """Pairs sharing A by multicast (cluster=2): the default's shape, 128x128 ping-pong and 128x256 over two
    consumers, staged. None where a group's tiles are one column wide: the pair's second block would never
    have a tile of its own (valid, but half the grid idle)."""
    out_bn = 128 // 2 if spec.swiglu else 128  # the narrowest of these tiles' columns of D
    if spec.n <= out_bn:
        return []
    return [default.with_(cluster=2),
            GroupedConfig(128, 128, consumers=2, pingpong=True, staged_store=True, cluster=2),
            GroupedConfig(128, 256, consumers=2, staged_store=True, cluster=2)]


def _promoted_shapes(spec: GroupedSpec, default: GroupedConfig) -> list[GroupedConfig]:
    """fp8 tensor/rowwise: the default's tile without promotion (the speed it costs, measured directly; candidates
    keeps it only where K fits one promotion chunk) and at every other interval, and the other tiles of 64 rows a
    consumer promoted at the default interval."""
    if not spec.fp8 or spec.scaling == "block":
        return []
    every = DEFAULT_PROMOTE_EVERY
    return ([default.with_(promote_every=p) for p in PROMOTE_INTERVALS if p != default.promote_every]
            + [GroupedConfig(128, 128, consumers=2, staged_store=True, promote_every=every),
               GroupedConfig(64, 128, consumers=2, pingpong=True, staged_store=True, promote_every=every),
               GroupedConfig(64, 128, consumers=1, promote_every=every)])


def _overlap_shapes(spec: GroupedSpec, shapes: list[GroupedConfig]) -> list[GroupedConfig]:
    """promote_overlap twins (untimed: the default stays without until measured) of the block-scaled shapes without
    clusters, where the spec adds no bias. Left out where ptxas (CUDA 13 NVRTC) did not keep the overlapped loop
    whole: beside a bias epilogue it spilled (72-164 bytes at K = 512), with clusters it injected warpgroup.arrive
    (C7519, K = 512), and the tensor/rowwise loop (PROMOTED_OVERLAP_LOOP) serialised every wgmma once its chunk pairs
    loop (C7514 from K = 2048 at 4 k-blocks a chunk) and spilled with rowwise scales, so it is built and rendered
    for A/B timing (bench/probes/fp8_scaled.py) but not offered. tests/test_fp8_overlap.py compiles what is."""
    if spec.scaling != "block" or spec.has_bias:
        return []
    return [shape.with_(promote_overlap=True) for shape in shapes if shape.cluster == 1]


def _static_shapes(spec: GroupedSpec, shapes: list[GroupedConfig]) -> list[GroupedConfig]:
    """overlap_static twins (untimed: the default stays as it is until measured) of the promoted tensor/rowwise
    shapes that ptxas (CUDA 13 NVRTC) compiles clean with that loop at every K tried (16 to 16384: no C751x, no
    spills; tests/test_fp8_overlap.py): two consumers of 64 rows, not ping-pong, no clusters, promote_every >= 2.
    Left out: ping-pong 64x128 (spilled 290-720 bytes from K = 2048) and clusters (the tile is needed before the
    main loop there: 20-96 bytes spilled at some K with rowwise scales or a bias)."""
    if not spec.fp8 or spec.scaling == "block":
        return []
    return [shape.with_(promote_overlap=True, overlap_static=True) for shape in shapes
            if shape.promote_every >= 2 and shape.consumers == 2 and not shape.pingpong and shape.cluster == 1]


def candidates(spec: GroupedSpec) -> list[GroupedConfig]:
    """The default first, then the few shapes worth timing against it (each valid for `spec` and keeping its fp8
    accuracy: keeps_fp8_accuracy); fp8 tensor/rowwise adds promoted ones (and the default's tile unpromoted, kept
    only where K fits one promotion chunk); the cluster=2 ones, then the block-scaled promote_overlap twins and the
    tensor/rowwise overlap_static twins last (untimed: the default stays without clusters or overlap until measured)."""
    shapes = [default_config(spec), GroupedConfig(128, 128, consumers=2), GroupedConfig(128, 256, consumers=2),
              GroupedConfig(64, 128, consumers=1), GroupedConfig(64, 256, consumers=1),
              GroupedConfig(64, 256, consumers=2, pingpong=True), GroupedConfig(128, 128, consumers=2, pingpong=True),
              GroupedConfig(64, 256, consumers=2, pingpong=True, staged_store=True),
              GroupedConfig(128, 128, consumers=2, pingpong=True, staged_store=True),
              GroupedConfig(128, 256, consumers=2, staged_store=True),
              GroupedConfig(64, 128, consumers=2, pingpong=True, staged_store=True)]
    waiting = shapes[0].with_(promote_overlap=False, overlap_static=False)  # the default without the overlap
    shapes += _promoted_shapes(spec, waiting) + _cluster_shapes(spec, waiting)
    if shapes[0].promote_overlap:  # the default's waiting twin, for A/B
        shapes.append(waiting)
    shapes += _overlap_shapes(spec, [_deepest(shape, spec) for shape in shapes])
    shapes += _static_shapes(spec, [_deepest(shape, spec) for shape in shapes])
    found: list[GroupedConfig] = []
    for config in (_deepest(shape, spec) for shape in shapes):
        if config not in found and not rejections(config, spec) and keeps_fp8_accuracy(config, spec):
            found.append(config)
    return found


def keeps_fp8_accuracy(config: GroupedConfig, spec: GroupedSpec) -> bool:
    """Whether `config` keeps the fp8 accuracy the default promises (issue 70's bar: at most 1.2x cuBLAS's error):
    with tensor/rowwise scales, wgmma's reduced-precision accumulator sums at most DEFAULT_PROMOTE_EVERY k-blocks
    before they are promoted to fp32 (the default's interval: at most 1.114x cuBLAS's error; never promoting
    reached 2.3x at K = 14336). A config that never promotes keeps it where K fits one such chunk. The tuner times
    only such configs and a tuned one is used only if it is one: the fastest config would otherwise be an
    unpromoted one (~1% faster, torch's use_fast_accum=True accuracy). bf16/fp16 and block scales: always."""
    if not spec.fp8 or spec.scaling == "block":
        return True
    chunk = config.promote_every or -(-spec.k // BLOCK)  # k-blocks (of BLOCK values) wgmma sums before fp32 sees them
    return chunk <= DEFAULT_PROMOTE_EVERY
