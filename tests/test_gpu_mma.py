"""GPU: every mma ladder step × layout × dtype computes the right product on shapes cut at every edge
(1³, 7×13×5, 127×129×131, M = 1, N = 1) and large ones (1000³, 3000×5000×1500, 4093×4091×4097), checked by the common verifier (float64
reference of the rounded inputs, NaN-poisoned D, per-dtype tolerance); every epilogue on odd shapes.

    pytest -q -p no:cacheprovider tests/test_gpu_mma.py
"""
import numpy as np
import pytest

import gemmtune
from gemmtune.build import compile_configs
from gemmtune.kernels import family_for, get_family
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

FAMILY = get_family("mma")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1, 515, 300), (300, 1, 257), (1000, 1000, 1000),
          (3000, 5000, 1500), (4093, 4091, 4097)]
LAYOUTS = ("nn", "nt", "tn", "tt")
DTYPES = ("bf16", "fp16", "tf32")
STEPS = [name for name, _ in FAMILY.ladder("sm_80")]


def _arch() -> str:
    from gemmtune.device import query_device

    return query_device().arch


def _supported(dtype: str, arch: str) -> bool:
    return FAMILY.supports(GemmSpec(1, 1, 1, "nn", dtype), arch) is None


@pytest.fixture(scope="module")
def compiled_ladder():
    """Every (step, dtype, layout, shape) compiled once, in parallel: NVRTC is the slow part."""
    arch = _arch()
    jobs = [(GemmSpec(*shape, layout=layout, dtype=dtype), config, arch)
            for _, config in FAMILY.ladder(arch) for dtype in DTYPES if _supported(dtype, arch)
            for layout in LAYOUTS for shape in SHAPES]
    return compiled_by_job(jobs)


def compiled_by_job(jobs: list) -> dict:
    """(spec, config) -> kernel for every (spec, config, arch) job, compiled in parallel; any
    compile failure fails the caller (its first three named)."""
    kernels = compile_configs(jobs)
    failed = [(job[0].short(), job[1].describe(), str(k)) for job, k in zip(jobs, kernels) if isinstance(k, Exception)]
    assert not failed, failed[:3]
    return {(job[0], job[1]): kernel for job, kernel in zip(jobs, kernels)}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ladder_step_correct(compiled_ladder, step, dtype, layout):
    from gemmtune.evaluate import evaluate

    arch = _arch()
    if not _supported(dtype, arch):
        pytest.skip(f"{dtype} mma.sync needs sm_80, this GPU is {arch}")
    config = dict(FAMILY.ladder(arch))[step]
    rng = np.random.default_rng(STEPS.index(step) * 100 + DTYPES.index(dtype) * 10 + LAYOUTS.index(layout))
    for shape in SHAPES:
        spec = GemmSpec(*shape, layout=layout, dtype=dtype)
        result = evaluate(compiled_ladder[(spec, config)], verify_only=True, rng=rng)
        assert result.verify.ok, f"{step} {spec.short()}: {result.verify.message}"


EPILOGUES = ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu", "alpha+beta+relu", "bias_col+gelu+add"]
EPILOGUE_CASES = [((127, 129, 131), "tn", "bf16", None), ((7, 13, 5), "nn", "fp16", None),
                  ((300, 258, 100), "nt", "fp16", "fp32"), ((131, 127, 67), "tt", "tf32", None),
                  ((1, 515, 300), "nn", "bf16", None)]


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("step", ["smem_mma", "swizzle", "tuned"])
def test_epilogues_on_odd_shapes(epilogue, step):
    """Every epilogue op through gemmtune.build (family mma, the step's config), odd N (single stores)
    and even N (pair stores), 16-bit and fp32 D."""
    from gemmtune.evaluate import evaluate

    arch = _arch()
    config = dict(FAMILY.ladder(arch))[step]
    for shape, layout, dtype, out in EPILOGUE_CASES:
        if not _supported(dtype, arch):
            continue
        spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue, out_dtype=out)
        kernel = gemmtune.build(spec, config=config, arch=arch, family="mma")
        result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(7))
        assert result.verify.ok, f"{step} {spec.short()}: {result.verify.message}"


