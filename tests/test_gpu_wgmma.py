"""GPU (Hopper): every wgmma ladder step × layout × dtype computes the right product, checked by the
common verifier (float64 reference of the rounded inputs, NaN-poisoned D, per-dtype tolerance).

Shapes whose stored rows are not a multiple of 16 bytes (7×13×5 in bf16, say) cannot be read by TMA
in place: for those each step runs with stage_operands (the rows copied into 128-byte-aligned ones
first); the family refuses the step without it, with its reason.
"""
import numpy as np
import pytest

from gemmtune.build import compile_configs
from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.config import staging_choice
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

FAMILY = get_family("wgmma")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (8, 8, 8), (136, 200, 72), (1000, 1000, 1000),
          (4096, 4096, 4096), (3000, 5000, 704), (1, 4096, 4096), (4096, 1, 4096), (4096, 8, 4096)]
LAYOUTS = ("nt", "nn", "tn", "tt")
DTYPES = ("bf16", "fp16", "tf32")


def _hopper() -> str:
    from gemmtune.device import query_device

    arch = query_device().arch
    if arch != "sm_90":
        pytest.skip(f"the wgmma family needs a Hopper GPU, this one is {arch}")
    return "sm_90a"


def staged_where_needed(config, spec):
    """The step as it runs `spec`: staged where TMA cannot read the rows in place."""
    return config.with_(stage_operands=staging_choice(spec) == (True,))


def _jobs(arch: str) -> list:
    jobs = []
    for _, step in FAMILY.ladder(arch):
        for dtype in DTYPES:
            for layout in LAYOUTS:
                for shape in SHAPES:
                    spec = GemmSpec(*shape, layout=layout, dtype=dtype)
                    config = staged_where_needed(step, spec)
                    if FAMILY.supports(spec, arch) is None and not FAMILY.rejections(config, spec, arch):
                        jobs.append((spec, config, arch))
    return jobs


@pytest.fixture(scope="module")
def compiled_ladder():
    arch = _hopper()
    jobs = _jobs(arch)
    kernels = compile_configs(jobs)
    failed = [(job[0].short(), job[1].describe(), str(k)) for job, k in zip(jobs, kernels) if isinstance(k, Exception)]
    assert not failed, failed[:3]
    return {(job[0], job[1]): kernel for job, kernel in zip(jobs, kernels)}


@pytest.mark.parametrize("step", [name for name, _ in FAMILY.ladder("sm_90a")])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ladder_step_correct(compiled_ladder, step, dtype, layout):
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    config = dict(FAMILY.ladder(arch))[step]
    rng = np.random.default_rng(abs(hash((step, dtype, layout))) & 0xFFFF)
    ran = 0
    for shape in SHAPES:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype)
        assert FAMILY.supports(spec, arch) is None
        if staging_choice(spec) == (True,):  # refused in place with a reason that names the cause
            assert "multiple of 16" in FAMILY.rejections(config, spec, arch)["staging"]
        run = staged_where_needed(config, spec)
        if FAMILY.rejections(run, spec, arch):
            continue
        result = evaluate(compiled_ladder[(spec, run)], verify_only=True, rng=rng)
        assert result.verify.ok, f"{step} {spec.short()}: {result.verify.message}"
        ran += 1
    if dtype == "tf32" and layout != "nt" and step in ("tma_wgmma", "multistage", "pingpong"):
        assert ran == 0  # MN-major tf32 is transposed by cooperative consumers of a producer warpgroup
    elif not (dtype == "tf32" and step in ("tma_store", "pingpong")):
        assert ran >= 5


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu", "alpha+beta+relu"])
@pytest.mark.parametrize("step", ["warp_specialized", "persistent", "tma_store", "sliced_store", "cluster_multicast",
                                  "pingpong"])
