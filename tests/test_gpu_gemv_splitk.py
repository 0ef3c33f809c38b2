"""GPU: the gemv family and simt split-K compute the right result (float64 reference, poisoned D) on
odd shapes, every layout and dtype, epilogues, K up to 65536; and the chooser's picks run."""
import pytest

from gemmtune.build import build, compile_configs
from gemmtune.evaluate import evaluate
from gemmtune.kernels import get_family
from gemmtune.kernels.gemv.config import GemvConfig
from gemmtune.kernels.simt.config import SimtConfig, ladder
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

LAYOUTS = ("nn", "nt", "tn", "tt")
GEMV_SHAPES = [(1, 1, 1), (1, 13, 7), (77, 1, 5), (4099, 1, 1003), (1, 4096, 4096), (5, 1001, 4104), (16, 999, 777),
               (16, 1000, 4104), (3, 4096, 1000)]  # the last two: 4-byte columns kernels walk K in quads
LONG_K = [(1, 1000, 65536), (8, 512, 65536), (3000, 1, 65536)]  # default config only: inputs are large
GEMV_CONFIGS = [GemvConfig(), GemvConfig(threads=512, warps_per_output=4, threads_x=2, unroll=2),
                GemvConfig(threads=128, warps_per_output=1, threads_x=32, unroll=1),
                GemvConfig(threads=256, warps_per_output=2, outputs_per_warp=4, unroll=4)]
EPILOGUES = ("none", "bias_row+gelu+add", "alpha+beta+bias_col+relu")


def _arch() -> str:
    from gemmtune.device import query_device

    return query_device().arch


def _all_right(jobs):
    kernels = compile_configs(jobs)
    failures = []
    for (spec, config, _), kernel in zip(jobs, kernels):
        if isinstance(kernel, Exception):
            failures.append((spec.short(), config.describe(), str(kernel)[:100]))
        else:
            result = evaluate(kernel, verify_only=True)
            if not result.ok:
                failures.append((spec.short(), config.describe(), result.verify.message))
        if failures and failures[-1][0] == spec.short():
            print("FAILED", *failures[-1], flush=True)  # seen even if the run is cut short
    return failures


def _same_bits_twice(spec: GemmSpec, config) -> None:
    """Nothing is kept between launches: the first launch is checked, many are timed, and a last one is
    checked again (evaluate), so state a launch leaves behind shows as a wrong second check."""
    result = evaluate(build(spec, config=config).compiled)
    assert result.ok and result.measurement is not None


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_gemv_every_layout_shape_and_epilogue(dtype):
    arch = _arch()
    configs = GEMV_CONFIGS[::3] if dtype != "fp16" else GEMV_CONFIGS[:1]  # a plain and a grouped one
    jobs = [(GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue), config, arch)
            for shape in GEMV_SHAPES for layout in LAYOUTS for epilogue in EPILOGUES for config in configs
            if (epilogue == "none" or config == GEMV_CONFIGS[0])
            and not get_family("gemv").supports(GemmSpec(*shape, layout=layout, dtype=dtype), arch)
            and not get_family("gemv").rejections(config, GemmSpec(*shape, layout=layout, dtype=dtype), arch)]
    jobs += [(GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue), GEMV_CONFIGS[0], arch)
             for shape in LONG_K for layout in LAYOUTS for epilogue in EPILOGUES[:2]
             if not get_family("gemv").supports(GemmSpec(*shape, layout=layout, dtype=dtype), arch)]
    assert _all_right(jobs) == []


def test_gemv_fp32_output_from_bf16():
    jobs = [(GemmSpec(1, 999, 4104, layout=layout, dtype="bf16", out_dtype="fp32", epilogue="bias_col"),
             GemvConfig(), _arch()) for layout in LAYOUTS]
    assert _all_right(jobs) == []


SPLIT_SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (64, 4096, 4096), (100, 300, 65536), (3000, 500, 7000)]


