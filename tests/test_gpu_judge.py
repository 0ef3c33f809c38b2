"""The GPU judge: a large D is compared with its float64 reference on the GPU (torch), under the
GPU lock, instead of being copied to the host and compared there (seconds for 100 M outputs).
Its verdicts must be the CPU judge's: the same kernel and inputs judged both ways agree, an
unwritten column is found, a wrong kernel fails. Marked `gpu`: skips without a driver and GPU."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import gemmtune.evaluate as evaluate_module
from gemmtune.compiler import compile_kernel
from gemmtune.device import query_device
from gemmtune.evaluate import evaluate
from gemmtune.spec import GemmSpec
from gemmtune.verify import gpu_reference
from test_gpu_dtypes import QUICK, naive_source

pytestmark = pytest.mark.gpu

LARGE = {dtype: GemmSpec(1024, 768, 2048, dtype=dtype) for dtype in ("bf16", "fp16")}


def _compiled(spec: GemmSpec, skip_last: bool = False):
    return compile_kernel(naive_source(spec, skip_last), query_device().arch)


@pytest.mark.parametrize("dtype", sorted(LARGE))
def test_the_gpu_judge_agrees_with_the_cpu_judge(dtype, monkeypatch):
    spec = LARGE[dtype]
    assert gpu_reference(spec), "the spec must be large enough for the GPU judge"
    compiled = _compiled(spec)
    on_gpu = evaluate(compiled, QUICK, rng=np.random.default_rng(5), verify_only=True).verify
    monkeypatch.setattr(evaluate_module, "gpu_reference", lambda spec: False)  # reference and judge on the CPU
    on_cpu = evaluate(compiled, QUICK, rng=np.random.default_rng(5), verify_only=True).verify
    assert on_gpu.ok and on_cpu.ok, (on_gpu.message, on_cpu.message)
    assert on_gpu.rel_error == pytest.approx(on_cpu.rel_error, rel=1e-6)
    assert on_gpu.max_element_error == pytest.approx(on_cpu.max_element_error, rel=1e-6)


def test_the_gpu_judge_finds_an_unwritten_column():
    spec = LARGE["bf16"]
    verdict = evaluate(_compiled(spec, skip_last=True), QUICK, verify_only=True).verify
    assert not verdict.ok and verdict.nan_count == spec.m, verdict.message


def test_the_gpu_judge_fails_a_wrong_kernel():
    """The kernel of another K (1024 instead of 2048): finite, plausible and wrong."""
    spec = LARGE["fp16"]
    half_k = _compiled(GemmSpec(spec.m, spec.n, spec.k // 2, dtype="fp16"))
    wrong = replace(half_k, source=replace(half_k.source, spec=spec))
    verdict = evaluate(wrong, QUICK, verify_only=True).verify
    assert not verdict.ok and "relative error" in verdict.message, verdict.message


def test_prepared_inputs_serve_several_candidates():
    """The tuner's measuring child checks every candidate of a shape on one prepared set of
    inputs: right kernels pass on it each time, a kernel missing a column still fails."""
    from gemmtune.evaluate import prepare

    spec = LARGE["bf16"]
    prepared = prepare(spec, np.random.default_rng(11))
    for _ in range(2):
        assert evaluate(_compiled(spec), QUICK, prepared=prepared).ok
    assert not evaluate(_compiled(spec, skip_last=True), QUICK, prepared=prepared, verify_only=True).ok