def test_epilogues_on_odd_shapes(epilogue, step):
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    config = dict(FAMILY.ladder(arch))[step]
    rng = np.random.default_rng(11)
    for shape, layout, dtype in [((136, 200, 72), "nt", "fp16"), ((1000, 1000, 1000), "nn", "bf16"),
                                 ((264, 520, 4104), "tt", "fp16"), ((3000, 5000, 704), "nt", "tf32")]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
        if FAMILY.supports(spec, arch) or FAMILY.rejections(config, spec, arch):
            continue
        result = evaluate(compile_kernel(FAMILY.render(spec, config, arch), arch), verify_only=True, rng=rng)
        assert result.verify.ok, f"{step} {spec.short()}: {result.verify.message}"


@pytest.mark.parametrize("out_dtype", ["fp32"])
def test_fp32_output_of_16bit_inputs(out_dtype):
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    for step in ("persistent", "tma_store"):
        config = dict(FAMILY.ladder(arch))[step].with_(stages=2)
        spec = GemmSpec(1000, 1000, 1000, layout="nt", dtype="bf16", epilogue="relu+add", out_dtype=out_dtype)
        result = evaluate(compile_kernel(FAMILY.render(spec, config, arch), arch), verify_only=True,
                          rng=np.random.default_rng(5))
        assert result.verify.ok, result.verify.message


@pytest.mark.parametrize("slices", [2, 4])
@pytest.mark.parametrize("dtype,layout", [("bf16", "nt"), ("fp16", "tn"), ("bf16", "tt"), ("tf32", "nt")])
def test_sliced_store_on_odd_shapes(slices, dtype, layout):
    """The TMA-store epilogue in 2 or 4 column slices (the buffer reused while earlier slices drain),
    with an epilogue that needs no C, on shapes whose tiles are cut at every edge."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    config = dict(FAMILY.ladder(arch))["tma_store"].with_(stages=2, store_slices=slices)
    rng = np.random.default_rng(slices)
    ran = 0
    for shape in [(136, 200, 72), (1000, 1000, 1000), (264, 520, 4104), (3000, 5000, 704), (4096, 8, 4096)]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue="bias_col+relu")
        if FAMILY.supports(spec, arch) or FAMILY.rejections(config, spec, arch):
            continue
        result = evaluate(compile_kernel(FAMILY.render(spec, config, arch), arch), verify_only=True, rng=rng)
        assert result.verify.ok, f"slices {slices} {spec.short()}: {result.verify.message}"
        ran += 1
    assert ran >= 3


@pytest.mark.parametrize("epilogue", [None, "relu+add"])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_pingpong_many_tiles_per_block(epilogue, cluster_m):
    """Ping-pong consumers alternate over many tiles per block (each finds its k-blocks in the shared
    ring by position), with C reloaded into each consumer's own buffer, with and without clusters."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    config = dict(FAMILY.ladder(arch))["pingpong"].with_(cluster_m=cluster_m)
    for shape, layout in [((2056, 2184, 200), "nt"), ((1000, 3000, 64), "tn"), ((520, 4104, 1000), "nn")]:
        spec = GemmSpec(*shape, layout=layout, dtype="fp16", epilogue=epilogue)
        result = evaluate(compile_kernel(FAMILY.render(spec, config, arch), arch), verify_only=True,
                          rng=np.random.default_rng(3))
        assert result.verify.ok, f"pingpong {spec.short()}: {result.verify.message}"


SPLIT_CASES = [  # (shape, layout, dtype): each has split tiles without clusters (see test_wgmma_schedule.py)
    ((1000, 1000, 2000), "nt", "bf16"),    # 32 tiles < 132: each split in 2 (16 k-blocks each)
    ((2056, 2184, 2000), "tn", "fp16"),    # 153 tiles: a round on 128 blocks, then 25 tiles split 2 ways
    ((264, 520, 4104), "tt", "fp16"),      # 9 tiles, 65 k-blocks each: 4 K ranges, K tail
    ((1, 4096, 8192), "nn", "bf16"),       # M = 1: 16 tiles of 128 k-blocks, 8 ways
    ((2048, 5120, 5120), "nt", "fp16"),    # 320 tiles: two rounds of 128, then 64 tiles in halves
    # Tails over half the workers, shared in even runs of k-blocks that cross from unit to unit:
    ((500, 4344, 4600), "nt", "bf16"),     # 68 tiles (34 pairs): 132 (66) shares of 37.1 k-blocks, K tail
    ((1000, 6392, 4600), "tn", "fp16"),    # 200 tiles: a wave, then 68 in 132 shares (pairs: 34 in 66)
    # Many-way splits, reduced in shares, each piece writing its share of D (schedule.SCATTER_SPLITS):
    ((96, 96, 65536), "nt", "bf16"),       # 1 tile of 1024 k-blocks in 64 pieces
    ((33, 40, 139264), "nt", "fp16"),      # 1 tile in 132 pieces (66 in pairs): more pieces than a warpgroup's threads
]


