"""gemmtune.fp8 (issue 70's groundwork) without a GPU: every fp8 value rounds to itself, halfway values
to the even neighbour, out-of-range ones saturate; the three scalings give the group shapes DeepSeek-V3 and
DeepGEMM use and reconstruct each element within half an fp8 step of its group's scale."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gemmtune.errors import SpecError
from gemmtune.fp8 import BLOCK, FORMATS, fp8_format, quantize, reference, round_fp8


def _finite_values(name: str) -> np.ndarray:
    fmt = FORMATS[name]
    values = [fmt.decode(code) for code in range(256)]
    return np.array(sorted({v for v in values if math.isfinite(v)}))


@pytest.mark.parametrize("name, count, largest", [("e4m3", 253, 448.0), ("e5m2", 247, 57344.0)])
def test_every_finite_value_rounds_to_itself(name, count, largest):
    values = _finite_values(name)
    assert len(values) == count and values.max() == largest == FORMATS[name].largest  # (+0 and -0 are one)
    assert np.array_equal(round_fp8(values, name), values)


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_halfway_values_round_to_the_even_neighbour(name):
    fmt = FORMATS[name]
    codes = [c for c in range(0x7F) if math.isfinite(fmt.decode(c)) and math.isfinite(fmt.decode(c + 1))]
    for code in codes:
        low, high = fmt.decode(code), fmt.decode(code + 1)
        even = low if code % 2 == 0 else high  # the code whose mantissa's last bit is 0
        assert round_fp8(np.array([(low + high) / 2]), name)[0] == even, (name, code)
        assert round_fp8(np.array([low + (high - low) * 0.26]), name)[0] == low


def test_out_of_range_saturates_and_nan_stays():
    out = round_fp8(np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 449.0, 2.0 ** -12]), "e4m3")
    assert list(out[:4]) == [448.0, -448.0, 448.0, -448.0] and np.isnan(out[4]) and out[5] == 448.0
    assert out[6] == 0.0  # below half the smallest subnormal (2^-9)
    assert round_fp8(np.array([6e4]), "e5m2")[0] == 57344.0
    with pytest.raises(SpecError, match="unknown fp8 format"):
        fp8_format("e3m4")


@pytest.mark.parametrize("scaling", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_scalings_reconstruct_within_half_a_step(scaling, name):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((40, 300)), rng.standard_normal((300, 200))  # K, N not multiples of 128
    a[:, 17] *= 1e3  # an outlier channel
    fmt = FORMATS[name]
    for x, role in ((a, "a"), (b, "b")):
        q = quantize(x, name, scaling, role)
        scale = q.expand()
        # half a step of the element's own binade, or of the subnormals' step, in units of its group's scale
        binade = np.exp2(np.maximum(np.floor(np.log2(np.abs(x) / scale + 1e-300)), 1 - fmt.bias) - fmt.mantissa_bits)
        assert np.all(np.abs(q.dequantized() - x) <= 0.5 * binade * scale * (1 + 1e-9))
        assert np.abs(q.values).max() <= fmt.largest
    shapes = {"tensor": ((), ()), "rowwise": ((40, 1), (1, 200)), "block": ((40, 3), (3, 2))}[scaling]
    assert (quantize(a, name, scaling, "a").scales.shape, quantize(b, name, scaling, "b").scales.shape) == shapes


def test_block_scales_follow_an_outlier_channel_better_than_one_tensor_scale():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 4 * BLOCK)), rng.standard_normal((4 * BLOCK, 96))
    a[:, 5] *= 1e4
    exact = a @ b
    errors = {s: np.abs(reference(quantize(a, "e4m3", s, "a"), quantize(b, "e4m3", s, "b")) - exact).max()
              for s in ("tensor", "block")}
    assert errors["block"] < errors["tensor"]
    with pytest.raises(SpecError, match="unknown scaling"):
        quantize(a, "e4m3", "channel", "a")
