"""TVM kernels on a real GPU, through gemmtune's NVRTC, runtime, verification and timing.

The CPU tests prove the schedules generate and compile; only these prove the converted launch
(grid, block, argument order) computes the right numbers, and that a real tune measures.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")
pytestmark = [pytest.mark.tvm, pytest.mark.gpu]

from gemmtune.cli import main
from gemmtune.compiler import compile_kernel
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol
from gemmtune.tvm import tuning
from gemmtune.tvm.check import gpu_rounds
from gemmtune.tvm.convert import kernel_source
from gemmtune.tvm.ladder import RUNG_NAMES
from gemmtune.tvm.schedules import named_source


def _verified(source, rounds: int = 2) -> None:
    results = gpu_rounds(compile_kernel(source, _arch()), rounds)
    assert all(r.ok for r in results), [r.message for r in results]


def _arch() -> str:
    from gemmtune.build import target_arch

    return target_arch(None)


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_every_ladder_row_is_right(rung: str) -> None:
    _verified(named_source(GemmSpec(256, 256, 64), rung, _arch()))


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("epilogue", [None, "relu+add"])
def test_manual_schedule_is_right_in_every_layout(layout: str, epilogue: str | None) -> None:
    _verified(named_source(GemmSpec(512, 256, 128, layout, epilogue=epilogue), "manual", _arch()))


@pytest.mark.parametrize("shape", [(512, 256, 128), (100, 70, 33), (33, 17, 9)])
@pytest.mark.parametrize("epilogue", [None, "relu+add"])
def test_dlight_is_right_on_even_and_ragged_shapes(shape: tuple, epilogue: str | None) -> None:
    _verified(named_source(GemmSpec(*shape, "tn", epilogue=epilogue), "dlight", _arch()))


def test_naive_is_right_on_a_ragged_shape() -> None:
    _verified(named_source(GemmSpec(37, 29, 11, "nt"), "naive", _arch()))


@pytest.mark.parametrize("space", ["manual", "auto"])
def test_tiny_real_tune_measures_and_its_best_is_right(space: str, tmp_path: Path) -> None:
    spec = GemmSpec(256, 256, 128, epilogue="relu+add")
    settings = tuning.TuneSettings(space=space, trials=8, trials_per_iter=8, cost_model="random", arch=_arch(), seed=3)
    result = tuning.tune(spec, tmp_path, settings)
    lines = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    run_secs = [json.loads(line)[1][1] for line in lines]  # [workload, [trace, run_secs, target, args]]
    assert any(secs and max(secs) < 1.0 for secs in run_secs), run_secs  # failed runs are stored as 1e10
    _verified(kernel_source(result.schedule.mod, spec, {}, _arch()))
    assert main(["tvm", "evaluate", "--tuned", "--trace", str(result.trace_path), "M=256", "N=256", "K=128",
                 "--epilogue", "relu+add", "--no-cublas", "--min-time", "0.02"]) == 0


def test_cli_ladder_and_test_on_gpu(capsys: pytest.CaptureFixture) -> None:
    assert main(["ladder", "--backend", "tvm", "MNK=512", "--min-time", "0.02"]) == 0
    assert main(["tvm", "test", "MNK=256", "--schedule", "manual"]) == 0
    assert "round 5: ok" in capsys.readouterr().out


def test_measurements_are_finite() -> None:
    from gemmtune.evaluate import evaluate

    compiled = compile_kernel(named_source(GemmSpec(512, 512, 512), "manual", _arch()), _arch())
    result = evaluate(compiled, TimingProtocol(min_time_s=0.02))
    assert result.ok and np.isfinite(result.measurement.median_s) and result.measurement.median_s > 0


@pytest.mark.parametrize("schedule", ["manual", "dlight"])
def test_exported_tvm_folder_runs_and_load_is_right(schedule: str, tmp_path: Path) -> None:
    """The exported folder of a TVM kernel builds with nvcc, passes its own check with no TVM at run time,
    and gemmtune.load(DIR) on it matches the float64 reference."""
    import subprocess

    from gemmtune import load
    from gemmtune.export.toolchain import build_harness, find_nvcc
    from gemmtune.runtime import DeviceBuffer, synchronize
    from gemmtune.verify import compare, make_inputs, reference

    spec = GemmSpec(512, 256, 128, epilogue="relu+add")
    out = tmp_path / schedule
    assert main(["export", "M=512", "N=256", "K=128", "--epilogue", "relu+add", "--backend", "tvm",
                 "--schedule", schedule, "--out", str(out)]) == 0
    if find_nvcc() is not None:
        done = subprocess.run([str(build_harness(out, find_nvcc())), "3"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
    inputs = make_inputs(spec, np.random.default_rng(3))
    x = {k: DeviceBuffer.from_numpy(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    d = DeviceBuffer.alloc(spec.m * spec.n * 4)
    load(out)(x["A"], x["B"], x["C"], out=d)
    synchronize()
    assert compare(d.to_numpy((spec.m, spec.n)), reference(spec, inputs), spec.dtype, spec.k).ok
    for buf in (*x.values(), d):
        buf.free()
