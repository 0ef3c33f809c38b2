"""A parent process for test_lifeline.py: starts every kind of child gemmtune starts, then waits.

    python lifeline_parent.py pipeline READY_FILE   # a MeasurePipeline: compile pool + measuring worker
    python lifeline_parent.py compile READY_FILE    # gemmtune.build.compile_configs' pool
    python lifeline_parent.py tune-cli DB TABLE     # `gemmtune tune --simulate` with a slow replay

The measuring worker evaluates on the fake CUDA driver (tests/fake_driver.py); its evaluator writes
READY_FILE and then hangs, so at that moment the pool and the worker are both alive and busy.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from gemmtune.spec import GemmSpec
from gemmtune.tune.pipeline import CompileRequest
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.worker import MeasureJob, MeasureOutcome
from test_tune_worker import ENV, FewCandidates, fake_compile_all_fine

READY = Path(sys.argv[2]) if len(sys.argv) > 2 else None


def compile_first_fast(request: CompileRequest) -> MeasureJob:
    """The first config compiles at once (so measuring starts); the others keep the pool busy."""
    if request.config_json["bm"] != 32 or request.config_json["bn"] != 32:
        time.sleep(600)
    return fake_compile_all_fine(request)


def hang_on_the_fake_gpu(job: MeasureJob) -> MeasureOutcome:
    import cuda.bindings

    from fake_driver import FakeDriver
    from gemmtune.device import query_device

    cuda.bindings.driver = FakeDriver()
    query_device()  # a "CUDA context" is up, as it would be on a GPU
    READY.write_text("measuring\n")
    time.sleep(600)
    raise AssertionError("the test should have killed this process by now")


def slow_compile(job: tuple) -> None:
    Path(str(READY) + f".{job}").write_text("compiling\n")
    time.sleep(600)


def run_pipeline() -> None:
    runner = FewCandidates(GemmSpec(512, 512, 512), ENV, compile_workers=2, timeout_s=600.0,
                           evaluator=hang_on_the_fake_gpu, compiler=compile_first_fast)
    candidates = runner.restrict(candidate_set(space_for("simt"), runner.spec, "sm_90"))
    list(runner.run(candidates.configs(range(len(candidates)))))


def run_compile_pool() -> None:
    from gemmtune.lifeline import spawn_pool

    with spawn_pool(2) as pool:
        list(pool.map(slow_compile, [0, 1]))


def run_tune_cli(db: str, table: str) -> int:
    """`gemmtune tune --simulate` whose replay takes 50 ms a trial, so a signal lands mid-run."""
    import gemmtune.cli.tune_cmds as tune_cmds
    from gemmtune.cli import main
    from gemmtune.tune.simulation import SimulationRunner

    plain = tune_cmds.simulation_runner

    def slow(path, spec):
        runner, cublas_s, note = plain(path, spec)
        return SimulationRunner(runner.table, delay_s=0.05), cublas_s, note

    tune_cmds.simulation_runner = slow
    return main(["tune", "MNK=1024", "t=200", "--math", "simt", "--simulate", table, "--db", db, "--top", "0"])


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "pipeline":
        run_pipeline()
    elif kind == "compile":
        run_compile_pool()
    else:
        sys.exit(run_tune_cli(sys.argv[2], sys.argv[3]))
