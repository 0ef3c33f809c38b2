"""The parts (kernels/parts/): one apply_epilogue per kernel, written by the epilogue part, and the
shared CUDA helpers at most once per kernel, in every family."""
from __future__ import annotations

import pytest

from gemmtune.epilogue import Epilogue
from gemmtune.kernels import families, get_family
from gemmtune.kernels.parts.epilogue import (MARKER, CArg, Operands, VectorArg, epilogue_call,
                                             epilogue_function)
from gemmtune.kernels.parts.ring import SLICE_RING
from gemmtune.kernels.parts.writeback import CRead, OddEdge, PairFragment, PairOutput, pair_io, pair_stores
from gemmtune.spec import GemmSpec

EPILOGUES = ["alpha+beta", "bias_row", "bias_col+relu", "alpha+bias_row+gelu", "relu+add", "bias_col+gelu+add"]
# A spec each family supports, and its arch.
SHAPES = {"simt": ((67, 45, 33, "nt", "fp32"), "sm_90"), "gemv": ((1, 1000, 777, "nt", "fp16"), "sm_90"),
          "wgmma": ((1000, 1000, 1000, "nn", "bf16"), "sm_90a"), "mma": ((127, 129, 131, "tn", "bf16"), "sm_80")}
# The first line of each helper's definition: none may appear twice in one kernel.
DEFINITIONS = ["struct FloatView", "float to_float(bf16_t x)", "fp16_t from_float(float v, fp16_t*)",
               "out_t to_out(float v)", "u32 pack_pair(float lo, float hi, bf16_t*)",
               "unsigned int load_acquire(", "void store_release(", "float gelu_tanh(float x)",
               "float apply_epilogue(", "struct Ring {", "#define RING_SLOT(", "void read_pair(",
               "void write_pair(", "struct SharedStorage {", "// Write-back from registers"]


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


def test_a_bias_value_is_a_float_parameter_read_by_the_caller():
    epi = Epilogue.parse("bias_col+gelu")
    staged = Operands(CArg.VALUE, VectorArg.VALUE)
    assert staged.declarations(epi) == ["float bias"]
    text = epilogue_function(epi, staged)
    assert "float bias) {" in text and "v += bias;" in text and "bias[" not in text
    # without the caller's register, the guarded read in place (of the view or pointer in scope)
    assert epilogue_call(epi, staged, "v0", "row", "col") == "apply_epilogue(v0, row, col, (col < N ? bias[col] : 0.0f))"
    assert epilogue_call(epi, staged, "v0", "row", "col", bias="bias_at[jb][0]") == \
        "apply_epilogue(v0, row, col, bias_at[jb][0])"
    assert epilogue_call(Epilogue.parse("bias_row"), staged, "v", "r", "c") == \
        "apply_epilogue(v, r, c, (r < M ? bias[r] : 0.0f))"


@pytest.mark.parametrize("out_fp32", [False, True])
def test_gelu_takes_the_hardware_tanh_for_16_bit_outputs_in_every_family(out_fp32):
    for family in families():
        (m, n, k, layout, dtype), arch = SHAPES[family.name]
        spec = GemmSpec(m, n, k, layout, dtype, "bias_col+gelu", out_dtype="fp32" if out_fp32 else None)
        code = family.render(spec, family.default_config(spec, arch), arch).code
        assert code.count("float gelu_tanh(float x)") == 1, family.name
        assert ("tanh.approx.f32" in code) == (spec.out_dtype in ("bf16", "fp16")), (family.name, spec.out_dtype)
        assert ("tanhf(" in code) == (spec.out_dtype == "fp32"), (family.name, spec.out_dtype)


def test_view_of_c_is_indexed_in_place():
    text = epilogue_function(Epilogue.parse("add"), Operands(CArg.VIEW, VectorArg.VIEW))
    assert "FloatView<out_t> C) {" in text and "v += C[(size_t)(row) * N + (col)];" in text
    assert epilogue_function(Epilogue(), Operands()) == ""


@pytest.mark.parametrize("epilogue", ["none", "bias_row+relu", "relu+add"])
def test_no_offsetof_in_generated_code(epilogue):
    # NVRTC 13.0 (the GPU machines' CUDA) rejects __builtin_offsetof in static_assert: shared-memory
    # layouts are checked with sums of member sizes instead (2026-11-25)
    for family, config, code in _sources(epilogue):
        assert "offsetof" not in code, (family, config)


def _mma_sources(arch="sm_80"):
    mma = get_family("mma")
    for shape, layout, dtype in (((127, 129, 131), "tn", "bf16"), ((256, 256, 256), "nt", "fp16"),
                                 ((64, 96, 200), "nn", "tf32")):
        spec = GemmSpec(*shape, layout, dtype, "bias_row+add")
        for _, config in mma.ladder(arch):
            if not mma.rejections(config, spec, arch):
                yield spec, config, mma.render(spec, config, arch).code


