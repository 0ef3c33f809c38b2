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


@pytest.mark.parametrize("dtype, want", [("bf16", "torch.bfloat16"), ("fp16", "torch.float16"), ("tf32", "torch.float32")])
def test_profiled_cublas_runs_the_specs_own_types(dtype, want, monkeypatch):
    """`gemmtune profile --family cublas` launches torch.mm on the spec's types and layout (it used to
    hand cuBLAS fp32 operands whatever the dtype, so a bf16 profile showed an SGEMM kernel)."""
    torch = pytest.importorskip("torch")
    from gemmtune.profile import Target, launch_once

    seen = []
    real_mm = torch.mm

    def spy(a, b, *args, **kwargs):
        seen.append((str(a.dtype), str(b.dtype), a.is_contiguous(), b.is_contiguous()))
        return real_mm(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "mm", spy)
    launch_once(Target(GemmSpec(96, 80, 64, "nt", dtype), "cublas"), repeats=2)
    assert seen and all(s[:2] == (want, want) for s in seen)
    assert all(s[2:] == (True, False) for s in seen)  # nt: B stored N x K, handed over transposed