@pytest.mark.parametrize("shape,layout,dtype", [((3000, 5000, 1500), "nn", "bf16"), ((77, 13, 5), "nn", "fp16"),
                                                ((1000, 1000, 1000), "tt", "tf32"), ((640, 1001, 333), "tn", "fp16")])
def test_registry_default_config(shape, layout, dtype):
    """Specs wgmma runs only with staged operands, or not at all (unaligned rows, MN-major tf32), reach
    mma through the registry where wgmma does not take them (every one below sm_90; on sm_90 the
    staging kernel takes 3000x5000x1500 nn and 1000^3 tt tf32, so those build mma by name), with the
    config the registry gives the family, and come out right; launched twice."""
    from gemmtune.evaluate import evaluate

    arch = _arch()
    spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue="bias_col+relu")
    if not _supported(dtype, arch):
        pytest.skip(f"{dtype} mma.sync needs sm_80")
    picked = family_for(spec, arch).name
    assert picked == "mma" or (picked == "wgmma" and arch.startswith("sm_90")), picked
    kernel = gemmtune.build(spec, arch=arch, family="mma")
    for seed in (1, 2):
        result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(seed))
        assert result.verify.ok, f"{spec.short()} {kernel.config.describe()}: {result.verify.message}"


@pytest.mark.parametrize("shape,layout,dtype", [((4093, 4091, 4097), "nt", "bf16"), ((3000, 5000, 1500), "nn", "fp16"),
                                                ((1000, 1000, 1000), "nn", "tf32"), ((1031, 517, 263), "tt", "bf16"),
                                                ((2048, 2048, 2048), "nt", "bf16")])
def test_candidates_correct(shape, layout, dtype):
    """Every named candidate config (2 blocks/SM, 32-byte slices, register-staged odd rows) comes out right."""
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels.mma.config import candidates

    arch = _arch()
    spec = GemmSpec(*shape, layout=layout, dtype=dtype)
    for name, config in candidates(spec, arch):
        kernel = gemmtune.build(spec, config=config, arch=arch, family="mma")
        result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(3))
        assert result.verify.ok, f"{name} {spec.short()} {config.describe()}: {result.verify.message}"


def _random_specs(count: int, seed: int = 2026) -> list[GemmSpec]:
    """Shapes of every kind the registry meets: half with 16-element multiples (wgmma's on sm_90a),
    half of any length, M or N = 1 now and then; every layout and tensor-core dtype."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(count):
        m, n, k = (int(x) for x in rng.integers(1, 1100, size=3))
        if i % 2 == 0:
            m, n, k = (max(16, x // 16 * 16) for x in (m, n, k))
        if i % 17 == 5:
            m = 1
        if i % 19 == 7:
            n = 1
        specs.append(GemmSpec(m, n, k, layout=LAYOUTS[i % 4], dtype=DTYPES[(i // 4) % 3]))
    return specs


def test_registry_pick_on_a_hundred_random_shapes():
    """What gemmtune.build(spec) picks (gemv, wgmma or mma on this GPU) for 100 random shapes,
    aligned or not, verified: the fallback leaves no shape refused or wrong."""
    from gemmtune.build import chosen_config, target_arch
    from gemmtune.evaluate import evaluate

    arch = target_arch(None)
    specs = [s for s in _random_specs(100) if _supported(s.dtype, arch)]
    picks = [chosen_config(spec, None, arch, None) for spec in specs]
    kernels = compile_configs([(spec, chosen.config, arch) for spec, (_, chosen) in zip(specs, picks)])
    families = {}
    for spec, (family, _), kernel in zip(specs, picks, kernels):
        assert not isinstance(kernel, Exception), f"{spec.short()} ({family.name}): {kernel}"
        result = evaluate(kernel, verify_only=True, rng=np.random.default_rng(spec.m * 7 + spec.n))
        assert result.verify.ok, f"{spec.short()} ({family.name}): {result.verify.message}"
        families[family.name] = families.get(family.name, 0) + 1
    print("families picked:", families)
