"""TVM workloads: every TVMScript function parses, and runs on the CPU (llvm) like numpy."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytestmark = pytest.mark.tvm

from gemmtune.errors import ConfigError
from gemmtune.spec import GemmSpec
from gemmtune.tvm import workloads
from gemmtune.tvm.check import cpu_rounds, cpu_run

LAYOUTS = ("nn", "nt", "tn", "tt")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("epilogue", [None, "relu+add"])
def test_gemm_parses_with_stored_shapes(layout: str, epilogue: str | None) -> None:
    spec = GemmSpec(24, 16, 8, layout, epilogue=epilogue)
    func = workloads.gemm(spec)
    shapes = [tuple(int(d) for d in param.shape) for param in func.params]  # 0.27: params are buffers
    expected = [spec.a_shape, spec.b_shape] + ([(24, 16)] if epilogue else []) + [(24, 16)]
    assert shapes == expected
    text = func.script()
    assert 'T.sblock("gemm")' in text and ('T.sblock("epilogue")' in text) == bool(epilogue)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("epilogue", [None, "relu+add"])
def test_unscheduled_gemm_matches_numpy_on_cpu(layout: str, epilogue: str | None) -> None:
    # Ragged sizes on purpose: the workload itself has no tiles.
    results = cpu_rounds(GemmSpec(19, 13, 7, layout, epilogue=epilogue), rounds=2)
    assert all(r.ok for r in results), [r.message for r in results]


def test_vector_add_on_cpu() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(37).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    np.testing.assert_allclose(cpu_run(workloads.vector_add(37), [a, b], (37,)), a + b, rtol=1e-6)


def test_window_sum_on_cpu() -> None:
    a = np.random.default_rng(2).standard_normal(20).astype(np.float32)
    expected = np.convolve(a, np.ones(4, np.float32), mode="valid")
    np.testing.assert_allclose(cpu_run(workloads.window_sum(20, 4), [a], (17,)), expected, rtol=1e-5, atol=1e-6)


def test_window_wider_than_input_is_rejected() -> None:
    with pytest.raises(ConfigError, match="does not fit"):
        workloads.window_sum(3, 4)


def test_unsupported_epilogue_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="relu\\+add"):
        workloads.gemm(GemmSpec(8, 8, 8, epilogue="bias_col+gelu"))