@pytest.mark.parametrize("epilogue", ["none", "relu+add", "bias_row+gelu+add"])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_split_tail_on_odd_shapes(epilogue, cluster_m):
    """Tiles split along K and summed (by a finisher, or in shares): right on shapes cut at every edge, in all
    four layouts, with C, and still right after many launches (the ready flags reset themselves)."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate
    from gemmtune.timing import TimingProtocol

    arch = _hopper()
    steps = dict(FAMILY.ladder(arch))
    base = steps["tma_store"] if epilogue != "none" else steps["sliced_store"].with_(store_slices=2)
    config = base.with_(split_tail=True, cluster_m=cluster_m)
    quick = TimingProtocol(warmup=2, min_reps=3, max_reps=5, min_time_s=0.0)
    for shape, layout, dtype in SPLIT_CASES:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue if epilogue != "none" else None)
        result = evaluate(compile_kernel(FAMILY.render(spec, config, arch), arch), quick,
                          rng=np.random.default_rng(11))
        assert result.verify.ok, f"split tail {spec.short()} {config.describe()}: {result.verify.message}"


@pytest.mark.parametrize("cluster_m", [1, 2])
def test_serpentine_on_odd_shapes(cluster_m):
    """serpentine: every other piece's k-blocks loaded last to first; right with whole rounds before a
    split tail (so backward pieces and shares meet), with C through the ring prefetched to L2, in
    all four layouts."""
    arch = _hopper()
    steps = dict(FAMILY.ladder(arch))
    plain = steps["sliced_store"].with_(store_slices=2, split_tail=True, serpentine=True, cluster_m=cluster_m)
    ring = plain.with_(c_ring=True, c_l2_prefetch=True, stmatrix=True)
    cases = [(GemmSpec(3000, 2200, 1104, "tn", "fp16", "relu+add"), ring),
             (GemmSpec(2056, 2184, 2000, "nn", "bf16"), plain),
             (GemmSpec(2048, 5120, 5120, "nt", "fp16", "bias_row+gelu+add"), ring),
             (GemmSpec(3000, 2200, 1104, "tt", "bf16"), plain),
             (GemmSpec(1000, 6392, 4600, "nn", "bf16", "relu+add"), ring)]  # a wave, then shares
    for spec, config in cases:
        _verify_launches(spec, config, arch, (21, 22), "serpentine")


def test_split_tail_with_direct_stores_and_fp32_out():
    """Split tiles with the direct-store epilogue (D rows too short for TMA), tf32, and fp32 D."""
    arch = _hopper()
    steps = dict(FAMILY.ladder(arch))
    cases = [(GemmSpec(130, 7, 8200, "nt", "fp16", "relu"), steps["persistent"].with_(split_tail=True)),
             (GemmSpec(777, 1000, 3000, "nt", "tf32", "alpha+beta"), steps["persistent"].with_(split_tail=True)),
             (GemmSpec(1000, 1000, 2000, "nt", "bf16", "add", out_dtype="fp32"),
              steps["tma_store"].with_(bn=128, split_tail=True, cluster_m=2))]
    for spec, config in cases:
        _verify_launches(spec, config, arch, (5,), "split tail")


# Odd shapes in all four layouts, with epilogues that read C: the cases of the tests of the ways C
# reaches the epilogue (each test adds its own).
ODD_C_CASES = [((136, 200, 72), "nt", "fp16", "relu+add"), ((1000, 1000, 2000), "nn", "bf16", "bias_row+gelu+add"),
               ((264, 520, 4104), "tt", "fp16", "alpha+beta"), ((2056, 2184, 200), "tn", "bf16", "add")]


def _verify_launches(spec: GemmSpec, config, arch: str, seeds: tuple[int, ...], label: str) -> None:
    """Compile `config` for `spec` once and verify one launch per seed (fresh inputs, poisoned D each
    time: a second launch shows state that a first one leaves behind)."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    compiled = compile_kernel(FAMILY.render(spec, config, arch), arch)
    for seed in seeds:
        result = evaluate(compiled, verify_only=True, rng=np.random.default_rng(seed))
        assert result.verify.ok, f"{label} {spec.short()} {config.describe()}: {result.verify.message}"


