"""The TVM verbs from the command line (no GPU needed: without one, rows are compiled only)."""
from __future__ import annotations

import argparse

import pytest

from gemmtune.cli import main, tvm_cmds
from gemmtune.tvm import TVM_EXTRA_HINT, tvm_available

pytestmark = pytest.mark.tvm
needs_tvm = pytest.mark.skipif(not tvm_available(), reason="needs the tvm extra")


def _no_gpu() -> bool:
    from gemmtune.device import gpu_available

    return not gpu_available()


def test_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("gemmtune.tvm.tvm_available", lambda: False)
    assert main(["tvm", "show-cuda", "MNK=64"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"gemmtune: {TVM_EXTRA_HINT}"


def test_ladder_is_left_to_an_owner_that_registered_it_first() -> None:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    subparsers.add_parser("ladder")
    tvm_cmds.register(subparsers)  # must not clash
    assert "tvm" in subparsers.choices


def test_tune_arguments_skip_options_the_tune_verb_has() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch")
    tvm_cmds.add_tvm_tune_arguments(parser)
    args = parser.parse_args(["--work-dir", "w", "--cost-model", "random"])
    assert str(args.work_dir) == "w" and args.cost_model == "random" and args.trials_per_iter == 64


@needs_tvm
def test_ladder_lists_every_step(capsys: pytest.CaptureFixture) -> None:
    if not _no_gpu():
        pytest.skip("the GPU path is covered by test_tvm_gpu")
    assert main(["ladder", "--backend", "tvm", "M=256", "N=256", "K=64", "--epilogue", "relu+add"]) == 0
    out = capsys.readouterr().out
    for name in ("naive", "shared_memory", "register_tiling", "cooperative_fetch", "write_cache", "epilogue_fusion"):
        assert name in out
    assert out.count("2 kernels") == 5 and "compiled:" in out


@needs_tvm
def test_ladder_show_prints_tvmscript(capsys: pytest.CaptureFixture) -> None:
    assert main(["tvm", "ladder", "MNK=256", "--show", "register_tiling"]) == 0
    out = capsys.readouterr().out
    assert "@T.prim_func" in out and "A_shared_local" in out and "# completed: A_shared" in out


@needs_tvm
def test_show_cuda_is_nvrtc_ready(capsys: pytest.CaptureFixture) -> None:
    assert main(["tvm", "show-cuda", "MNK=256", "--layout", "tn", "--schedule", "manual"]) == 0
    out = capsys.readouterr().out
    assert "#include" not in out and "// entry gemm_fp32_tn_256x256x256_tvm_kernel(A, B, D)" in out


@needs_tvm
def test_show_cuda_raw_lists_both_kernels_of_an_unfused_epilogue(capsys: pytest.CaptureFixture) -> None:
    assert main(["tvm", "show-cuda", "MNK=128", "--epilogue", "relu+add", "--schedule", "naive", "--raw"]) == 0
    out = capsys.readouterr().out
    assert out.count("// gemm_fp32_nn_128x128x128_relu_add_tvm_kernel") == 2


@needs_tvm
def test_tvm_test_runs_five_rounds(capsys: pytest.CaptureFixture) -> None:
    assert main(["tvm", "test", "M=64", "N=48", "K=24", "--layout", "nt", "--schedule", "dlight"]) == 0
    out = capsys.readouterr().out
    assert "round 5: ok" in out


@needs_tvm
def test_evaluate_without_gpu_says_so(capsys: pytest.CaptureFixture) -> None:
    if not _no_gpu():
        pytest.skip("checks the no-GPU message")
    assert main(["tvm", "evaluate", "--manual", "MNK=256"]) == 3
    assert "GPU" in capsys.readouterr().err


@needs_tvm
def test_tuned_needs_a_trace_or_work_dir(capsys: pytest.CaptureFixture) -> None:
    assert main(["tvm", "show-cuda", "MNK=64", "--schedule", "tuned"]) == 2
    assert "--trace FILE or --work-dir DIR" in capsys.readouterr().err


@needs_tvm
def test_tune_without_gpu_stops_before_searching(capsys: pytest.CaptureFixture) -> None:
    if not _no_gpu():
        pytest.skip("checks the no-GPU message")
    assert main(["tvm", "tune", "MNK=256", "--trials", "4"]) == 3
    assert "on a GPU" in capsys.readouterr().err


@needs_tvm
def test_show_cuda_of_a_saved_trace(tmp_path, capsys: pytest.CaptureFixture) -> None:
    # A trace from the fixed manual schedule stands in for a tuned one: same file format.
    from gemmtune.spec import GemmSpec
    from gemmtune.tvm.ladder import schedule_rung
    from gemmtune.tvm.tuning import save_trace, trace_function

    spec = GemmSpec(256, 256, 64, epilogue="relu+add")
    path = tmp_path / "best_trace.py"
    save_trace(path, trace_function(schedule_rung(spec, "epilogue_fusion").schedule, spec))
    assert main(["tvm", "show-cuda", "M=256", "N=256", "K=64", "--epilogue", "relu+add", "--schedule", "tuned",
                 "--trace", str(path)]) == 0
    assert "(A, B, C, D) grid (2, 2, 1) block (256, 1, 1)" in capsys.readouterr().out
