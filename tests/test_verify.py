"""verify.py on the CPU: tolerances, the comparison, inputs and the float64 reference."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gemmtune.epilogue import Epilogue
from gemmtune.errors import SpecError
from gemmtune.spec import GemmSpec
from gemmtune.verify import FLOOR, compare, make_inputs, reference, tolerance

LAYOUT_SUBSCRIPTS = {"nn": "ik,kj->ij", "nt": "ik,jk->ij", "tn": "ki,kj->ij", "tt": "ki,jk->ij"}


def _gelu(x: np.ndarray) -> np.ndarray:
    # Written out separately from epilogue.py so the two can disagree.
    return np.vectorize(lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))))(x)


EPILOGUE_FORMULAS = {
    "none": lambda p, x: p,
    "relu+add": lambda p, x: np.maximum(p, 0) + x["C"],
    "alpha+beta": lambda p, x: x["alpha"] * p + x["beta"] * x["C"],
    "bias_col+gelu": lambda p, x: _gelu(p + x["bias"][None, :]),
    "bias_row+relu": lambda p, x: np.maximum(p + x["bias"][:, None], 0),
    "alpha": lambda p, x: x["alpha"] * p,
}


def _fp32_sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A naive kernel's arithmetic: one fp32 rounding per multiply and per add, k in order."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[1]):
        acc += a[:, i:i + 1] * b[i:i + 1, :]
    return acc


# --- tolerance ---------------------------------------------------------------------------------
def test_tolerance_grows_with_sqrt_k() -> None:
    assert tolerance("fp32", 4096) == pytest.approx(tolerance("fp32", 1024) * 2)
    assert tolerance("fp32", 1) >= FLOOR
    assert tolerance("fp32", 4096) < 1e-3


def test_tolerance_is_looser_for_rounded_inputs_and_rejects_unknown_dtypes() -> None:
    assert tolerance("tf32", 1024) > 10 * tolerance("fp32", 1024)
    with pytest.raises(SpecError):
        tolerance("int8", 16)


# --- compare -----------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,k", [(64, 48, 1), (128, 96, 512), (32, 32, 8192)])
def test_compare_passes_real_fp32_products(m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert compare(a @ b, ref, "fp32", k).ok
    result = compare(_fp32_sequential(a, b), ref, "fp32", k)
    assert result.ok, result.message
    assert result.rel_error < result.tolerance / 10  # a wide margin, not a lucky pass


def _product(m: int = 256, n: int = 256, k: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    return a @ b, a.astype(np.float64) @ b.astype(np.float64)


def test_compare_catches_one_wrong_element() -> None:
    out, ref = _product()
    rms = np.sqrt(np.mean(ref**2))
    out[17, 201] += 1e-3 * rms  # invisible in the Frobenius norm of 65536 elements
    result = compare(out, ref, "fp32", 256)
    assert result.rel_error < result.tolerance
    assert not result.ok
    assert "(17, 201)" in result.message


def test_compare_catches_one_missing_k_step() -> None:
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (64, 300)).astype(np.float32)
    b = rng.uniform(-1, 1, (300, 64)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not compare(a[:, :-1] @ b[:-1, :], ref, "fp32", 300).ok


@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_compare_fails_on_nan_and_inf(poison: float) -> None:
    out, ref = _product(32, 32, 16)
    out[3, 4] = poison
    out[5, 6] = poison
    result = compare(out, ref, "fp32", 16)
    assert not result.ok and result.nan_count == 2
    assert "(3, 4)" in result.message


def test_compare_fails_on_wrong_shape_and_all_zero_output() -> None:
    out, ref = _product(32, 32, 16)
    assert not compare(out[:, :31], ref, "fp32", 16).ok
    assert not compare(np.zeros_like(out), ref, "fp32", 16).ok


def test_compare_handles_an_all_zero_reference() -> None:
    ref = np.zeros((8, 8))
    assert compare(np.zeros((8, 8), np.float32), ref, "fp32", 4).ok
    assert not compare(np.full((8, 8), 1e-3, np.float32), ref, "fp32", 4).ok


# --- inputs and reference ------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_make_inputs_shapes(layout: str) -> None:
    spec = GemmSpec(5, 7, 3, layout, epilogue=Epilogue.parse("bias_col+alpha+beta"))
    x = make_inputs(spec, np.random.default_rng(0))
    assert x["A"].shape == spec.a_shape and x["B"].shape == spec.b_shape
    assert x["C"].shape == (5, 7) and x["bias"].shape == (7,)
    for name in ("A", "B", "C", "bias"):
        assert x[name].dtype == np.float32 and x[name].flags.c_contiguous
        assert np.abs(x[name]).max() <= 1.0
    for name in ("alpha", "beta"):
        assert isinstance(x[name], float) and 1.0 < abs(x[name]) <= 2.0
        assert x[name] == float(np.float32(x[name]))  # exactly what the kernel receives


def test_make_inputs_bias_row_and_plain() -> None:
    row_bias = GemmSpec(5, 7, 3, epilogue=Epilogue.parse("bias_row"))
    assert make_inputs(row_bias, np.random.default_rng(0))["bias"].shape == (5,)
    assert set(make_inputs(GemmSpec(5, 7, 3), np.random.default_rng(0))) == {"A", "B"}


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("epilogue", list(EPILOGUE_FORMULAS))
def test_reference_matches_independent_formula(layout: str, epilogue: str) -> None:
    spec = GemmSpec(9, 6, 4, layout, epilogue=Epilogue.parse(epilogue))
    x = make_inputs(spec, np.random.default_rng(3))
    product = np.einsum(LAYOUT_SUBSCRIPTS[layout], x["A"].astype(np.float64), x["B"].astype(np.float64))
    x64 = {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v for k, v in x.items()}
    expected = EPILOGUE_FORMULAS[epilogue](product, x64)
    got = reference(spec, x, use_gpu=False)
    assert got.dtype == np.float64 and got.shape == (9, 6)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
