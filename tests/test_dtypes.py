"""Host-side element types: bf16/fp16 rounding, storage arrays and NaN patterns (no GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.dtypes import NAN_BITS, bf16_bits, bf16_to_float32, from_storage, round_to, to_storage
from gemmtune.errors import SpecError


def test_bf16_rounds_to_nearest_even():
    one = 1.0
    values = np.array([one, one + 2**-8, one + 3 * 2**-8, one + 2**-8 + 2**-20, -2.5, 2**-130], np.float32)
    got = round_to(values, "bf16")
    # 1+2^-8 is halfway between 1 and 1+2^-7: ties go to the even mantissa (1); 1+3·2^-8 goes up to
    # 1+2^-6; just above halfway rounds up; subnormals keep their top bits.
    expected = np.array([1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -2.5, 2**-130], np.float32)
    np.testing.assert_array_equal(got, expected)


def test_bf16_matches_float32_truncated_when_exact_and_keeps_nan():
    rng = np.random.default_rng(0)
    values = rng.uniform(-4, 4, 10000).astype(np.float32)
    bits = bf16_bits(values)
    back = bf16_to_float32(bits)
    assert np.all(np.abs(back - values) <= np.abs(values) * 2**-8)  # half an ulp of an 8-bit significand
    np.testing.assert_array_equal(bf16_bits(back), bits)  # exact values stay put
    assert bf16_bits(np.array([np.nan], np.float32))[0] == NAN_BITS["bf16"]


def test_fp16_rounding_and_storage_round_trip():
    values = np.array([1 + 2**-11, 1 + 3 * 2**-11, 0.1], np.float32)
    rounded = round_to(values, "fp16")
    assert rounded[0] == 1.0 and rounded[1] == 1 + 2**-9
    stored = to_storage(rounded, "fp16")
    assert stored.dtype == np.float16
    np.testing.assert_array_equal(from_storage(stored, "fp16"), rounded.astype(np.float64))


@pytest.mark.parametrize("dtype,numpy_type", [("fp32", np.float32), ("tf32", np.float32), ("fp16", np.float16),
                                              ("bf16", np.uint16)])
def test_storage_types(dtype, numpy_type):
    values = round_to(np.linspace(-1, 1, 7, dtype=np.float32), dtype)
    stored = to_storage(values, dtype)
    assert stored.dtype == numpy_type
    np.testing.assert_array_equal(from_storage(stored, dtype), values.astype(np.float64))


def test_tf32_is_not_rounded_on_the_host():
    values = np.array([1 + 2**-20], np.float32)
    np.testing.assert_array_equal(round_to(values, "tf32"), values)


def test_nan_patterns_are_nan():
    assert np.isnan(np.array([NAN_BITS["fp16"]], np.uint16).view(np.float16)[0])
    assert np.isnan(bf16_to_float32(np.array([NAN_BITS["bf16"]], np.uint16))[0])
    assert np.isnan(np.array([NAN_BITS["fp32"]], np.uint32).view(np.float32)[0])


def test_unknown_type_is_a_spec_error():
    with pytest.raises(SpecError, match="unknown element type"):
        round_to(np.zeros(2, np.float32), "fp8")