def test_mma_shared_storage_is_the_hosts_allocation():
    for spec, config, code in _mma_sources():
        storage = code[code.index("struct SharedStorage {"):code.index("\n};", code.index("struct SharedStorage {"))]
        assert "Slot ring[STAGES];" in storage
        assert f"constexpr int SMEM_BYTES = {config.smem_bytes()};" in code, config
        assert "static_assert(sizeof(SharedStorage) == SMEM_BYTES" in code
        assert "smem + " not in code and "STAGE_BYTES" not in code  # no offsets over the raw bytes


def test_mma_walks_its_ring_through_the_part():
    for spec, config, code in _mma_sources():
        # the slot of a slice is written once, in the part (absent with a single buffer)
        assert code.count(SLICE_RING) == (1 if config.stages > 1 else 0), config
        assert "% STAGES" not in code.replace(SLICE_RING, ""), config
        assert ("RING_SLOT(" in code) == (config.stages > 1), config


def test_both_tensor_core_families_write_back_through_the_part():
    """wgmma's store_tile always, mma's where D's rows are not 16-byte multiples (else it stages D
    through shared memory: render.staged_write_back)."""
    wgmma, mma = get_family("wgmma"), get_family("mma")
    staged = mma.render(GemmSpec(1000, 1024, 512, "nt", "bf16", "bias_row+relu+add"), mma.default_config(
        GemmSpec(1000, 1024, 512, "nt", "bf16"), "sm_80"), "sm_80").code
    assert "// Write-back from registers" not in staged and "write_pair(tile + r * PITCH + c, apply_epilogue(" in staged
    for n in (1024, 1001):
        spec = GemmSpec(1000, n, 512, "nt", "bf16", "bias_row+relu+add")
        for family, arch in ((wgmma, "sm_90a"), (mma, "sm_80")):
            if family is mma and n % 8 == 0:
                continue  # staged (above)
            code = family.render(spec, family.default_config(spec, arch), arch).code  # wgmma: store_tile always
            assert code.count("// Write-back from registers") == 1, family.name
            assert ("write_pair(D + at" in code) == (n % 2 == 0), family.name
            assert ("D[at + 1] = to_out(" in code) == (n % 2 == 1 and family is mma), family.name
            assert ("} else if (col < N) {" in code) == (n % 2 == 1 and family is wgmma), family.name


FRAGMENT = PairFragment(loops=(("i", "2"), ("j", "4")), row="r0 + i", col="c0 + 2 * j",
                        values=("acc[i][2 * j]", "acc[i][2 * j + 1]"), row_depth=1)
OUTPUT = PairOutput(Operands(CArg.VALUE, VectorArg.VIEW), CRead.POINTER)


def test_pair_stores_guard_rows_where_known_and_store_aligned_pairs():
    even = GemmSpec(10, 12, 8, "nn", "bf16", "relu+add")
    text = pair_stores(even, FRAGMENT, OUTPUT)
    # the row is computed and guarded inside the first loop, before the loop over columns
    assert text.index("if (row >= M) continue;") < text.index("for (int j = 0; j < 4; ++j)")
    # the row's C is read (every pair) before the row's first store: a read after a store would wait for it
    assert text.index("read_pair(C + at, c_row[j][0], c_row[j][1]);") < text.index("write_pair(D + at")
    assert "write_pair(D + at, apply_epilogue(v0, row, col, c_row[j][0]), apply_epilogue(v1, row, col + 1, c_row[j][1]));" in text
    assert text.count("for (int j = 0; j < 4; ++j)") == 2 and "float c_row[4][2];" in text
    innermost = pair_stores(even, PairFragment(FRAGMENT.loops, FRAGMENT.row, FRAGMENT.col, FRAGMENT.values, 2), OUTPUT)
    assert "c_row" not in innermost and "read_pair(C + at, c0, c1);" in innermost  # no loop inside the row's
    assert "void read_pair(" in pair_io(even, OUTPUT) and "pack_pair(a, b" in pair_io(even, OUTPUT)
    assert "pack_pair" not in pair_io(even, PairOutput(OUTPUT.operands, cvt_pairs=False))  # sm_75
    assert "void read_pair(" not in pair_io(even, PairOutput(OUTPUT.operands, CRead.VIEW))  # C by element
    odd = GemmSpec(10, 13, 8, "nn", "bf16", "relu+add")
    text = pair_stores(odd, FRAGMENT, OUTPUT)
    assert "if (col + 1 < N) D[at + 1] = to_out(apply_epilogue(v1, row, col + 1, to_float(C[at + 1])));" in text
    assert pair_io(odd, OUTPUT) == ""  # no pair is aligned
    assert text.count("{") == text.count("}")
    # wgmma's odd edge: the whole pair where both columns are inside, else the first alone
    pair_or_first = PairOutput(OUTPUT.operands, CRead.VIEW, odd_edge=OddEdge.PAIR_OR_FIRST)
    text = pair_stores(odd, FRAGMENT, pair_or_first)
    assert "if (col + 1 < N) {" in text and "} else if (col < N) {" in text and "D[at]" not in text
    assert text.count("{") == text.count("}")


def test_pair_fragment_row_depth_names_a_loop():
    with pytest.raises(ValueError):
        PairFragment(loops=(("i", "2"),), row="i", col="0", values=("a", "b"), row_depth=2)
