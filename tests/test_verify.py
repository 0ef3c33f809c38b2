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


# --- 16-bit and tf32 -------------------------------------------------------------------------------
def _kernel_like(spec: GemmSpec, x: dict) -> np.ndarray:
    """What a correct tensor-core kernel returns: fp32 accumulation of the stored inputs, the
    epilogue in fp32, one rounding to D's type (read back as float64)."""
    from gemmtune.dtypes import round_to

    a = x["A"].T if spec.a_trans else x["A"]
    b = x["B"].T if spec.b_trans else x["B"]
    acc = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)
    operands = {op.name: x[op.name] for op in spec.epilogue.operands()}
    fp32 = spec.epilogue.reference(acc, operands).astype(np.float32)
    return round_to(fp32, spec.out_dtype).astype(np.float64)


def _tf32(values: np.ndarray) -> np.ndarray:
    """fp32 cut to tf32 (10 mantissa bits), as tensor cores read fp32 operands."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def test_tolerance_formula_per_dtype() -> None:
    acc = 16 * 2.0**-23 * math.sqrt(1024)
    assert tolerance("fp16", 1024) == pytest.approx(acc + 2**-11)
    assert tolerance("bf16", 1024) == pytest.approx(acc + 2**-8)
    assert tolerance("bf16", 1024, "fp32") == pytest.approx(acc)  # inputs exact, no output rounding
    assert tolerance("tf32", 1024) == pytest.approx(acc + 4 * 2**-10)
    assert tolerance("fp32", 1024) == pytest.approx(acc)
    with pytest.raises(SpecError, match="out dtype"):
        tolerance("fp16", 16, "fp8")


@pytest.mark.parametrize("dtype,out", [("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp32")])
def test_make_inputs_round_to_the_stored_types(dtype: str, out: str) -> None:
    from gemmtune.dtypes import round_to

    spec = GemmSpec(6, 5, 7, "tn", dtype, Epilogue.parse("bias_row+add"), out)
    x = make_inputs(spec, np.random.default_rng(1))
    for name, stored in (("A", dtype), ("B", dtype), ("C", out), ("bias", out)):
        assert x[name].dtype == np.float32
        np.testing.assert_array_equal(round_to(x[name], stored), x[name])  # already representable
    assert not np.array_equal(round_to(x["A"], "bf16"), x["A"]) or dtype == "bf16"  # fp16 keeps more bits


@pytest.mark.parametrize("dtype,out", [("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp32")])
@pytest.mark.parametrize("layout,epilogue", [("nn", "none"), ("nt", "relu+add"), ("tt", "bias_col+gelu"),
                                             ("tn", "alpha+beta")])
def test_correct_16_bit_results_pass(dtype: str, out: str, layout: str, epilogue: str) -> None:
    spec = GemmSpec(96, 80, 512, layout, dtype, Epilogue.parse(epilogue), out)
    x = make_inputs(spec, np.random.default_rng(2))
    result = compare(_kernel_like(spec, x), reference(spec, x, use_gpu=False), dtype, spec.k, out)
    assert result.ok, result.message


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_one_wrong_16_bit_element_fails(dtype: str) -> None:
    spec = GemmSpec(128, 128, 256, "nn", dtype)
    x = make_inputs(spec, np.random.default_rng(4))
    ref = reference(spec, x, use_gpu=False)
    out = _kernel_like(spec, x)
    rms = float(np.sqrt(np.mean(ref**2)))
    out[17, 33] += 0.1 * rms  # far beyond the output's rounding; bf16's Frobenius tolerance does not see it
    result = compare(out, ref, dtype, spec.k)
    assert not result.ok and "(17, 33)" in result.message
    assert result.max_element_error > result.element_tolerance


def test_a_16_bit_result_rounded_twice_as_coarsely_fails() -> None:
    """fp16 inputs but D rounded to bf16: 8x the allowed output rounding."""
    from gemmtune.dtypes import round_to

    spec = GemmSpec(64, 64, 128, "nn", "fp16")
    x = make_inputs(spec, np.random.default_rng(5))
    out = round_to(_kernel_like(spec, x), "bf16").astype(np.float64)
    assert not compare(out, reference(spec, x, use_gpu=False), "fp16", spec.k).ok


def test_tf32_sized_error_fails_fp32_and_passes_tf32() -> None:
    spec = GemmSpec(96, 64, 512, "nn", "fp32")
    x = make_inputs(spec, np.random.default_rng(6))
    ref = reference(spec, x, use_gpu=False)
    out = (_tf32(x["A"]) @ _tf32(x["B"])).astype(np.float64)  # what TF32 tensor cores compute
    assert not compare(out, ref, "fp32", spec.k).ok  # fp32 must not pass with TF32 on
    assert compare(out, ref, "tf32", spec.k).ok, compare(out, ref, "tf32", spec.k).message
    exact = _fp32_sequential(x["A"], x["B"]).astype(np.float64)
    assert compare(exact, ref, "fp32", spec.k).ok


@pytest.mark.parametrize("case", ["ok", "noisy", "one_element", "nan"])
def test_torch_tensors_are_judged_as_numpy_arrays_are(case):
    """compare() on torch tensors (the GPU judge's path, here on the CPU) gives numpy's verdict."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    ref = rng.standard_normal((63, 45)) * 10
    out = ref + rng.standard_normal(ref.shape) * 1e-4
    if case == "noisy":
        out = ref + rng.standard_normal(ref.shape) * 1.0
    elif case == "one_element":
        out[17, 3] += 50.0
    elif case == "nan":
        out[5, 6] = np.nan
    out = out.astype(np.float32)
    on_numpy = compare(out, ref, "bf16", 512)
    on_torch = compare(torch.from_numpy(out), torch.from_numpy(ref), "bf16", 512)
    assert on_torch.ok == on_numpy.ok and on_torch.nan_count == on_numpy.nan_count
    assert on_torch.rel_error == pytest.approx(on_numpy.rel_error, rel=1e-12, abs=0)
    assert on_torch.max_element_error == pytest.approx(on_numpy.max_element_error, rel=1e-12)
    assert on_torch.message == on_numpy.message
    assert on_numpy.ok == (case == "ok")