SHARE_SUM_CASES = [  # (spec, the spec whose chooser pick it runs, or its pick with this tile): every ShareSum regime
    (GemmSpec(96, 96, 65536, "nt", "bf16"), None),                                 # 64x64: 2 lanes an element
    (GemmSpec(72, 88, 90000, "tn", "fp16"), (128, 128)),                           # 1 tile, 87 pieces: 4 lanes
    (GemmSpec(504, 504, 65544, "nt", "bf16"), GemmSpec(512, 512, 65536, "nt", "bf16")),  # clusters of 4: passes
    (GemmSpec(96, 96, 65536, "nn", "fp32"), None),                                 # 3xtf32: 8 loads in flight
    (GemmSpec(200, 168, 40000, "tt", "tf32", "bias_row+gelu+add"), None),
]


@pytest.mark.parametrize("case", range(len(SHARE_SUM_CASES)))
def test_share_sums_of_many_way_splits(case):
    """The pieces' share sums (ShareSum: lanes that shuffle, several elements and partial tiles in
    flight) right in every regime, launch after launch (the counters and flags reset themselves)."""
    from gemmtune.chooser import choose
    from gemmtune.kernels.wgmma.schedule import schedule_for

    arch = _hopper()
    spec, like = SHARE_SUM_CASES[case]
    if isinstance(like, tuple):
        config = choose(spec, arch).config.with_(bm=like[0], bn=like[1], consumers=like[0] // 64)
    else:
        config = choose(like or spec, arch).config
    assert schedule_for(spec, config).scatter, config.describe()
    _verify_launches(spec, config, arch, (31, 32, 33), "share sums")


@pytest.mark.parametrize("slices", [2, 4])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_c_ring_on_odd_shapes(slices, cluster_m):
    """C through the ring (c_ring), a slice per slot after each tile's k-blocks: split tails, clusters,
    all four layouts, edges clipped, fp32 output; the kernel is launched twice (the ring position
    carries on across tiles and launches start afresh)."""
    arch = _hopper()
    config = dict(FAMILY.ladder(arch))["sliced_store"].with_(store_slices=slices, c_ring=True, cluster_m=cluster_m,
                                                             split_tail=True)
    for shape, layout, dtype, epilogue in [*ODD_C_CASES, ((130, 4100, 8200), "nt", "tf32", "relu+add")]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
        if FAMILY.rejections(config, spec, arch):  # fp32 C: 4 slices needed for a 32 KB slot
            assert dtype == "tf32" and slices == 2, (spec.short(), FAMILY.rejections(config, spec, arch))
            continue
        _verify_launches(spec, config, arch, (13, 14), "c_ring")


@pytest.mark.parametrize("base", ["sliced_store", "tma_store"])
def test_clusters_of_four_on_odd_shapes(base):
    """Clusters of 4 blocks along M, each loading a quarter of B and multicasting it: tile rows that
    do not fill a cluster, split tails, all four layouts, C through the ring and in place."""
    arch = _hopper()
    config = dict(FAMILY.ladder(arch))[base].with_(cluster_m=4, split_tail=True)
    ran = 0
    for shape, layout, dtype, epilogue in [*ODD_C_CASES, ((127, 4096, 4096), "nt", "bf16", "relu"),
                                           ((130, 4100, 8200), "nt", "tf32", "")]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
        candidate = config.with_(c_ring=base == "sliced_store" and spec.epilogue.reads_c,
                                 store_slices=config.store_slices if base == "sliced_store" else 1)
        if FAMILY.rejections(candidate, spec, arch):
            candidate = candidate.with_(store_slices=4)
        assert not FAMILY.rejections(candidate, spec, arch), (spec.short(), FAMILY.rejections(candidate, spec, arch))
        _verify_launches(spec, candidate, arch, (31, 32), "cluster4")
        ran += 1
    assert ran == 6


@pytest.mark.parametrize("variant", ["ring2_prefetch", "ring4_prefetch_cluster", "tile_in_place", "spread_cluster",
                                     "pingpong"])
def test_stmatrix_and_c_prefetch_on_odd_shapes(variant):
    """The stmatrix/ldmatrix write-back (16-bit D) in each way C reaches the epilogue (through the
    ring with L2 prefetches, in place in the whole-tile buffer, in 16-row boxes, ping-pong buffers)
    and without C; c_l2_prefetch also with fp32 D (pair stores). Odd shapes, all layouts, two launches."""
    arch = _hopper()
    steps = dict(FAMILY.ladder(arch))
    ring = steps["sliced_store"].with_(c_ring=True, c_l2_prefetch=True, split_tail=True)
    config = {"ring2_prefetch": ring.with_(store_slices=2),
              "ring4_prefetch_cluster": ring.with_(store_slices=4, cluster_m=2),
              "tile_in_place": steps["tma_store"].with_(split_tail=True),
              "spread_cluster": steps["tma_store"].with_(c_spread=True, cluster_m=2),
              "pingpong": steps["pingpong"]}[variant]
    ran = 0
    for shape, layout, dtype, epilogue in [*ODD_C_CASES, ((1000, 264, 1032), "nt", "bf16", "bias_col+relu"),
                                           ((7, 8, 8), "nt", "fp16", ""),
                                           ((130, 4100, 8200), "nt", "tf32", "relu+add")]:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
        for use_stmatrix in (True, False):
            candidate = config.with_(stmatrix=use_stmatrix)
            if not spec.epilogue.reads_c:
                candidate = candidate.without_c_options()
            if not use_stmatrix and not candidate.c_l2_prefetch:
                continue  # the plain pair write-back without prefetches is covered by the tests above
            if FAMILY.rejections(candidate, spec, arch):
                assert dtype == "tf32" or not spec.epilogue.reads_c, (spec.short(), FAMILY.rejections(candidate, spec, arch))
                continue
            _verify_launches(spec, candidate, arch, (21, 22), variant)
            ran += 1
    assert ran >= 5


@pytest.mark.parametrize("base", ["tma_store", "pingpong"])
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_c_spread_on_odd_shapes(base, cluster_m):
    """C loaded as 16-row boxes a k-block at a time (c_spread), the rest at a piece's last k-block
    when K is short; with ping-pong buffers, clusters and split tails, in all four layouts."""
    arch = _hopper()
    config = dict(FAMILY.ladder(arch))[base].with_(c_spread=True, cluster_m=cluster_m,
                                                   split_tail=base == "tma_store")
    for shape, layout, dtype, epilogue in ODD_C_CASES:
        _verify_launches(GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue), config, arch, (13,),
                         "c_spread")


