"""GPU: mma's transpose_copy (MN-major tf32 operands copied through registers and stored K-major)
computes the right product for layouts nn, tn, tt on shapes cut at every edge and large ones, with
the default tiles and with 32-byte slices (whose next slice stays in registers across the mma work),
checked by the common verifier (float64 reference, NaN-poisoned D, tf32 tolerance); one epilogue.

    pytest -q -p no:cacheprovider tests/test_gpu_mma_transpose.py
"""
import numpy as np
import pytest

import gemmtune
from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec
from test_gpu_mma import compiled_by_job

pytestmark = pytest.mark.gpu

FAMILY = get_family("mma")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1000, 1000, 1000), (4093, 4091, 4097)]
LAYOUTS = ("nn", "tn", "tt")
VARIANTS = ("default", "k32_s5")


def _arch() -> str:
    from gemmtune.device import query_device

    return query_device().arch


def _config(spec: GemmSpec, arch: str, variant: str):
    config = FAMILY.default_config(spec, arch).with_(transpose_copy=True)
    return config.with_(k_bytes=32, stages=5) if variant == "k32_s5" else config


@pytest.fixture(scope="module")
def compiled():
    """Every (variant, layout, shape) compiled once, in parallel."""
    arch = _arch()
    if FAMILY.supports(GemmSpec(1, 1, 1, "nn", "tf32"), arch):
        pytest.skip(f"tf32 mma.sync needs sm_80, this GPU is {arch}")
    jobs = [(spec, _config(spec, arch, variant), arch) for variant in VARIANTS for layout in LAYOUTS
            for spec in (GemmSpec(*shape, layout=layout, dtype="tf32") for shape in SHAPES)]
    return compiled_by_job(jobs)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_transpose_copy_correct(compiled, variant, layout):
    from gemmtune.evaluate import evaluate

    arch = _arch()
    rng = np.random.default_rng(LAYOUTS.index(layout) * 10 + VARIANTS.index(variant))
    for shape in SHAPES:
        spec = GemmSpec(*shape, layout=layout, dtype="tf32")
        config = _config(spec, arch, variant)
        result = evaluate(compiled[(spec, config)], verify_only=True, rng=rng)
        assert result.verify.ok, f"{variant} {spec.short()} {config.describe()}: {result.verify.message}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_transpose_copy_epilogue_on_odd_shape(layout):
    """bias_col+gelu+add through gemmtune.build on an odd shape (single stores, C read per element)."""
    from gemmtune.evaluate import evaluate

    arch = _arch()
    spec = GemmSpec(131, 127, 67, layout=layout, dtype="tf32", epilogue="bias_col+gelu+add")
    if FAMILY.supports(spec, arch):
        pytest.skip(f"tf32 mma.sync needs sm_80, this GPU is {arch}")
    kernel = gemmtune.build(spec, config=_config(spec, arch, "default"), arch=arch, family="mma")
    result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(7))
    assert result.verify.ok, f"{spec.short()}: {result.verify.message}"
