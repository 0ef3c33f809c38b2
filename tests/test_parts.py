"""The parts (kernels/parts/): one apply_epilogue per kernel, written by the epilogue part, and the
shared CUDA helpers at most once per kernel, in every family."""
from __future__ import annotations

import pytest

from gemmtune.epilogue import Epilogue
from gemmtune.kernels import families, get_family
from gemmtune.kernels.parts.epilogue import (MARKER, CArg, Operands, VectorArg, epilogue_call,
                                             epilogue_function)
from gemmtune.spec import GemmSpec

EPILOGUES = ["alpha+beta", "bias_row", "bias_col+relu", "alpha+bias_row+gelu", "relu+add", "bias_col+gelu+add"]
# A spec each family supports, and its arch.
SHAPES = {"simt": ((67, 45, 33, "nt", "fp32"), "sm_90"), "gemv": ((1, 1000, 777, "nt", "fp16"), "sm_90"),
          "wgmma": ((1000, 1000, 1000, "nn", "bf16"), "sm_90a"), "mma": ((127, 129, 131, "tn", "bf16"), "sm_80")}
# The first line of each helper's definition: none may appear twice in one kernel.
DEFINITIONS = ["struct FloatView", "float to_float(bf16_t x)", "fp16_t from_float(float v, fp16_t*)",
               "out_t to_out(float v)", "u32 pack_pair(float lo, float hi, bf16_t*)",
               "unsigned int load_acquire(", "void store_release(", "float gelu_tanh(float x)",
               "float apply_epilogue("]


def _sources(epilogue: str):
    """Every registered family's default config and ladder steps that fit, rendered for `epilogue`."""
    for family in families():
        (m, n, k, layout, dtype), arch = SHAPES[family.name]
        spec = GemmSpec(m, n, k, layout, dtype, epilogue)
        configs = [family.default_config(spec, arch)]
        configs += [c for _, c in family.ladder(arch) if not family.rejections(c, spec, arch)]
        for config in configs:
            yield family.name, config, family.render(spec, config, arch).code


def test_every_family_is_covered():
    assert {f.name for f in families()} <= set(SHAPES)


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_one_apply_epilogue_per_kernel_written_by_the_part(epilogue):
    for family, config, code in _sources(epilogue):
        assert code.count(MARKER) == 1, (family, config)
        assert code.count("__device__ __forceinline__ float apply_epilogue(") == 1, (family, config)
        assert "float epilogue(" not in code and "struct Floats " not in code, (family, config)
        assert ("gelu_tanh(float x)" in code) == ("gelu" in epilogue)


@pytest.mark.parametrize("epilogue", ["none", *EPILOGUES])
def test_helpers_at_most_once_per_kernel(epilogue):
    for family, config, code in _sources(epilogue):
        for definition in DEFINITIONS:
            assert code.count(definition) <= 1, (family, config, definition)


def test_no_epilogue_no_function_and_no_call():
    for family, config, code in _sources("none"):
        assert "apply_epilogue" not in code, (family, config)


def test_simt_split_k_waits_with_the_flag_part():
    simt = get_family("simt")
    spec = GemmSpec(127, 129, 4097, epilogue="relu+add")
    code = simt.render(spec, dict(simt.ladder("sm_90"))["double_buffer"].with_(split_k=3), "sm_90").code
    assert code.count("asm volatile(\"ld.acquire") == 1 and code.count("asm volatile(\"st.release") == 1  # in the part
    assert "spin_until_equal(turn, mine)" in code and "store_release(turn, next)" in code


def test_operand_declarations():
    epi = Epilogue.parse("alpha+bias_col+add")
    assert Operands(CArg.VALUE, VectorArg.POINTER).declarations(epi) == [
        "float c", "const float* __restrict__ bias", "float alpha"]
    assert Operands(CArg.VIEW, VectorArg.VIEW).declarations(epi) == [
        "FloatView<out_t> C", "FloatView<out_t> bias", "float alpha"]
    assert Operands(CArg.ABSENT, VectorArg.VIEW).declarations(epi) == ["FloatView<out_t> bias", "float alpha"]


def test_call_matches_the_declaration():
    epi = Epilogue.parse("bias_row+add")
    value = Operands(CArg.VALUE, VectorArg.VIEW)
    assert epilogue_call(epi, value, "acc", "r", "c0", c="c4.x", bias="FloatView<out_t>{bias}") == \
        "apply_epilogue(acc, r, c0, c4.x, FloatView<out_t>{bias})"
    assert epilogue_call(epi, Operands(CArg.VIEW), "acc", "r", "c0") == "apply_epilogue(acc, r, c0, C, bias)"
    assert epilogue_call(Epilogue(), value, "acc", "r", "c0") == "acc"
    with pytest.raises(ValueError):
        epilogue_call(epi, value, "acc", "r", "c0")  # C's element is needed
    with pytest.raises(ValueError):
        epilogue_function(epi, Operands(CArg.ABSENT))  # the function could not read C


def test_view_of_c_is_indexed_in_place():
    text = epilogue_function(Epilogue.parse("add"), Operands(CArg.VIEW, VectorArg.VIEW))
    assert "FloatView<out_t> C) {" in text and "v += C[(size_t)(row) * N + (col)];" in text
    assert epilogue_function(Epilogue(), Operands()) == ""