# Each case's changes to sliced_store in 2 slices with overlap_epilogue. The shapes reach every path
# of the overlapped loop: tiles of two k-blocks (the first is followed by the last), many; split tails whose shares cross units (pieces that end in a partial sum between whole tiles);
# a single tile per block and the worker's last tile; C through the ring in 2 and 4 slices with the
# fewest stages (the last k-block's slot is held until the lower half's C slices, loaded after it,
# are read).
OVERLAP_GPU_CASES = [
    ((136, 200, 72), "nt", "fp16", None, {}),
    ((1000, 1000, 128), "nn", "bf16", "relu+add", {"c_ring": True, "stages": 2}),  # the fewest stages
    ((1000, 1000, 80), "tt", "fp16", None, {"cluster_m": 2, "store_slices": 4}),
    ((2056, 2184, 200), "tn", "bf16", "bias_row+gelu+add", {"c_ring": True, "cluster_m": 2}),
    ((1000, 6392, 4600), "tn", "fp16", "relu+add", {"split_tail": True, "c_ring": True, "serpentine": True}),
    ((2048, 5120, 5120), "nt", "fp16", None, {"split_tail": True, "cluster_m": 2, "serpentine": True}),
    ((1, 4096, 8192), "nn", "bf16", None, {"split_tail": True}),
    ((264, 520, 4104), "tt", "fp16", "alpha+beta", {"c_ring": True, "c_l2_prefetch": True, "stmatrix": True}),
    ((130, 4100, 8200), "nt", "tf32", "bias_col+relu", {"store_slices": 4, "split_tail": True}),
    ((3000, 5000, 704), "nn", "bf16", None, {"bn": 128, "stmatrix": True}),
    ((4096, 4096, 4096), "nt", "bf16", None, {"bm": 64, "consumers": 1}),
    ((1000, 1000, 2000), "nt", "bf16", "add", {"bn": 128, "store_slices": 4, "stages": 3, "c_ring": True,
                                               "out_dtype": "fp32"}),  # the fewest stages for 4 slices
]


