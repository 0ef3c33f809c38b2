"""GPU (Hopper): fp8 GemmSpecs (issue 70) through the ordinary path: build() picks the fp8_grouped family, and
evaluate() checks each kernel on fresh random fp8 inputs (scales that differ from row to row and block to
block), D poisoned with NaN, against the float64 product of the dequantized operands with the fp8 tolerance;
then times it. A reference of other scales must fail, and `gemmtune bench` runs the spec end to end.

    PYTHONPATH=$PWD/src:$PWD/tests python -m pytest -q -m gpu tests/test_gpu_fp8_gemm.py
"""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.build import build
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

SCALINGS = ("tensor", "rowwise", "block")
# M = 1, 77, 300 (partial tiles of rows), N = 136 (a partial 128-column tile), K = 544 (a partial 128-long
# k-block: block scales change inside the tile's K) and 4096
SHAPES = [(1, 136, 4096), (77, 136, 544), (300, 136, 4096), (300, 1000, 544), (1000, 2048, 4096), (64, 64, 16)]


def _hopper() -> None:
    from gemmtune.device import query_device

    info = query_device()
    if info.cc != (9, 0):
        pytest.skip(f"fp8 wgmma needs an sm_90a GPU, this one is sm_{info.cc[0]}{info.cc[1]}")


def _verify(spec: GemmSpec, seed: int, config=None):
    from gemmtune.evaluate import evaluate

    kernel = build(spec, config=config, arch="sm_90a")
    assert kernel.family == "fp8_grouped" and kernel.spec == spec
    return evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_fp8_gemm_matches_the_dequantized_float64_product(dtype, scaling):
    _hopper()
    for i, shape in enumerate(SHAPES):
        spec = GemmSpec(*shape, "nt", dtype, scaling=scaling)
        result = _verify(spec, seed=i)
        assert result.ok, f"{spec.short()}: {result.verify.message}"
        assert result.verify.rel_error > 0  # a real comparison: bf16 D differs from the float64 product


@pytest.mark.parametrize("scaling, epilogue, out_dtype", [("tensor", "bias_col+gelu", "fp16"),
                                                         ("rowwise", "relu", "bf16"),
                                                         ("block", "bias_col", "fp16")])
def test_fp8_gemm_with_epilogue_and_fp16_out(scaling, epilogue, out_dtype):
    _hopper()
    for i, shape in enumerate([(77, 136, 544), (300, 1000, 4096)]):
        spec = GemmSpec(*shape, "nt", "e4m3", epilogue, out_dtype=out_dtype, scaling=scaling)
        result = _verify(spec, seed=10 + i)
        assert result.ok, f"{spec.short()}: {result.verify.message}"


@pytest.mark.parametrize("scaling", SCALINGS)
def test_every_ladder_step_is_right(scaling):
    from gemmtune.kernels import get_family

    _hopper()
    for name, config in get_family("fp8_grouped").ladder("sm_90a"):
        spec = GemmSpec(300, 136, 544, "nt", "e4m3", scaling=scaling)
        result = _verify(spec, seed=20, config=config)
        assert result.ok, f"{name} {spec.short()}: {result.verify.message}"


@pytest.mark.parametrize("scaling", SCALINGS)
def test_a_reference_of_other_scales_fails(scaling):
    """The check can fail: the same kernel and inputs, judged against the product with B's scales of another
    draw, is refused (a kernel that ignored or misplaced scales would be too)."""
    from gemmtune.evaluate import Prepared, evaluate, prepare
    from gemmtune.verify import reference

    _hopper()
    spec = GemmSpec(300, 136, 544, "nt", "e4m3", scaling=scaling)
    kernel = build(spec, arch="sm_90a")
    prepared = prepare(spec, np.random.default_rng(30))
    assert evaluate(kernel.compiled, verify_only=True, prepared=prepared).ok
    other = dict(prepared.inputs, scale_b=np.roll(prepared.inputs["scale_b"], 1, axis=0) * 1.5)
    wrong = Prepared(spec, prepared.inputs, reference(spec, other, use_gpu=False))
    assert not evaluate(kernel.compiled, verify_only=True, prepared=wrong).ok


def test_fp8_gemm_is_timed_after_it_is_verified():
    from gemmtune.evaluate import evaluate
    from gemmtune.timing import TimingProtocol

    _hopper()
    spec = GemmSpec(4096, 4096, 4096, "nt", "e4m3", scaling="rowwise")
    result = evaluate(build(spec, arch="sm_90a").compiled, TimingProtocol(min_time_s=0.05), np.random.default_rng(40))
    assert result.ok and result.measurement is not None
    assert result.tflops(spec) > 100, result.tflops(spec)  # an fp8 wgmma kernel, not a fallback (H200: ~1000+)


def test_bench_command_runs_an_fp8_spec(capsys):
    from gemmtune.cli import main

    _hopper()
    code = main(["bench", "M=300", "N=1000", "K=544", "--dtype", "e5m2", "--scale", "block", "--min-time", "0.05"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "no fp8 baseline row yet" in captured.err and "best" in captured.out
