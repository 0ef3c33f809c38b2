"""GPU: a real tuning run survives candidates that fault (out-of-bounds writes), and records them."""
import dataclasses

import pytest

from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

FAULT = "    if (threadIdx.x == 0) D[(size_t)1 << 36] = 1.0f;  // injected: far out-of-bounds write\n"


def faulting_compiler(request):
    """Compile normally, but plant an out-of-bounds write in every other candidate (by config key)."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.kernel_source import KernelSource
    from gemmtune.kernels.simt.config import SimtConfig
    from gemmtune.tune.pipeline import compile_candidate

    job = compile_candidate(request)
    if int(SimtConfig.from_json(request.config_json).key(), 16) % 2:
        return job
    source = KernelSource.from_json(job.source_json)
    marker = "    const int m_origin"
    bad = dataclasses.replace(source, code=source.code.replace(marker, FAULT + marker, 1))
    assert bad.code != source.code
    return dataclasses.replace(job, source_json=bad.to_json(), cubin=compile_kernel(bad, request.arch).cubin)


def test_faulting_candidates_do_not_stop_a_tune(tmp_path):
    from gemmtune.compiler import nvrtc_version
    from gemmtune.device import query_device
    from gemmtune.tune.db import TuningDB
    from gemmtune.tune.pipeline import MeasurePipeline
    from gemmtune.tune.trial import Environment, Status
    from gemmtune.tune.tuner import TuneOptions, tune

    spec = GemmSpec(512, 384, 256, layout="nt")
    device = query_device()
    runner = MeasurePipeline(spec, Environment.from_device(device, nvrtc_version()), device=device,
                             compiler=faulting_compiler, timeout_s=60)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            outcome = tune(spec, runner, db, TuneOptions(strategy="random", trials=12, remeasure_top=2))
            statuses = [r.status for r in db.results(outcome.context)]
    finally:
        runner.close()
    assert outcome.trials == 12 and len(statuses) == 12
    assert Status.LAUNCH_ERROR in statuses, statuses  # the planted faults were caught and recorded
    assert Status.OK in statuses, statuses  # and the run went on measuring the good ones
    assert outcome.best is not None and outcome.best.status == Status.OK


def test_leaders_are_timed_in_turn_beside_the_chooser_pick(tmp_path):
    """tuner.compare_in_turn on the GPU: the leaders and the chooser's pick timed in turn in the watched worker
    (worker.PairedJob), each recorded as a remeasure of IN_TURN_ROUNDS per-round times; the pick's record is
    its search time (the anchor of the scale); a kernel planted to fault makes the timing in turn fail as a
    whole (None), and the tuner then measures one by one."""
    from gemmtune.chooser import rank
    from gemmtune.compiler import nvrtc_version
    from gemmtune.device import query_device
    from gemmtune.tune.db import TuningDB
    from gemmtune.tune.pipeline import MeasurePipeline
    from gemmtune.tune.trial import Environment
    from gemmtune.tune.tuner import IN_TURN_ROUNDS, TuneOptions, tune

    spec = GemmSpec(512, 384, 256, layout="nt")
    device = query_device()
    runner = MeasurePipeline(spec, Environment.from_device(device, nvrtc_version()), device=device, timeout_s=60)
    try:
        with TuningDB(tmp_path / "t.sqlite") as db:
            outcome = tune(spec, runner, db, TuneOptions(strategy="random", trials=8, remeasure_top=3))
            again = {r.config: r for r in db.results(outcome.context, phase="remeasure")}
            searched = {r.config: r for r in db.results(outcome.context)}
    finally:
        runner.close()
    pick = rank(spec, device.arch, device.sm_count, "simt")[0].config  # the tuner's first chooser seed (family simt)
    assert len(again) >= 3 and all(len(r.samples_s) == IN_TURN_ROUNDS for r in again.values() if r.ok)
    assert pick in searched and pick in again and again[pick].median_s == searched[pick].median_s
    assert outcome.best is not None and outcome.best.config in again

    faulty = MeasurePipeline(spec, Environment.from_device(device, nvrtc_version()), device=device,
                             compiler=faulting_compiler, timeout_s=60)
    try:
        configs = [r.config for r in outcome.top[:3]]
        from gemmtune.kernels.simt.config import SimtConfig

        bad = [c for c in configs if isinstance(c, SimtConfig) and int(c.key(), 16) % 2 == 0]
        timed = faulty.time_in_turn(configs, 5)
        assert (timed is None) if bad else (timed is not None and all(len(t) == 5 for t in timed.values()))
    finally:
        faulty.close()
