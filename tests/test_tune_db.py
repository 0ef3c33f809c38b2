"""The tuning database: what a trial stores, resume, ranking, best_known_config, export/import, transfer."""
from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from gemmtune.compiler import nvrtc_version
from gemmtune.device import DeviceInfo
from gemmtune.errors import GemmtuneError
from gemmtune.kernels.simt.config import SimtConfig
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB, best_known_config, best_known_trial
from gemmtune.tune.simulation import SimulationRunner
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.transfer import shape_distance, transfer_seeds
from gemmtune.tune.trial import Environment, Status, TrialResult, TuneContext
from gemmtune.tune.tuner import TuneOptions, tune
from test_tune_simulation import synthetic_table

H100 = Environment("NVIDIA H100 80GB HBM3", "9.0", 132, "sm_90", "12.8", nvrtc_version())
SPEC = GemmSpec(1024, 1024, 1024, math="simt")  # simt trials (auto takes 3xtf32 on sm_90 from 2^29)
FAST, SLOW = SimtConfig(), SimtConfig(bm=64, bn=64, tm=4, tn=4, wm=32, wn=32, wniter=2)


def h100_device(driver: str = "12.8") -> DeviceInfo:
    return DeviceInfo(0, H100.device_name, (9, 0), 132, 1024, 49152, 232448, 233472, 65536, 65536, 50 << 20,
                      80 << 30, driver)


def ok(config: SimtConfig, seconds: float) -> TrialResult:
    return TrialResult(config, Status.OK, seconds, (seconds, seconds * 1.01), 0.4, {"registers": 128},
                       {"warmup": 3}, "")


def context(env: Environment = H100, spec: GemmSpec = SPEC) -> TuneContext:
    return TuneContext(spec, env, "simt", space_for("simt").version)


@pytest.fixture
def db(tmp_path: Path) -> TuningDB:
    with TuningDB(tmp_path / "tuning.sqlite") as handle:
        yield handle


class CountingRunner(SimulationRunner):
    def __init__(self, table):
        super().__init__(table)
        self.measured: list = []

    def run(self, configs):
        self.measured += list(configs)
        return super().run(configs)


def test_a_trial_stores_everything_that_changes_the_answer(db: TuningDB) -> None:
    db.record(context(), ok(FAST, 1e-3))
    db.record(context(), TrialResult(SLOW, Status.VERIFY_ERROR, error="VerifyError: rel error 3e-2"))
    row = sqlite3.connect(db.path).execute("SELECT * FROM trials ORDER BY id").fetchall()
    names = [d[0] for d in db.conn.execute("SELECT * FROM trials").description]
    first = dict(zip(names, row[0]))
    assert json.loads(first["spec_json"]) == SPEC.to_json() and first["spec_key"] == SPEC.key()
    assert (first["device_name"], first["device_cc"], first["sm_count"]) == (H100.device_name, "9.0", 132)
    assert (first["driver_version"], first["nvrtc_version"]) == ("12.8", H100.nvrtc_version)
    assert first["family"] == "simt" and json.loads(first["config_json"]) == FAST.to_json()
    assert first["config_key"] == FAST.key() and first["status"] == "ok" and first["median_s"] == 1e-3
    assert json.loads(first["samples_json"]) == [1e-3, 1.01e-3] and json.loads(first["resources_json"])
    assert first["compile_s"] == 0.4 and first["created"] > 0
    assert dict(zip(names, row[1]))["error"].startswith("VerifyError")
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.results(context()) == [ok(FAST, 1e-3), TrialResult(SLOW, Status.VERIFY_ERROR,
                                                                 error="VerifyError: rel error 3e-2")]


def test_resume_never_measures_a_config_twice(db: TuningDB) -> None:
    table = synthetic_table(SPEC, rows=200, seed=3)
    first = CountingRunner(table)
    outcome = tune(SPEC, first, db, TuneOptions(trials=30, remeasure_top=0))
    assert outcome.new_trials == outcome.trials == len(first.measured) == 30
    second = CountingRunner(table)
    outcome = tune(SPEC, second, db, TuneOptions(trials=50, remeasure_top=0))
    assert outcome.trials == 50 and outcome.new_trials == len(second.measured) == 20
    assert not set(first.measured) & set(second.measured)
    third = CountingRunner(table)
    outcome = tune(SPEC, third, db, TuneOptions(trials=50, remeasure_top=3))
    assert outcome.new_trials == 0 and len(third.measured) == 3  # only the re-measurement of the top 3
    assert len(db.results(context(first.environment))) == 50
    assert len(db.results(context(first.environment), phase="remeasure")) == 3
    fourth = CountingRunner(table)  # resumed again, nothing new: the top 3 were re-measured already
    outcome = tune(SPEC, fourth, db, TuneOptions(trials=50, remeasure_top=3))
    assert outcome.new_trials == 0 and fourth.measured == [] and len(outcome.top) == 3


def test_best_uses_the_remeasured_time(db: TuningDB) -> None:
    db.record(context(), ok(FAST, 1.0e-3))
    db.record(context(), ok(SLOW, 1.1e-3))
    assert db.best(context()).config == FAST
    db.record(context(), ok(FAST, 1.5e-3), phase="remeasure")  # the first number was lucky
    assert db.best(context()).config == SLOW
    db.record(context(), TrialResult(SLOW, Status.LAUNCH_ERROR, error="LaunchError"), phase="remeasure")
    assert db.best(context()).config == FAST  # a config that fails its re-measurement is out


