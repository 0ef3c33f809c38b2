"""GemmSpec parsing and every bad-input path."""
import pytest

from gemmtune.errors import SpecError
from gemmtune.spec import GemmSpec, parse_size_words, spec_from_words


@pytest.mark.parametrize("words, expected", [
    (["M=1024", "N=2048", "K=3072"], (1024, 2048, 3072)),
    (["MN=1024", "K=2048"], (1024, 1024, 2048)),
    (["MNK=4096"], (4096, 4096, 4096)),
    (["mnk=7"], (7, 7, 7)),
    (["KM=5", "N=3"], (5, 3, 5)),
])
def test_size_words(words, expected):
    spec = spec_from_words(words)
    assert (spec.m, spec.n, spec.k) == expected


def test_flags_fill_missing_sizes():
    spec = spec_from_words(["MN=64"], k="32", layout="NT")
    assert (spec.m, spec.n, spec.k, spec.layout) == (64, 64, 32, "nt")


@pytest.mark.parametrize("words, fragment", [
    (["M=0", "N=1", "K=1"], "at least 1"),
    (["M=-3", "N=1", "K=1"], "at least 1"),
    (["M=1.5", "N=1", "K=1"], "positive integer"),
    (["M=abc", "N=1", "K=1"], "positive integer"),
    (["M=4", "N=4"], "missing size K"),
    (["MNK=4", "K=4"], "given twice"),
    (["X=4"], "cannot read"),
    (["4096"], "cannot read"),
    (["MMK=4"], "cannot read"),
    (["M=99999999999", "N=1", "K=1"], "larger than"),
    (["M=100000", "N=100000", "K=1"], "elements"),
])
def test_bad_sizes(words, fragment):
    with pytest.raises(SpecError, match=fragment):
        spec_from_words(words)


def test_flag_and_word_conflict():
    with pytest.raises(SpecError, match="both"):
        spec_from_words(["M=4", "N=4", "K=4"], m="4")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"layout": "xy"}, "unknown layout"),
    ({"dtype": "fp64"}, "unknown dtype"),
    ({"dtype": "fp32", "out_dtype": "fp16"}, "not allowed with fp32 inputs; choose fp32"),
    ({"dtype": "tf32", "out_dtype": "bf16"}, "not allowed with tf32 inputs"),
    ({"dtype": "fp16", "out_dtype": "bf16"}, "choose fp16 or fp32"),
    ({"dtype": "bf16", "out_dtype": "fp64"}, "unknown out dtype"),
    ({"epilogue": "sigmoid"}, "unknown epilogue"),
])
def test_bad_layout_dtype_epilogue(kwargs, fragment):
    with pytest.raises(SpecError, match=fragment):
        GemmSpec(8, 8, 8, **kwargs)


def test_shapes_and_counts():
    spec = GemmSpec(2, 3, 5, layout="tn", epilogue="relu+add")
    assert spec.a_shape == (5, 2) and spec.b_shape == (5, 3)
    assert spec.flops == 2 * 2 * 3 * 5
    assert spec.min_bytes == 4 * (2 * 5 + 5 * 3 + 2 * 3 + 2 * 3)  # A, B, D and C


def test_check_fits():
    spec = GemmSpec(1024, 1024, 1024)
    spec.check_fits(1 << 30)
    with pytest.raises(SpecError, match="GiB"):
        spec.check_fits(1 << 20)


def test_json_round_trip_and_stable_key():
    spec = GemmSpec(7, 13, 5, layout="tt", epilogue="bias_col+gelu")
    again = GemmSpec.from_json(spec.to_json())
    assert again == spec and again.key() == spec.key()
    assert GemmSpec(7, 13, 5).key() != spec.key()


def test_parse_size_words_rejects_repeats():
    with pytest.raises(SpecError):
        parse_size_words(["M=1", "M=2"])


# --- dtypes ------------------------------------------------------------------------------------
# Keys of specs with committed data: the simulation tables (src/gemmtune/data/simt_*.json) and every
# tuning database are keyed on these; adding out_dtype must not move them.
COMMITTED_KEYS = {(1024, 1024, 1024): "f0b37207d0bf1c6c", (4096, 4096, 4096): "ec902b195791182e"}


@pytest.mark.parametrize("size", sorted(COMMITTED_KEYS))
def test_fp32_keys_and_json_are_unchanged(size):
    spec = GemmSpec(*size)
    assert spec.key() == COMMITTED_KEYS[size]
    assert "out_dtype" not in spec.to_json() and spec.out_dtype == "fp32"
    assert GemmSpec(*size, out_dtype="fp32").key() == COMMITTED_KEYS[size]  # the default, spelled out


def test_committed_simulation_table_spec_keeps_its_key():
    import json
    from pathlib import Path

    import gemmtune

    meta = json.loads((Path(gemmtune.__file__).parent / "data" / "simt_gemm_fp32_nn_1024x1024x1024.json").read_text())
    spec = GemmSpec.from_json(meta["spec"])
    assert spec.to_json() == meta["spec"] and spec.key() == COMMITTED_KEYS[(1024, 1024, 1024)]


@pytest.mark.parametrize("dtype,out,in_bytes,out_bytes", [
    ("fp32", "fp32", 4, 4), ("tf32", "fp32", 4, 4), ("fp16", "fp16", 2, 2), ("bf16", "bf16", 2, 2),
])
def test_default_out_dtype_and_element_bytes(dtype, out, in_bytes, out_bytes):
    spec = GemmSpec(8, 16, 32, dtype=dtype)
    assert spec.out_dtype == out and spec.element_bytes == in_bytes and spec.out_element_bytes == out_bytes
    assert spec.default_out and "out_dtype" not in spec.to_json()


def test_fp32_out_for_16_bit_inputs_is_named_and_counted():
    spec = GemmSpec(8, 16, 32, dtype="BF16", out_dtype="fp32", epilogue="bias_row+add")
    assert spec.to_json()["out_dtype"] == "fp32" and GemmSpec.from_json(spec.to_json()) == spec
    assert spec.key() != GemmSpec(8, 16, 32, dtype="bf16", epilogue="bias_row+add").key()
    assert spec.short() == "8x16x32 nn bf16->fp32 bias_row+add"
    assert spec.slug() == "gemm_bf16_outfp32_nn_8x16x32_bias_row_add"
    # A and B in bf16; D, C (8x16) and bias (8) in fp32.
    assert spec.min_bytes == (8 * 32 + 32 * 16) * 2 + (8 * 16 + 8 * 16 + 8) * 4
    assert [spec.storage_dtype(x) for x in ("A", "B", "C", "bias", "D")] == ["bf16", "bf16", "fp32", "fp32", "fp32"]


def test_tf32_is_stored_as_fp32():
    spec = GemmSpec(4, 4, 4, dtype="tf32")
    assert spec.storage_dtype("A") == "fp32" and spec.min_bytes == 3 * 16 * 4
    assert spec.short() == "4x4x4 nn tf32" and spec.slug() == "gemm_tf32_nn_4x4x4"