@pytest.mark.parametrize("split", [3, 8])
def test_simt_split_k_on_odd_shapes(split):
    arch = _arch()
    steps = dict(ladder(arch))
    jobs = []
    for shape in SPLIT_SHAPES:
        for layout in LAYOUTS:
            for name in ("warptiling", "double_buffer") if split == 3 else ("double_buffer",):
                config = steps[name].with_(split_k=split)
                spec = GemmSpec(*shape, layout=layout, epilogue="relu+add" if layout == "tn" else "none")
                if -(-spec.k // config.bk) >= split:
                    jobs.append((spec, config, arch))
    assert _all_right(jobs) == []


@pytest.mark.parametrize("split", [3, 16])
def test_simt_split_k_workspace_on_odd_shapes(split):
    """The workspace reduction (the last split to arrive sums every split's partials) on odd shapes,
    every layout, an epilogue reading C, K up to 65536, a 4- and an 8-warp tile and one without vec4."""
    arch = _arch()
    steps = dict(ladder(arch))
    tiles = [steps["double_buffer"], SimtConfig(bm=64, bn=64, bk=32, tm=4, tn=4, wm=32, wn=32, wniter=2),
             SimtConfig(bm=64, bn=64, bk=16, tm=4, tn=4, wm=32, wn=16, wniter=1), steps["blocktile_1d"],
             steps["smem_tiling"]]  # one sum per thread: float (not float4) workspace accesses
    jobs = []
    for shape in SPLIT_SHAPES:
        for layout in LAYOUTS:
            for tile in tiles if layout == "nn" else tiles[:1]:
                config = tile.with_(split_k=split, split_reduce="workspace")
                spec = GemmSpec(*shape, layout=layout, epilogue="relu+add" if layout == "tn" else "none")
                if -(-spec.k // config.bk) >= split:
                    jobs.append((spec, config, arch))
    assert len(jobs) > 20
    assert _all_right(jobs) == []


def test_split_k_workspace_twice_in_a_row_gives_the_same_bits():
    """The arrival counters reset themselves: repeated launches (the timed ones) agree exactly."""
    _same_bits_twice(GemmSpec(64, 1024, 8192),
                     dict(ladder(_arch()))["double_buffer"].with_(split_k=12, split_reduce="workspace"))


def test_split_k_twice_in_a_row_gives_the_same_bits():
    """The turn semaphore resets itself: a second launch (and the timed ones) must agree exactly."""
    _same_bits_twice(GemmSpec(64, 1024, 8192), dict(ladder(_arch()))["double_buffer"].with_(split_k=4))


@pytest.mark.parametrize("spec", [GemmSpec(16, 4096, 4096), GemmSpec(3001, 2999, 777), GemmSpec(1, 32000, 4096),
                                  GemmSpec(16, 4096, 4096, "nt", "bf16"), GemmSpec(1, 11008, 4096, "nt", "bf16")],
                         ids=lambda s: s.short())
def test_chooser_picks_are_right(spec, tmp_path):
    kern = build(spec, db_path=tmp_path / "empty.sqlite")
    assert evaluate(kern.compiled, verify_only=True).ok, kern


# The columns kernel's two-stage reduction (warp shuffles, then GROUP vectors a pass through shared
# memory) across block shapes, including those where one vector's warp sums fill the buffer alone
# (1024 threads, 32 across), on the quads walk and row by row; outputs and K not multiples of the
# block's.
COLUMN_BLOCKS = [GemvConfig(threads=t, threads_x=x, unroll=u)
                 for t, x, u in ((64, 2, 2), (128, 32, 1), (512, 8, 1), (1024, 32, 2), (1024, 4, 4))]
COLUMN_SHAPES = [(16, 1000, 4104), (13, 999, 777), (5, 1004, 1000), (16, 2048, 1028), (1, 1001, 3000), (2, 8, 64)]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gemv_columns_reduction(dtype):
    arch = _arch()
    family = get_family("gemv")
    specs = [GemmSpec(*shape, layout="nn", dtype=dtype) for shape in COLUMN_SHAPES]
    jobs = [(spec, config, arch) for spec in specs if not family.supports(spec, arch)
            for config in COLUMN_BLOCKS if not family.rejections(config, spec, arch)]
    assert len(jobs) >= 20
    assert _all_right(jobs) == []


# The columns kernel with K split over a cluster's blocks (GemvConfig.k_splits, sums meeting in the first
# block's shared memory): one vector and several, quads and row by row (K not a multiple of 4), outputs not
# a multiple of a strip, K not a multiple of the splits, every epilogue kind; then repeated launches.
K_SPLIT_SHAPES = [(1, 1024, 4096), (1, 1000, 4100), (3, 1000, 1030), (16, 1000, 4104), (2, 8, 1024), (1, 4096, 700)]


@pytest.mark.parametrize("splits", [2, 4, 8, 16])
def test_gemv_columns_k_splits(splits):
    arch = _arch()
    configs = [GemvConfig(threads=256, threads_x=2, unroll=4, k_splits=splits),
               GemvConfig(threads=512, threads_x=8, unroll=1, k_splits=splits)]
    jobs = [(GemmSpec(*shape, layout="nn", dtype=dtype, epilogue=epilogue), config, arch)
            for shape in K_SPLIT_SHAPES for dtype in ("fp32", "bf16") for epilogue in EPILOGUES for config in configs
            if not get_family("gemv").supports(GemmSpec(*shape, layout="nn", dtype=dtype), arch)
            and not get_family("gemv").rejections(config, GemmSpec(*shape, layout="nn", dtype=dtype), arch)]
    assert len(jobs) >= 30
    assert _all_right(jobs) == []


def test_gemv_k_splits_twice_in_a_row_gives_the_same_bits():
    _same_bits_twice(GemmSpec(1, 1024, 4096, "nn", "fp32", "bias_row+relu"),
                     GemvConfig(threads=256, threads_x=2, unroll=4, k_splits=8))


# The columns kernel fed by TMA through a ring of shared-memory stages (GemvConfig.ring_stages): 2-16
# vectors, outputs not a multiple of a strip (the last box runs past N), K not a multiple of a stage (the last
# stage runs past K: TMA's zero fill), fp32 and tf32, every epilogue kind, block shapes with 1 and 2 quads a
# thread a stage, 2 to 8 stages; then repeated launches.
RING_SHAPES = [(16, 4096, 4096), (16, 1000, 4100), (7, 1000, 1028), (2, 8, 4), (3, 4, 4096), (16, 132, 260),
               (5, 4100, 12)]
RING_BLOCKS = [GemvConfig(threads=256, threads_x=8, unroll=1, ring_stages=4),
               GemvConfig(threads=128, threads_x=4, unroll=2, ring_stages=2),
               GemvConfig(threads=512, threads_x=16, unroll=1, ring_stages=3),
               GemvConfig(threads=128, threads_x=2, unroll=1, ring_stages=8)]


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_gemv_columns_ring(dtype):
    arch = _arch()
    family = get_family("gemv")
    jobs = [(GemmSpec(*shape, layout="nn", dtype=dtype, epilogue=epilogue), config, arch)
            for shape in RING_SHAPES for epilogue in EPILOGUES for config in RING_BLOCKS
            if (epilogue == "none" or config == RING_BLOCKS[0])
            and not family.supports(GemmSpec(*shape, layout="nn", dtype=dtype), arch)
            and not family.rejections(config, GemmSpec(*shape, layout="nn", dtype=dtype), arch)]
    assert len(jobs) >= 30
    assert _all_right(jobs) == []


def test_gemv_ring_twice_in_a_row_gives_the_same_bits():
    _same_bits_twice(GemmSpec(16, 4096, 4096, "nn", "fp32", "bias_row+relu"),
                     GemvConfig(threads=256, threads_x=8, unroll=1, ring_stages=4))
