"""Isolated measurement: a candidate that raises, hangs or kills its process is a failed trial, the
worker is restarted and the run goes on. Evaluators and compilers here are module-level so the
spawned processes can import them (tests/ is on their sys.path)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from gemmtune.errors import LaunchError, VerifyError
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.pipeline import CompileRequest, MeasurePipeline
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.trial import Environment, Status
from gemmtune.tune.tuner import TuneOptions, tune
from gemmtune.tune.worker import MeasureJob, MeasureOutcome, MeasureWorker

ENV = Environment("Fake H100", "9.0", 132, "sm_90", "12.8", "13.0")


def job(case: str, bm: int = 128) -> MeasureJob:
    return MeasureJob({"case": case, "bm": bm}, {}, "sm_90", b"", {}, 0.1, "13.0")


def by_case(job: MeasureJob) -> MeasureOutcome:
    """A fake evaluator steered by the job: ok, raise, launch fault, hang, or die."""
    case = job.config_json["case"]
    if case == "raise":
        raise RuntimeError("the renderer had a bug")
    if case == "fault":
        raise LaunchError("launching gemm failed: CUDA_ERROR_ILLEGAL_ADDRESS")
    if case == "wrong":
        raise VerifyError("rel error 0.3 above tolerance")
    if case == "hang":
        time.sleep(120)
    if case == "die":
        os._exit(7)
    return MeasureOutcome(Status.OK, 1e-3, (1e-3,), {"pid": os.getpid()})


def test_worker_survives_every_kind_of_failure() -> None:
    worker = MeasureWorker(by_case, timeout_s=1.0, startup_s=30.0)
    try:
        first = worker.measure(job("ok"))
        assert first.status is Status.OK
        raised = worker.measure(job("raise"))
        assert raised.status is Status.ERROR and "RuntimeError: the renderer had a bug" in raised.error
        assert worker.measure(job("fault")).status is Status.LAUNCH_ERROR
        assert worker.measure(job("wrong")).status is Status.VERIFY_ERROR
        started = time.monotonic()
        hung = worker.measure(job("ok")) and worker.measure(job("hang"))
        assert hung.status is Status.TIMEOUT and "worker restarted" in hung.error
        assert time.monotonic() - started < 30
        died = worker.measure(job("die"))
        assert died.status is Status.CRASH and "exit code 7" in died.error
        last = worker.measure(job("ok"))
        assert last.status is Status.OK and last.protocol["pid"] != first.protocol["pid"]
        assert worker.starts >= 4  # fresh child after the bug, the fault, the hang and the death
    finally:
        worker.close()


def fake_compile(request: CompileRequest) -> MeasureJob:
    """Skips NVRTC: the measuring side is what these tests exercise."""
    config = request.config_json
    bm, bn = config["bm"], config["bn"]
    case = {(32, 32): "raise", (64, 32): "hang", (32, 64): "die", (64, 64): "fault"}.get((bm, bn), "ok")
    return MeasureJob({**config, "case": case}, {}, request.arch, b"", {"registers": 64}, 0.2, "13.0",
                      request.protocol)


def fake_compile_all_fine(request: CompileRequest) -> MeasureJob:
    return MeasureJob({**request.config_json, "case": "ok"}, {}, request.arch, b"", {}, 0.2, "13.0", request.protocol)


def fake_compile_rejects_some(request: CompileRequest) -> MeasureJob:
    from gemmtune.errors import CompileError

    if request.config_json["bm"] == 256:
        raise CompileError("NVRTC could not compile gemm: error: too many resources")
    return fake_compile(request)


class FewCandidates(MeasurePipeline):
    """The pipeline, over a handful of configs that hit every failure path."""

    def restrict(self, candidates):
        bm, bn = candidates.columns["bm"], candidates.columns["bn"]
        picked = [int(np.flatnonzero((bm == m) & (bn == n))[0])
                  for m, n in ((32, 32), (64, 32), (32, 64), (64, 64), (128, 128), (256, 256), (128, 64))]
        return candidates.subset(candidates.configs(picked))

    def measurable(self, config):
        return False  # not even the chooser's picks outside the space: only the handful above


def test_a_tune_records_failures_and_completes(tmp_path: Path) -> None:
    spec = GemmSpec(512, 512, 512)
    runner = FewCandidates(spec, ENV, compile_workers=2, timeout_s=1.0, evaluator=by_case,
                           compiler=fake_compile_rejects_some)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            outcome = tune(spec, runner, db, TuneOptions(strategy="exhaustive", trials=50, batch=4, remeasure_top=2))
            results = {(r.config.bm, r.config.bn): r for r in db.results(outcome.context)}
    finally:
        runner.close()
    assert outcome.stop_reason == "search space exhausted" and outcome.trials == 7
    expected = {(32, 32): Status.ERROR, (64, 32): Status.TIMEOUT, (32, 64): Status.CRASH,
                (64, 64): Status.LAUNCH_ERROR, (256, 256): Status.COMPILE_ERROR, (128, 128): Status.OK,
                (128, 64): Status.OK}
    assert {k: r.status for k, r in results.items()} == expected
    assert all(r.error for r in results.values() if not r.ok)
    assert "too many resources" in results[(256, 256)].error
    assert outcome.failures == 5 and {r.config.bm for r in outcome.top} == {128}


# --- the real evaluator, on the fake CUDA driver ----------------------------------------------------
def fake_gpu_evaluator(job: MeasureJob) -> MeasureOutcome:
    """gpu_evaluator in a child whose CUDA driver is tests/fake_driver.py: a Python 'kernel' computes
    A·B (or, for bm == 64, a wrong answer)."""
    import cuda.bindings

    from fake_driver import FakeDriver, device_array, param_pointer
    from gemmtune.tune.worker import gpu_evaluator

    spec = GemmSpec.from_json(job.source_json["spec"])
    wrong = job.config_json["bm"] == 64

    def kernel(params: int) -> None:
        a = device_array(param_pointer(params, 0), (spec.m, spec.k))
        b = device_array(param_pointer(params, 1), (spec.k, spec.n))
        d = device_array(param_pointer(params, 2), (spec.m, spec.n))
        d[:] = (a @ b).astype(np.float32) * (1.5 if wrong else 1.0)

    cuda.bindings.driver = FakeDriver({job.source_json["entry"]: kernel})
    return gpu_evaluator(job)


def test_gpu_evaluator_through_render_nvrtc_and_the_fake_driver(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from gemmtune.timing import TimingProtocol

    spec = GemmSpec(64, 64, 32)
    quick = TimingProtocol(warmup=1, min_reps=3, max_reps=5, min_time_s=0.0, flush_l2=False)
    runner = MeasurePipeline(spec, ENV, protocol=quick, compile_workers=2, timeout_s=60.0,
                             evaluator=fake_gpu_evaluator, cache_dir=tmp_path / "nvrtc")
    candidates = candidate_set(space_for("simt"), spec, "sm_90")
    everything = candidates.configs(range(len(candidates)))
    configs = [next(c for c in everything if c.bm == bm and c.bn == 32 and c.vec == 4) for bm in (32, 64)]
    try:
        right, wrong = sorted(runner.run(configs), key=lambda r: r.config.bm)
    finally:
        runner.close()
    assert right.status is Status.OK, right.error
    assert right.median_s > 0 and len(right.samples_s) >= 3 and right.protocol["min_reps"] == 3
    assert right.resources["registers"] > 0 and right.compile_s > 0
    assert wrong.status is Status.VERIFY_ERROR and wrong.median_s is None


# --- bench/record_space.py, with the fakes in place of NVRTC and the GPU ---------------------------
def test_record_space_script_writes_a_replayable_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    from gemmtune.device import DeviceInfo
    from gemmtune.tune.simulation import SimulationTable, recorded_tables

    script = Path(__file__).parents[1] / "bench" / "record_space.py"
    spec_obj = importlib.util.spec_from_file_location("record_space", script)
    record_space = importlib.util.module_from_spec(spec_obj)
    spec_obj.loader.exec_module(record_space)
    device = DeviceInfo(0, "Fake H100", (9, 0), 132, 1024, 49152, 232448, 233472, 65536, 65536, 50 << 20, 80 << 30,
                        "12.8")
    monkeypatch.setattr(record_space, "query_device", lambda ordinal=0: device)
    monkeypatch.setattr(record_space, "cublas_seconds", lambda spec: (None, "no cuBLAS baseline: no torch"))
    monkeypatch.setattr(record_space, "MeasurePipeline", lambda spec, env, **kw: MeasurePipeline(
        spec, env, compile_workers=2, timeout_s=5.0, evaluator=by_case, compiler=fake_compile_all_fine))
    monkeypatch.setattr(sys, "argv", ["record_space.py", "--sizes", "128", "--trials", "24", "--db",
                                      str(tmp_path / "r.sqlite"), "--out", str(tmp_path)])
    assert record_space.main() == 0
    [path] = recorded_tables(tmp_path)
    table = SimulationTable.from_csv(path)
    assert len(table.rows) == 24 and table.spec == GemmSpec(128, 128, 128)
    assert table.environment.device_name == "Fake H100" and table.meta["valid_configs"] > 1000
    assert table.meta["protocol"]["min_reps"] == record_space.QUICK.min_reps


def no_device(job: MeasureJob) -> MeasureOutcome:
    from gemmtune.errors import NoDeviceError

    raise NoDeviceError("the NVIDIA driver sees no CUDA GPU")


def test_a_machine_failure_stops_the_run_instead_of_failing_candidates(tmp_path: Path) -> None:
    """Recording it would mark good configs failed, and resume never retries a recorded config."""
    from gemmtune.errors import NoDeviceError

    spec = GemmSpec(512, 512, 512)
    runner = FewCandidates(spec, ENV, compile_workers=1, evaluator=no_device, compiler=fake_compile_all_fine)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            with pytest.raises(NoDeviceError, match="no CUDA GPU"):
                tune(spec, runner, db, TuneOptions(strategy="exhaustive", trials=5, batch=2))
            assert db.contexts() == []
    finally:
        runner.close()


def fake_compile_dies_on_bm_256(request: CompileRequest) -> MeasureJob:
    if request.config_json["bm"] == 256:
        os._exit(1)  # as a segfaulting compiler would
    return fake_compile_all_fine(request)


def fake_compile_without_nvrtc(request: CompileRequest) -> MeasureJob:
    from gemmtune.errors import GemmtuneError

    raise GemmtuneError("NVRTC is not available: pip install cuda-bindings nvidia-cuda-nvrtc")


def test_a_dying_compiler_blames_only_its_config(tmp_path: Path) -> None:
    spec = GemmSpec(512, 512, 512)
    runner = FewCandidates(spec, ENV, compile_workers=2, evaluator=by_case, compiler=fake_compile_dies_on_bm_256)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            outcome = tune(spec, runner, db, TuneOptions(strategy="exhaustive", trials=50, batch=7, remeasure_top=0))
            statuses = {(r.config.bm, r.config.bn): r.status for r in db.results(outcome.context)}
    finally:
        runner.close()
    assert statuses.pop((256, 256)) is Status.CRASH
    assert len(statuses) == 6 and set(statuses.values()) == {Status.OK}


def test_a_missing_compiler_stops_the_run(tmp_path: Path) -> None:
    from gemmtune.errors import GemmtuneError

    spec = GemmSpec(512, 512, 512)
    runner = FewCandidates(spec, ENV, compile_workers=1, evaluator=by_case, compiler=fake_compile_without_nvrtc)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            with pytest.raises(GemmtuneError, match="NVRTC is not available"):
                tune(spec, runner, db, TuneOptions(strategy="exhaustive", trials=5, batch=2))
            assert db.contexts() == []
    finally:
        runner.close()


def test_a_measuring_child_draws_a_shapes_inputs_once(monkeypatch):
    """prepared_for keeps recent shapes' inputs and references: every candidate of a shape is
    checked on the same ones, shapes measured in turn keep theirs, and the oldest go first when
    they hold more than PREPARED_BYTES together."""
    import gemmtune.device
    import gemmtune.evaluate
    from gemmtune.evaluate import Prepared
    from gemmtune.spec import GemmSpec
    from gemmtune.tune import worker

    drawn = []

    def prepare(spec):
        drawn.append(spec)
        return Prepared(spec, {"A": np.zeros(spec.m * spec.k, np.float32)}, np.zeros(spec.m * spec.n))

    monkeypatch.setattr(gemmtune.evaluate, "prepare", prepare)
    monkeypatch.setattr(gemmtune.device, "free_memory", lambda ordinal=0: 1 << 40)
    monkeypatch.setattr(worker, "_PREPARED", [])
    first, second, third = GemmSpec(256, 256, 256), GemmSpec(512, 256, 256), GemmSpec(1024, 256, 256)
    a = worker.prepared_for(first)
    assert worker.prepared_for(first) is a and drawn == [first]
    b = worker.prepared_for(second)
    assert worker.prepared_for(first) is a and worker.prepared_for(second) is b and drawn == [first, second]
    monkeypatch.setattr(worker, "PREPARED_BYTES", worker._held_bytes(b) + worker._held_bytes(a))
    worker.prepared_for(third)  # over the limit: the least recent (first) goes, then second
    assert [p.spec for p in worker._PREPARED] == [third] and drawn == [first, second, third]
    assert worker.prepared_for(first) is not a and drawn[-1] == first


def test_lookahead_compiles_the_next_round_early_and_changes_nothing_else(tmp_path: Path) -> None:
    """With lookahead the tuner asks round k+1 before round k is measured and hands it to the
    pipeline's prefetch; an exhaustive search then records the same trials as without it."""
    spec = GemmSpec(512, 512, 512)
    outcomes = {}
    for lookahead in (False, True):
        runner = FewCandidates(spec, ENV, compile_workers=2, timeout_s=1.0, evaluator=by_case,
                               compiler=fake_compile_rejects_some)
        try:
            with TuningDB(tmp_path / f"t{lookahead}.sqlite") as db:
                options = TuneOptions(strategy="exhaustive", trials=50, batch=3, remeasure_top=0, lookahead=lookahead)
                outcome = tune(spec, runner, db, options)
                outcomes[lookahead] = {(r.config.bm, r.config.bn): r.status for r in db.results(outcome.context)}
            assert runner.ahead == {}  # every prefetched compile was used
        finally:
            runner.close()
    assert outcomes[True] == outcomes[False] and len(outcomes[True]) == 7


def test_prefetch_starts_the_compile_that_run_then_uses() -> None:
    runner = MeasurePipeline(GemmSpec(512, 512, 512), ENV, compile_workers=1, timeout_s=5.0, evaluator=by_case,
                             compiler=fake_compile_all_fine)
    try:
        config = runner_config()
        runner.prefetch([config])
        future = runner.ahead[config]
        assert [r.status for r in runner.run([config])] == [Status.OK]
        assert runner.ahead == {} and future.done()
    finally:
        runner.close()


def runner_config():
    from gemmtune.kernels.simt.config import SimtConfig

    return SimtConfig()
