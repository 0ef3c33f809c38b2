"""Baselines on the GPU: each row verified by gemmtune's verifier and timed by its protocol.

Small shapes (ragged where the baseline allows), so that builds and autotuning stay short; a
baseline that is not installed is skipped with its reason."""
from __future__ import annotations

import pytest

from gemmtune.baselines import baseline
from gemmtune.baselines.cutlass import Cutlass
from gemmtune.errors import VerifyError
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

pytestmark = pytest.mark.gpu
QUICK = TimingProtocol(min_time_s=0.01, min_reps=3)


def _row(item, spec: GemmSpec):
    reason = item.available(spec)
    if reason:
        pytest.skip(reason)
    from gemmtune.device import query_device

    row = item.row(spec, QUICK, query_device().arch)
    assert row.status == "ok", row.message
    assert row.median_s > 0 and row.rel_error is not None
    return row


@pytest.mark.parametrize("spec", [GemmSpec(256, 384, 512, layout="nt", dtype="bf16", epilogue="relu+add"),
                                  GemmSpec(300, 200, 100, layout="tn")], ids=str)
def test_cutlass_first_candidate_is_verified(spec):
    row = _row(Cutlass(limit=1), spec)
    assert ("EVT relu+add" in row.config) == (spec.dtype == "bf16")
    assert row.compile_s is not None and "fastest of 1 verified / 1 built" in row.config


@pytest.mark.parametrize("spec", [GemmSpec(300, 200, 100, layout="tn"),
                                  GemmSpec(256, 384, 512, layout="nt", dtype="fp16", epilogue="bias_col+gelu"),
                                  GemmSpec(128, 256, 64, dtype="bf16", epilogue="alpha+beta")], ids=str)
def test_triton_fuses_the_epilogue_and_is_verified(spec):
    row = _row(baseline("triton"), spec)
    assert row.compile_s > 0 and ("fused" in row.config) == (not spec.epilogue.is_identity)


def test_inductor_is_verified_and_reports_compile_time():
    row = _row(baseline("inductor"), GemmSpec(256, 256, 256, dtype="fp16", epilogue="relu+add"))
    assert row.compile_s > 0 and "max-autotune" in row.config


def test_a_wrong_baseline_fails_verification():
    from gemmtune.baseline import _torch, check_and_time, prepare

    spec = GemmSpec(128, 128, 128, dtype="bf16")
    prepared = prepare(spec)
    torch = _torch()
    wrong = torch.mm(prepared.gpu["A"], prepared.gpu["B"]) * 1.01  # 1% off
    with pytest.raises(VerifyError, match="wrongmm baseline"):
        check_and_time(prepared, lambda: wrong, QUICK, "wrongmm", label="x1.01")
