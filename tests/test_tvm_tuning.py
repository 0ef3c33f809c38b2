"""MetaSchedule on the CPU: the manual and the automatic space, tuned through tune_tir into a JSON
database, with candidates really built (TVM codegen + NVRTC, gemmtune's builder) but *timed by a
fake runner* (random seconds): measuring needs a GPU. So these tests cover the search spaces, the
database, the builder, trace printing and re-applying - not which candidate is fastest.
The first tune in a process pays ~20 s for `import tvm.s_tir.tensor_intrin`.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("tvm")
pytestmark = [pytest.mark.tvm, pytest.mark.slow]

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult

from gemmtune.compiler import compile_kernel
from gemmtune.spec import GemmSpec
from gemmtune.tvm import tuning
from gemmtune.tvm.convert import kernel_source
from gemmtune.tvm.ladder import schedule_rung
from gemmtune.tvm.measure import make_builder, make_runner

SPEC = GemmSpec(256, 128, 64, "nt", epilogue="relu+add")


@derived_object
class _Done(PyRunnerFuture):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def done(self) -> bool:
        return True

    def result(self) -> RunnerResult:
        return RunnerResult([self.seconds], None)


@derived_object
class FakeRunner(PyRunner):
    """Random times: enough for the search loop, says nothing about speed."""

    def run(self, runner_inputs: list) -> list:
        return [_Done(random.uniform(1e-4, 2e-4)) for _ in runner_inputs]


@pytest.fixture(scope="module", params=["manual", "auto"])
def tuned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuning.TuneResult:
    settings = tuning.TuneSettings(space=request.param, trials=4, trials_per_iter=4, cost_model="random", seed=7)
    work_dir = tmp_path_factory.mktemp(f"tune-{request.param}")
    return tuning.tune(SPEC, work_dir, settings, runner=FakeRunner())


def test_tune_writes_the_json_database_and_trace(tuned: tuning.TuneResult) -> None:
    for name in ("database_workload.json", "database_tuning_record.json", tuning.TRACE_FILE):
        assert (tuned.work_dir / name).exists(), name
    records = (tuned.work_dir / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == 4


def test_best_of_the_first_n_records_is_the_search_after_n_trials(tuned: tuning.TuneResult, tmp_path: Path) -> None:
    from gemmtune.errors import GemmtuneError

    assert tuning.trial_count(tuned.work_dir) == 4 and tuning.trial_count(tmp_path) == 0
    whole = tuning.best_schedule(tuning.open_database(tuned.work_dir), SPEC)
    assert str(tuning.best_of_first(tuned.work_dir, SPEC, 4).trace) == str(whole.trace)
    # Without the workload file (a copy that lost it) the one gemm workload is recreated.
    (tmp_path / "database_tuning_record.json").write_text((tuned.work_dir / "database_tuning_record.json").read_text())
    assert str(tuning.best_of_first(tmp_path, SPEC, 4).trace) == str(whole.trace)
    tuning.best_of_first(tmp_path, SPEC, 1)
    with pytest.raises(GemmtuneError, match="fewer than 5"):
        tuning.best_of_first(tuned.work_dir, SPEC, 5)


def test_tune_says_where_its_time_went(tuned: tuning.TuneResult) -> None:
    assert tuned.seconds["total"] > 0 and tuned.seconds["build"] > 0
    assert tuned.time_split().startswith("total ") and "build" in tuned.time_split()


def test_printed_trace_reapplies_to_the_same_module(tuned: tuning.TuneResult) -> None:
    assert "def apply_trace(sch: s_tir.Schedule) -> None:" in tuned.trace_text
    again = tuning.apply_trace_text(SPEC, tuned.trace_path.read_text())
    tvm.ir.assert_structural_equal(again.mod, tuned.schedule.mod)


def test_best_schedule_compiles_with_nvrtc(tuned: tuning.TuneResult, tmp_path: Path) -> None:
    source = kernel_source(tuned.schedule.mod, SPEC, {"schedule": "tuned"})
    assert source.args == ("A", "B", "C", "D")
    compile_kernel(source, "sm_90", tmp_path)


def test_manual_space_traces_sample_its_tiles(tuned: tuning.TuneResult) -> None:
    if tuned.settings.space != "manual":
        pytest.skip("the manual space only")
    assert tuned.trace_text.count("sample_perfect_tile") == 3
    # The cooperative-fetch annotations were rewritten by MetaSchedule's postprocessor.
    assert "enter_postproc" in tuned.trace_text and "unannotate" in tuned.trace_text


def test_builder_reports_multi_kernel_candidates_as_errors(tmp_path: Path) -> None:
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    unfused = schedule_rung(SPEC, "write_cache").mod
    (result,) = make_builder(SPEC, "sm_90", tmp_path).build([BuilderInput(unfused, tuning.cuda_target())])
    assert result.artifact_path is None and "2 kernels" in result.error_msg


def test_runner_without_gpu_reports_an_error_per_candidate(tmp_path: Path) -> None:
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from gemmtune.device import gpu_available

    if gpu_available():
        pytest.skip("checks the no-GPU path")
    fused = schedule_rung(SPEC, "epilogue_fusion").mod
    (built,) = make_builder(SPEC, "sm_90", tmp_path).build([BuilderInput(fused, tuning.cuda_target())])
    runner = make_runner(SPEC)
    (future,) = runner.run([RunnerInput(built.artifact_path, "cuda", [])])
    assert future.result().run_secs is None and future.result().error_msg


def test_committed_benchmark_traces_rebuild_and_compile(tmp_path: Path) -> None:
    """The traces behind the README's MetaSchedule rows (bench/bench_tvm.py --save-traces) still re-apply to the
    workloads and compile: a TVM or workload change that breaks the replay shows up here, not on the GPU."""
    import gzip
    import json

    path = sorted((Path(__file__).parent.parent / "bench" / "results").glob("*-tvm-traces.json*"))[-1]
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    assert data["format"] == "gemmtune-tvm-traces-1" and data["shapes"]
    for key, saved in data["shapes"].items():
        spec = GemmSpec.from_json(saved["spec"])
        for trials, trace in saved["trials"].items():
            source = kernel_source(tuning.apply_trace_text(spec, trace).mod, spec, {}, data["arch"])
            compiled = compile_kernel(source, data["arch"], tmp_path)
            assert compiled.resources.registers > 0, (key, trials)
