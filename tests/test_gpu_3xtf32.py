"""GPU: fp32 as 3xtf32 (mma family) is right at fp32's tolerance on every layout, edge and epilogue,
is as accurate as cuBLAS SGEMM where it is picked, and the tf32 it is built from is not.

    pytest -q -p no:cacheprovider tests/test_gpu_3xtf32.py
"""
import numpy as np
import pytest

import gemmtune
from gemmtune.build import compile_configs
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.mma.config import candidates
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

FAMILY = get_family("mma")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1, 515, 300), (300, 1, 257), (1000, 1000, 1000),
          (4093, 4091, 4097)]
LAYOUTS = ("nn", "nt", "tn", "tt")


def _arch() -> str:
    from gemmtune.device import query_device

    arch = query_device().arch
    if int(arch.split("_")[1][:2]) < 80:
        pytest.skip(f"3xtf32 needs tf32 tensor cores (sm_80+), this GPU is {arch}")
    return arch


def _split(*shape, layout="nn", epilogue=None) -> GemmSpec:
    return GemmSpec(*shape, layout=layout, dtype="fp32", epilogue=epilogue, math="3xtf32")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_candidate_right_at_fp32_tolerance(layout):
    """Every 3xtf32 candidate config on shapes cut at every edge, verified against float64 with the
    fp32 tolerance (16·eps·√K; tf32 alone misses it by ~10x)."""
    from gemmtune.evaluate import evaluate

    arch = _arch()
    jobs = [(_split(*shape, layout=layout), config, arch) for shape in SHAPES
            for _, config in candidates(_split(*shape, layout=layout), arch)]
    kernels = compile_configs(jobs)
    for (spec, config, _), kernel in zip(jobs, kernels):
        assert not isinstance(kernel, Exception), f"{spec.short()} {config.describe()}: {kernel}"
        result = evaluate(kernel, verify_only=True, rng=np.random.default_rng(spec.m + spec.k))
        assert result.verify.ok, f"{spec.short()} {config.describe()}: {result.verify.message}"


def test_tf32_alone_fails_the_fp32_tolerance():
    """The check above can fail: one tf32 product of the same fp32 data is ~10x outside it."""
    from gemmtune.evaluate import evaluate
    from gemmtune.verify import compare, make_inputs, reference

    arch = _arch()
    spec = GemmSpec(1000, 1000, 1000, "nn", "tf32")
    kernel = gemmtune.build(spec, arch=arch)
    rng = np.random.default_rng(5)
    inputs = make_inputs(spec, rng)
    out = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(5))
    assert out.verify.ok  # right as tf32 ...
    import torch

    a, b = (torch.from_numpy(np.ascontiguousarray(inputs[x])).cuda() for x in ("A", "B"))
    d = kernel(a, b).cpu().numpy()
    as_fp32 = compare(d, reference(spec, inputs), "fp32", spec.k)
    assert not as_fp32.ok, as_fp32.message  # ... and wrong as fp32


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
def test_epilogues_on_odd_shapes(epilogue):
    """The mma family's 3xtf32 with every epilogue on rows TMA cannot read in place (on sm_90 the
    registry gives these to wgmma with staged operands, so mma is asked for by name)."""
    from gemmtune.evaluate import evaluate

    cases = (((127, 129, 131), "tn"), ((300, 258, 100), "nn"), ((1, 515, 300), "tt"))
    for shape, layout in cases:
        spec = _split(*shape, layout=layout, epilogue=epilogue)
        kernel = gemmtune.build(spec, arch=_arch(), family="mma")
        result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(11))
        assert result.verify.ok, f"{spec.short()}: {result.verify.message}"


def test_explicit_math_reaches_its_family():
    arch = _arch()
    # On sm_90 wgmma takes 3xtf32 in every layout and alignment (B transposed in shared memory; rows
    # TMA cannot read are staged first, even at M = 1, where gemv stays fp32 FMA); elsewhere mma.
    tensor = "wgmma" if arch.startswith("sm_90") else "mma"
    assert family_for(GemmSpec(2048, 2047, 2048, math="3xtf32"), arch).name == tensor
    assert family_for(GemmSpec(2048, 2048, 2048, math="3xtf32"), arch).name == tensor
    assert family_for(GemmSpec(1, 2047, 2048, math="3xtf32"), arch).name == tensor
    assert family_for(GemmSpec(2048, 2048, 2048, math="simt"), arch).name == "simt"


@pytest.mark.xfail(strict=True, reason="the mma family's 3xtf32 misses issue 35's accuracy bar: on an H100 (2026-11-25) its worst "
                   "element at 512x384x4096 was 2.2x SGEMM's (uniform, large), 2.1x (rows 1e±4), 3.3x (k 1e±4); "
                   "auto never picks mma's 3xtf32 (tests/test_precision.py; wgmma's meets it: test_gpu_wgmma_3xtf32.py). "
                   "strict: passing flags the bar as met")
def test_error_within_sgemm_on_the_report_inputs():
    """3xtf32's worst per-element error stays within 1.5x cuBLAS SGEMM's on the accuracy report's
    classes away from fp32's smallest normal numbers (there the split's small part underflows, and
    auto does not pick 3xtf32); tf32's is far outside (the comparison can fail)."""
    from gemmtune.accuracy import INPUT_CLASSES, TOO_SMALL_TO_SPLIT, run_report

    arch = _arch()
    spec = GemmSpec(512, 384, 4096, "nt", "fp32", math="3xtf32")
    kernels = [("3xtf32", gemmtune.build(spec, arch=arch, family="mma")),
               ("tf32", gemmtune.build(GemmSpec(512, 384, 4096, "nt", "tf32"), arch=arch))]
    rows = run_report(spec, kernels, INPUT_CLASSES)
    split = {r.input_class: r.ratio for r in rows if r.method == "3xtf32"}
    tf32 = {r.input_class: r.ratio for r in rows if r.method == "tf32"}
    assert tf32["uniform"] > 20, tf32
    bad = {name: ratio for name, ratio in split.items() if not ratio <= 1.5 and name not in TOO_SMALL_TO_SPLIT}
    assert not bad, bad
