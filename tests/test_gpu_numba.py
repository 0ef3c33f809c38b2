"""The numba ladder on the GPU: every step verified on odd shapes and layouts, and timed once."""
from __future__ import annotations

import numpy as np
import pytest

import gemmtune.numba_ladder  # noqa: E402,F401 - NumPy aliases numba-cuda needs, before numba loads

pytest.importorskip("numba.cuda")

from gemmtune.evaluate import evaluate  # noqa: E402
from gemmtune.kernels.simt.config import ladder  # noqa: E402
from gemmtune.numba_ladder.compile import compile_numba  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402

pytestmark = pytest.mark.gpu
STEPS = ladder("sm_90")
SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1000, 1000, 1000), (260, 516, 100)]


def _arch() -> str:
    from gemmtune.device import query_device

    return query_device().arch


@pytest.mark.parametrize("step", [name for name, _ in STEPS])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_step_is_right_on_odd_shapes(step, shape):
    config = dict(ladder(_arch()))[step]
    result = evaluate(compile_numba(GemmSpec(*shape), config, _arch()), verify_only=True,
                      rng=np.random.default_rng(1))
    assert result.ok, result.verify.message


@pytest.mark.parametrize("layout", ["nt", "tn", "tt"])
@pytest.mark.parametrize("step", ["vectorized", "double_buffer"])
def test_transposed_layouts(step, layout):
    config = dict(ladder(_arch()))[step]
    result = evaluate(compile_numba(GemmSpec(300, 260, 132, layout=layout), config, _arch()), verify_only=True)
    assert result.ok, result.verify.message


def test_timed_by_the_common_protocol():
    config = dict(ladder(_arch()))["double_buffer"]
    result = evaluate(compile_numba(GemmSpec(1024, 1024, 1024), config, _arch()),
                      TimingProtocol(min_reps=5, min_time_s=0.02))
    assert result.ok and result.measurement is not None
    assert result.measurement.protocol.flush_l2 and len(result.measurement.samples_s) >= 5
    assert 0 < result.measurement.median_s < 0.05  # 2 GFLOP in under 50 ms, or something is wrong