@pytest.mark.parametrize("case", range(len(OVERLAP_GPU_CASES)))
def test_overlap_epilogue_on_odd_shapes(case):
    """overlap_epilogue: half-width wgmma, each tile's write-back split around the next tile's first
    k-block; right on every path of that loop, launched twice (state the first launch leaves)."""
    arch = _hopper()
    shape, layout, dtype, epilogue, changes = OVERLAP_GPU_CASES[case]
    changes = dict(changes)
    out_dtype = changes.pop("out_dtype", None)
    config = dict(FAMILY.ladder(arch))["sliced_store"].with_(store_slices=2, overlap_epilogue=True).with_(**changes)
    spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue, out_dtype=out_dtype)
    assert not FAMILY.rejections(config, spec, arch), FAMILY.rejections(config, spec, arch)
    _verify_launches(spec, config, arch, (31, 32), "overlap_epilogue")


# Each case's changes to sliced_store in 2 slices with C through the ring, stmatrix and d_over_c (D
# written over C in its ring slot). The shapes reach: tiles of 2 k-blocks (the last slot's release
# comes in the next piece's first iteration, right after the write-back); 4 slices in 4 stages and 2
# slices in 2 stages (the ring then waits on the slots D still occupies); clusters (a slot goes back
# to both blocks); split tails whose pieces end in partial sums (a pending slot released by a piece
# that writes no D); M = 1 and a tile smaller than one box; one-consumer 64-row tiles.
D_OVER_C_GPU_CASES = [
    ((136, 200, 72), "nt", "fp16", "relu+add", {}),
    ((1000, 1000, 2000), "nn", "bf16", "bias_row+gelu+add", {"cluster_m": 2, "c_l2_prefetch": True, "serpentine": True}),
    ((264, 520, 4104), "tt", "fp16", "alpha+beta", {"store_slices": 4}),
    ((1000, 1000, 128), "nn", "bf16", "relu+add", {"stages": 2}),
    ((2056, 2184, 200), "tn", "bf16", "add", {"split_tail": True, "cluster_m": 2}),
    ((1000, 6392, 4600), "tn", "fp16", "relu+add", {"split_tail": True, "serpentine": True, "c_l2_prefetch": True}),
    ((1, 4096, 8192), "nt", "fp16", "bias_col+relu+add", {"split_tail": True}),
    ((7, 24, 16), "nt", "bf16", "relu+add", {}),
    ((3000, 5000, 704), "nt", "fp16", "relu+add", {"bm": 64, "consumers": 1, "stages": 5}),
]


