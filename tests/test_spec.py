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
    ({"dtype": "fp16"}, "not supported yet"),
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