def test_best_known_config_for_arch_and_device(tmp_path: Path) -> None:
    path = tmp_path / "tuning.sqlite"
    assert best_known_config(SPEC, "sm_90", path) is None and not path.exists()  # never creates one
    older = Environment(H100.device_name, "9.0", 132, "sm_90", "12.4", H100.nvrtc_version)
    simulated = SimulationRunner(synthetic_table(SPEC, rows=10)).environment
    with TuningDB(path) as db:
        db.record(context(H100), ok(SLOW, 2e-3))
        db.record(context(older), ok(FAST, 1e-3))
        db.record(context(Environment("simulated x", "9.0", 132, "sm_90", simulated.driver_version, "0")),
                  ok(SimtConfig(bm=32), 1e-6))
        db.record(TuneContext(SPEC, H100, "simt", "0"), ok(SimtConfig(bm=64), 1e-6))  # an older generator
    assert best_known_config(SPEC, "sm_90", path) == FAST  # fastest measured now; not simulated, not v0
    best = best_known_trial(SPEC, "sm_90", path)
    assert best.result.config == FAST and best.result.median_s > 0
    assert best_known_config(SPEC, "sm_80", path) is None
    assert best_known_config(SPEC, h100_device("12.8"), path) == SLOW  # this driver's own result wins
    assert best_known_config(SPEC, h100_device("13.0"), path) == FAST  # no exact match: any version
    assert best_known_config(GemmSpec(1024, 1024, 1024, "nt"), "sm_90", path) is None


def test_export_import_round_trip(db: TuningDB, tmp_path: Path) -> None:
    tune(SPEC, SimulationRunner(synthetic_table(SPEC, rows=120, seed=5)), db, TuneOptions(trials=25))
    db.record(context(), ok(FAST, 1e-3))
    exported = io.StringIO()
    count = db.export_jsonl(exported)
    assert count == 25 + 5 + 1  # search trials, re-measurements, the hand-made one
    with TuningDB(tmp_path / "copy.sqlite") as copy:
        assert copy.import_jsonl(io.StringIO(exported.getvalue())) == (count, 0)
        assert copy.import_jsonl(io.StringIO(exported.getvalue())) == (0, count)  # idempotent
        again = io.StringIO()
        copy.export_jsonl(again)
        assert again.getvalue() == exported.getvalue()
        assert [s.trials for s in copy.contexts()] == [s.trials for s in db.contexts()]


def test_import_names_the_bad_line(db: TuningDB) -> None:
    with pytest.raises(GemmtuneError, match="line 2"):
        db.import_jsonl(io.StringIO("\n{\"spec\": 1}\n"))


def test_contexts_summarize_each_tune(db: TuningDB) -> None:
    db.record(context(), ok(FAST, 1e-3))
    db.record(context(), TrialResult(SLOW, Status.TIMEOUT, error="Timeout"))
    db.record(context(spec=GemmSpec(2048, 2048, 2048)), ok(SLOW, 4e-3))
    summaries = db.contexts()
    assert [(s.context.spec.m, s.trials, s.failures) for s in summaries] == [(1024, 2, 1), (2048, 1, 0)]
    assert summaries[0].best.config == FAST


def test_transfer_seeds_come_from_the_nearest_shapes(db: TuningDB) -> None:
    near, far = GemmSpec(1024, 1024, 2048), GemmSpec(8192, 8192, 8192)
    assert shape_distance(SPEC, near) < shape_distance(SPEC, far)
    db.record(context(spec=far), ok(SLOW, 1e-3))
    db.record(context(spec=near), ok(FAST, 1e-3))
    db.record(context(spec=near), ok(SimtConfig(bm=48), 2e-3))  # not a valid candidate here: dropped
    other_gpu = Environment("NVIDIA A100", "8.0", 108, "sm_80", "12.8", H100.nvrtc_version)
    db.record(context(other_gpu, near), ok(SimtConfig(bm=64), 1e-4))  # another GPU: ignored
    candidates = candidate_set(space_for("simt"), SPEC, "sm_90")
    assert transfer_seeds(db, context(), candidates, shapes=1) == [FAST]
    assert transfer_seeds(db, context(), candidates) == [FAST, SLOW]


def test_tune_starts_from_transfer_seeds(db: TuningDB) -> None:
    near = GemmSpec(1024, 1024, 2048)
    table = synthetic_table(SPEC, rows=150, seed=6)
    runner = CountingRunner(table)
    seed = next(c for c, r in table.rows.items() if r.status is Status.OK)
    db.record(context(runner.environment, near), ok(seed, 1e-4))
    tune(SPEC, runner, db, TuneOptions(trials=8, remeasure_top=0, strategy="random"))
    assert runner.measured[0] == seed


def test_build_and_export_pick_the_tuned_config(tmp_path: Path) -> None:
    from gemmtune.export.config_source import choose_config

    path = tmp_path / "tuning.sqlite"
    with TuningDB(path) as db:
        db.record(context(), ok(SLOW, 1e-3))
    choice = choose_config(SPEC, "sm_90", None, path)
    assert choice.config == SLOW and choice.provenance.source == "tuning-db"
    assert choose_config(SPEC, "sm_90", h100_device(), path).config == SLOW
