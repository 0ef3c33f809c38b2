"""TVM kernels export through the common exporter: the folder builds with nvcc and needs no TVM."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("tvm")
pytestmark = pytest.mark.tvm

from gemmtune.cli import main  # noqa: E402
from gemmtune.export.toolchain import build_harness, find_nvcc  # noqa: E402


@pytest.mark.parametrize("epilogue", [None, "relu+add"])
def test_export_tvm_manual_schedule(tmp_path, capsys, epilogue):
    out = tmp_path / "tvm"
    args = ["export", "M=256", "N=128", "K=64", "--backend", "tvm", "--schedule", "manual", "--arch", "sm_90",
            "--out", str(out)] + (["--epilogue", epilogue] if epilogue else [])
    assert main(args) == 0
    assert "TVM TensorIR schedule 'manual'" in capsys.readouterr().out
    manifest = json.loads((out / "kernel.json").read_text())
    source = json.loads((out / "kernel_source.json").read_text())
    assert source["family"] == "tvm" and source["config"]["step"] == "epilogue_fusion"
    assert manifest["spec"]["epilogue"] == (epilogue or "none")
    cuh = next(out.glob("*.cuh")).read_text()
    assert "cudaError_t" in cuh and "#include <tvm" not in cuh
    if find_nvcc() is not None:
        build_harness(out, link=False)  # the harness compiles without TVM anywhere in sight


def test_export_tvm_tuned_needs_a_trace(tmp_path, capsys):
    code = main(["export", "MNK=64", "--backend", "tvm", "--schedule", "tuned", "--out", str(tmp_path / "t")])
    assert code == 2 and "trace" in capsys.readouterr().err
