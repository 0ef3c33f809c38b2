"""The epilogue algebra on the CPU: parsing, rejections, the float64 reference, and NVRTC compiles."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gemmtune.compiler import compile_kernel
from gemmtune.epilogue import (_GELU_K, FAST_GELU_OUT_DTYPES, FAST_GELU_PREAMBLE, GELU_CUBIC, GELU_PREAMBLE, OPS, Epilogue,
                               gelu_preamble)
from gemmtune.errors import SpecError
from gemmtune.export.reference import reference_source
from gemmtune.kernels.simt.render import render
from gemmtune.kernels.simt.config import default_config
from gemmtune.spec import OUT_DTYPES, GemmSpec
from gemmtune.verify import FP32_EPS, K_FACTOR, OUTPUT_ROUNDING

COMPOSITIONS = ["relu+add", "alpha+beta", "bias_col+gelu", "bias_row+relu+add", "alpha+bias_col+gelu+beta",
                "add+relu", "gelu+alpha"]
EVERY_EPILOGUE = sorted(OPS) + COMPOSITIONS


# --- independent formulas (written out here so they can disagree with epilogue.py) ---------------
def _gelu_sigmoid_form(x: np.ndarray) -> np.ndarray:
    # 0.5·(1 + tanh(z)) == sigmoid(2z): the same tanh-GELU, computed another way.
    z = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return x / (1.0 + np.exp(-2.0 * z))


SINGLE_OP = {
    "alpha": lambda v, x: x["alpha"] * v,
    "beta": lambda v, x: v + x["beta"] * x["C"],
    "bias_row": lambda v, x: v + x["bias"].reshape(-1, 1),
    "bias_col": lambda v, x: v + x["bias"].reshape(1, -1),
    "relu": lambda v, x: np.where(v > 0, v, 0.0),
    "gelu": lambda v, x: _gelu_sigmoid_form(v),
    "add": lambda v, x: v + x["C"],
}


def _formula(chain: str, v: np.ndarray, x: dict) -> np.ndarray:
    for name in chain.split("+"):
        v = SINGLE_OP[name](v, x)
    return v


def _operand_values(epilogue: Epilogue, m: int, n: int, rng: np.random.Generator) -> dict:
    values = {}
    for op in epilogue.operands():
        values[op.name] = float(rng.uniform(1.25, 2.0)) if op.kind == "scalar" else rng.uniform(-1, 1, op.shape(m, n))
    return values


# --- parsing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_parses_and_round_trips(name: str) -> None:
    epilogue = Epilogue.parse(name)
    assert epilogue.ops == (name,)
    assert Epilogue.parse(str(epilogue)) == epilogue
    assert not epilogue.is_identity


@pytest.mark.parametrize("text", [None, "", "none", " None "])
def test_empty_chain_is_identity(text) -> None:
    assert Epilogue.parse(text).is_identity
    assert str(Epilogue.parse(text)) == "none"


def test_parsing_ignores_case_and_spaces() -> None:
    assert Epilogue.parse(" ReLU + Add ") == Epilogue(("relu", "add"))


@pytest.mark.parametrize("chain", COMPOSITIONS)
def test_compositions_keep_their_order(chain: str) -> None:
    assert str(Epilogue.parse(chain)) == chain


@pytest.mark.parametrize("chain,operands", [
    ("relu", ()), ("add", ("C",)), ("beta", ("C", "beta")), ("alpha+beta", ("C", "alpha", "beta")),
    ("bias_row+gelu", ("bias",)), ("gelu+alpha+bias_col+add", ("C", "bias", "alpha")),
])
def test_operands_come_in_kernel_order(chain: str, operands: tuple) -> None:
    assert tuple(op.name for op in Epilogue.parse(chain).operands()) == operands


def test_operand_kinds_and_shapes() -> None:
    kinds = {op.name: (op.kind, op.shape(3, 5)) for op in Epilogue.parse("bias_row+alpha+beta").operands()}
    assert kinds == {"C": ("matrix", (3, 5)), "bias": ("row", (3,)), "alpha": ("scalar", ()), "beta": ("scalar", ())}
    assert Epilogue.parse("bias_col").operands()[0].shape(3, 5) == (5,)


@pytest.mark.parametrize("text,fragment", [
    ("sigmoid", "unknown epilogue op 'sigmoid'"),
    ("relu+tanh", "unknown epilogue op 'tanh'"),
    ("relu+", "unknown epilogue op ''"),
    ("relu++add", "unknown epilogue op ''"),
    ("relu+relu", "repeats an op"),
    ("add+beta", "uses C twice"),
    ("bias_row+bias_col", "two biases"),
])
def test_bad_chains_are_rejected_with_one_clear_line(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        Epilogue.parse(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message
    if "unknown" in fragment:
        assert "known: " in message and "relu" in message


def test_bad_chain_through_spec_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="unknown epilogue op 'softmax'"):
        GemmSpec(4, 4, 4, epilogue="softmax")


# --- float64 reference -------------------------------------------------------------------------
@pytest.mark.parametrize("chain", EVERY_EPILOGUE)
def test_reference_matches_independent_formula(chain: str) -> None:
    rng = np.random.default_rng(len(chain))
    epilogue = Epilogue.parse(chain)
    acc = rng.uniform(-3, 3, (6, 5))
    x = _operand_values(epilogue, 6, 5, rng)
    np.testing.assert_allclose(epilogue.reference(acc, x), _formula(chain, acc, x), rtol=1e-12, atol=1e-12)


def test_reference_is_float64_and_leaves_inputs_alone() -> None:
    acc = np.array([[-1.0, 2.0]], dtype=np.float32)
    out = Epilogue.parse("relu").reference(acc, {})
    assert out.dtype == np.float64 and acc.tolist() == [[-1.0, 2.0]] and out.tolist() == [[0.0, 2.0]]


def test_gelu_is_close_to_the_exact_erf_form() -> None:
    v = np.linspace(-6, 6, 1001)
    exact = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    assert np.max(np.abs(Epilogue.parse("gelu").reference(v, {}) - exact)) < 1e-3


# --- GELU's hardware tanh ---------------------------------------------------------------------
TANH_APPROX_REL_ERROR = 2.0**-11  # tanh.approx.f32's bound over its whole range (PTX ISA 9.1)


def _f32_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fmaf in float32: the exact product (two float32 fit a float64) plus c, rounded once (twice here,
    harmlessly for a bound of 2^-12)."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


def _fast_gelu_f32(x: np.ndarray, tanh_error: float) -> np.ndarray:
    """FAST_GELU_PREAMBLE's gelu_tanh step by step in float32, its tanh.approx.f32 standing in as the
    exact tanh times (1 + tanh_error)."""
    f32 = np.float32
    z = (x * _f32_fma(np.full_like(x, f32(GELU_CUBIC)), (x * x).astype(f32), f32(_GELU_K))).astype(f32)
    t = (np.tanh(z.astype(np.float64)) * (1.0 + tanh_error)).astype(f32)
    half_x = (f32(0.5) * x).astype(f32)
    return _f32_fma(half_x, t, half_x)


def _gelu_sweep() -> np.ndarray:
    """Every scale GELU meets: a dense linear sweep of ±30 and log-spaced magnitudes from 1e-30 to 100."""
    tiny_to_large = np.logspace(-30, 2, 200_001)
    x = np.concatenate([np.linspace(-30, 30, 2_000_001), tiny_to_large, -tiny_to_large]).astype(np.float32)
    return x[x != 0]


def test_the_emulation_models_the_emitted_helper() -> None:
    # the sweep below is only evidence while it computes what the kernels run
    assert f"fmaf({GELU_CUBIC!r}f, x * x, {_GELU_K!r}f)" in FAST_GELU_PREAMBLE
    assert 'asm("tanh.approx.f32 %0, %1;"' in FAST_GELU_PREAMBLE and "fmaf(half_x, t, half_x)" in FAST_GELU_PREAMBLE
    assert "tanhf(" not in FAST_GELU_PREAMBLE and "tanhf(" in GELU_PREAMBLE


@pytest.mark.parametrize("out_dtype", sorted(OUT_DTYPES))
def test_hardware_tanh_gelu_only_where_its_error_is_below_the_output_rounding(out_dtype: str) -> None:
    """GELU with tanh.approx.f32, at its documented worst (a relative error of 2^-11 either way), is
    off by at most 2^-12·|x|: within the output's own rounding at the input's scale for fp16 (2^-11)
    and bf16 (2^-8), and within the rounding of its value for x > 0. fp32 outputs (no rounding of
    their own in verify's tolerance) keep tanhf."""
    x = _gelu_sweep()
    exact = Epilogue.parse("gelu").reference(x, {})
    worst_at_input_scale = worst_relative = 0.0
    for error in (TANH_APPROX_REL_ERROR, -TANH_APPROX_REL_ERROR):
        diff = np.abs(_fast_gelu_f32(x, error) - exact)
        worst_at_input_scale = max(worst_at_input_scale, float(np.max(diff / np.abs(x.astype(np.float64)))))
        worst_relative = max(worst_relative, float(np.max(diff[x > 0] / exact[x > 0])))
    assert 2.0**-12.01 < worst_at_input_scale < 2.0**-12 * (1 + 2.0**-10)  # the bound is met, and tight
    within = worst_at_input_scale <= OUTPUT_ROUNDING[out_dtype] and worst_relative <= OUTPUT_ROUNDING[out_dtype]
    assert within == (out_dtype in FAST_GELU_OUT_DTYPES)
    assert ("tanh.approx.f32" in gelu_preamble(out_dtype)) == (out_dtype in FAST_GELU_OUT_DTYPES)


def test_tanhf_gelu_fits_the_fp32_tolerance() -> None:
    # fp32 outputs: the tanhf helper in float32 is off by about 2^-23·|x| (numpy's float32 tanh
    # standing in for tanhf), a quarter of verify's smallest fp32 tolerance (K = 1: 16·eps) at most
    x = _gelu_sweep()
    f32 = np.float32
    z = (f32(_GELU_K) * (x + (f32(0.044715) * x * x * x).astype(f32))).astype(f32)
    ours = (f32(0.5) * x * (f32(1.0) + np.tanh(z).astype(f32))).astype(f32)
    worst = np.max(np.abs(ours - Epilogue.parse("gelu").reference(x, {})) / np.abs(x.astype(np.float64)))
    assert worst < K_FACTOR * FP32_EPS / 4


@pytest.mark.parametrize("out_dtype", sorted(OUT_DTYPES))
def test_the_preamble_follows_the_output_type(out_dtype: str) -> None:
    epilogue = Epilogue.parse("bias_col+gelu")
    assert epilogue.cuda_preamble(out_dtype) == gelu_preamble(out_dtype)
    assert epilogue.cuda_preamble() == GELU_PREAMBLE  # no type given: the accurate one
    assert Epilogue.parse("bias_col+relu").cuda_preamble(out_dtype) == ""


def test_a_vector_element_passed_by_the_caller_replaces_the_guarded_read() -> None:
    epilogue = Epilogue.parse("bias_col+gelu")
    assert epilogue.cuda_statements("r", "c", "N") == ["if (c < N) v += bias[c];", "v = gelu_tanh(v);"]
    assert epilogue.cuda_statements("r", "c", "N", vector="bias_at[j][1]") == ["v += bias_at[j][1];", "v = gelu_tanh(v);"]
    assert Epilogue.parse("bias_row+add").cuda_statements("r", "c", "N", c="c0", vector="b") == ["v += b;", "v += c0;"]


# --- CUDA --------------------------------------------------------------------------------------
@pytest.mark.parametrize("chain", EVERY_EPILOGUE)
def test_cuda_statements_use_the_given_index_names(chain: str) -> None:
    statements = Epilogue.parse(chain).cuda_statements("r", "c", "ld")
    assert len(statements) == len(chain.split("+"))
    assert all(s.rstrip().endswith(";") for s in statements)
    text = " ".join(statements)
    assert "{" not in text and "row" not in text and "col" not in text
    if "add" in chain or "beta" in chain:
        assert "C[(size_t)(r) * ld + (c)]" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("chain", EVERY_EPILOGUE)
def test_every_epilogue_compiles_in_the_simt_kernel(chain: str, arch: str, tmp_path) -> None:
    spec = GemmSpec(130, 132, 40, layout="nt", epilogue=chain)  # N % 4 == 0: vector stores, ragged edges
    compiled = compile_kernel(render(spec, default_config(spec, arch), arch), arch, tmp_path)
    assert compiled.source.args == ("A", "B", *(op.name for op in spec.epilogue.operands()), "D")
    assert compiled.resources.spills == 0, compiled.resources.summary()


@pytest.mark.parametrize("chain", COMPOSITIONS)
def test_compositions_compile_with_scalar_stores(chain: str, tmp_path) -> None:
    spec = GemmSpec(37, 41, 9, layout="tn", epilogue=chain)  # odd N: one element per store
    compile_kernel(render(spec, default_config(spec, "sm_90"), "sm_90"), "sm_90", tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("chain", EVERY_EPILOGUE)
def test_every_epilogue_compiles_in_the_reference_kernel(chain: str, arch: str, tmp_path) -> None:
    source = reference_source(GemmSpec(5, 7, 3, layout="tt", epilogue=chain))
    assert len(compile_kernel(source, arch, tmp_path).cubin) > 0