@pytest.mark.parametrize("case", range(len(D_OVER_C_GPU_CASES)))
@pytest.mark.parametrize("first_buffer", [False, True])
def test_d_over_c_on_odd_shapes(first_buffer, case):
    """d_over_c: each slice of D written over its C in the ring slot and stored from there, the slot
    handed back once the store has read it (with c_first_buffer, the first slice in a buffer of its
    own, handed back with the last slot); right on every path, launched twice."""
    arch = _hopper()
    shape, layout, dtype, epilogue, changes = D_OVER_C_GPU_CASES[case]
    config = dict(FAMILY.ladder(arch))["sliced_store"].with_(
        store_slices=2, c_ring=True, stmatrix=True, d_over_c=True, c_first_buffer=first_buffer).with_(**changes)
    spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
    assert not FAMILY.rejections(config, spec, arch), FAMILY.rejections(config, spec, arch)
    _verify_launches(spec, config, arch, (41, 42), "d_over_c")


# Tile widths fitted to N (multiples of 8 other than 64/128/192/256; config.MEASURED_BN): they build for
# B stored K-major; not in the space or the chooser until measured.
FITTED_CASES = [  # (spec, config)
    (GemmSpec(5000, 300, 2048, "nt", "tf32"), dict(bm=128, bn=104, stages=6, persistent=False)),
    (GemmSpec(5000, 300, 2048, "nt", "tf32"), dict(bm=128, bn=104, stages=6, persistent=True, split_tail=True)),
    (GemmSpec(1000, 300, 1000, "nt", "bf16", "relu+add"), dict(bm=128, bn=152, stages=4)),
    (GemmSpec(776, 150, 4096, "tt", "bf16", "bias_row"), dict(bm=128, bn=152, stages=4, persistent=True,
                                                               split_tail=True, serpentine=True)),
    (GemmSpec(640, 72, 8192, "nt", "fp32", math="3xtf32"), dict(bm=128, bn=72, stages=4, persistent=True, split_tail=True)),
    (GemmSpec(100, 200, 65536, "nt", "bf16", "alpha+beta"), dict(bm=64, bn=200, stages=5, consumers=1,
                                                                  persistent=True, split_tail=True)),
]


@pytest.mark.parametrize("case", range(len(FITTED_CASES)))
def test_fitted_widths(case):
    """A tile width fitted to N (104, 152, 72, 200): right on edge-cut shapes, tf32, bf16 with C and
    bias, A stored M-contiguous, 3xtf32, a split tail cut many ways; launched twice (the split tails'
    flags reset themselves)."""
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    arch = _hopper()
    spec, fields = FITTED_CASES[case]
    config = WgmmaConfig(consumers=fields.pop("consumers", 2), tma_store=False, store_slices=1, **fields)
    assert not FAMILY.rejections(config, spec, arch), FAMILY.rejections(config, spec, arch)
    _verify_launches(spec, config, arch, (41, 42), "fitted width")


# The chooser's fitted twins (chooser.candidates.fitted_twin): the pick of each spec, or where the pick
# keeps its width (8192x200x2048 and 1000x300x1000: parents storing through TMA) the twin of a 128x128
# config storing directly.
FITTED_PICK_CASES = [
    GemmSpec(5000, 300, 2048, "nt", "tf32"),
    GemmSpec(8192, 200, 2048, "nt", "bf16"),          # persistent, split tail
    GemmSpec(100, 300, 65536, "nt", "bf16"),          # 64-row tiles, one tile row cut many ways
    GemmSpec(4999, 301, 1000, "tt", "fp16", "bias_row+relu"),
    GemmSpec(1000, 300, 1000, "nt", "bf16", "relu+add"),
]


@pytest.mark.parametrize("case", range(len(FITTED_PICK_CASES)))
def test_chooser_fitted_twins(case):
    """Every spec here gets a fitted twin from the chooser (or, where the chooser prefers another
    tile, the fitted twin of the 128x128 pick); right on random data, launched twice."""
    from gemmtune.chooser import choose
    from gemmtune.chooser.candidates import fitted_twin
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    arch = _hopper()
    spec = FITTED_PICK_CASES[case]
    pick = choose(spec, arch)
    config = pick.config if pick.fitted_from else fitted_twin(
        spec, WgmmaConfig(bm=128, bn=128, consumers=2, stages=4, persistent=True, split_tail=True))
    assert config is not None and config.bn % 64, config
    _verify_launches(spec, config, arch, (41, 42), "fitted twin")
