"""Grouped tuning without a GPU (issue 69): group-size distributions and their bucket, the grouped_trials table
(round trip, resume, the lookup gemmtune.torch.grouped_mm makes and its in-process cache), the watched worker
isolating a candidate that kills its process, and `gemmtune tune-grouped` (fake measurer, one-line errors)."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.errors import NoDeviceError, SpecError
from gemmtune.grouped import GroupedSpec, candidates, default_config
from gemmtune.grouped.distribution import Routing, parse_rows, routed_rows, rows_bucket
from gemmtune.tune.grouped_db import GroupedTuningDB
from gemmtune.tune.grouped_records import GroupedKey, GroupedTrial
from gemmtune.tune.grouped_tuner import spec_for_rows, tune_grouped
from gemmtune.tune.trial import SIMULATED, Environment, Status

H200 = Environment("NVIDIA H200", "9.0", 132, "sm_90", "12.8", "12.8")
ROWS = (300, 0, 77, 129)


class FakeMeasurer:
    """Times from the tile shape (64-row tiles fastest); 64x128 one-consumer configs fail verification."""

    def __init__(self, environment: Environment = H200):
        self.environment, self.measured = environment, []

    def measure(self, spec, rows, config) -> GroupedTrial:
        self.measured.append(config)
        if config.bm == 64 and config.bn == 128 and config.consumers == 1:
            return GroupedTrial(config, Status.VERIFY_ERROR, error="VerifyError: 3 rows unwritten")
        seconds = 1e-5 * (1 + config.bm / 128 + config.stages / 100 + config.cluster / 10 + config.pingpong / 50)
        return GroupedTrial(config, Status.OK, seconds, (seconds,) * 3, 2e-5, (2e-5,) * 3)

    def close(self) -> None:
        pass


# --- distributions --------------------------------------------------------------------------------------
def test_routed_rows_sum_to_the_routed_tokens_and_are_seeded() -> None:
    assert routed_rows(4, 10, "balanced") == (3, 3, 2, 2)
    zipf = Routing(tokens=512, experts=16, topk=2, routing="zipf").rows()
    assert sum(zipf) == 1024 and len(zipf) == 16 and max(zipf) > 4 * min(zipf)
    assert Routing(512, 16, 2, "zipf").rows() == zipf != Routing(512, 16, 2, "zipf", seed=7).rows()


@pytest.mark.parametrize("text, word", [("3,x", "integers"), ("0,0", "empty"), ("", "integers"), ("4,-1", "integers")])
def test_parse_rows_refuses_bad_lists(text: str, word: str) -> None:
    with pytest.raises(SpecError, match=word):
        parse_rows(text)
    assert parse_rows(" 700, 0,1") == (700, 0, 1)


@pytest.mark.parametrize("kwargs, word", [({"topk": 9}, "exceeds"), ({"routing": "uniform"}, "unknown"),
                                          ({"tokens": 0}, ">= 1")])
def test_routing_refuses_bad_input(kwargs: dict, word: str) -> None:
    with pytest.raises(SpecError, match=word):
        Routing(**{"tokens": 64, "experts": 8, "topk": 2, **kwargs})


def test_bucket_rounds_mean_rows_per_group_to_a_power_of_two() -> None:
    assert [rows_bucket(m, 8) for m in (8, 512, 720, 730, 4, 1 << 20)] == [1, 64, 64, 128, 1, 131072]
    key = GroupedKey.of(GroupedSpec(8, 720, 512, 256, epilogue="bias+relu"))
    assert key == GroupedKey.of(GroupedSpec(8, 600, 512, 256, epilogue="bias+relu")) and key.rows_bucket == 64
    assert key != GroupedKey.of(GroupedSpec(8, 2000, 512, 256, epilogue="bias+relu"))
    assert key.epilogue == "bias_col+relu" and "~64 rows/group" in key.describe()


# --- the database ---------------------------------------------------------------------------------------
def test_tune_records_every_trial_and_a_rerun_measures_nothing(tmp_path: Path) -> None:
    spec = spec_for_rows(ROWS, 256, 128)
    db_path = tmp_path / "t.sqlite"
    first = FakeMeasurer()
    with GroupedTuningDB(db_path) as db:
        partial = tune_grouped(spec, ROWS, first, db, limit=3)
        assert len(first.measured) == 3 and partial.new_trials == 3
        seen = []
        outcome = tune_grouped(spec, ROWS, first, db, on_trial=seen.append)
    everything = candidates(spec)
    assert first.measured == everything  # the first three once, then the rest
    assert [p.new for p in seen] == [False] * 3 + [True] * (len(everything) - 3)
    assert outcome.failures == 1 and outcome.best.config.bm == 64 and outcome.best.speedup > 1
    again = FakeMeasurer()
    with GroupedTuningDB(db_path) as db:
        resumed = tune_grouped(spec, ROWS, again, db)
        assert db.results(resumed.context) == list(resumed.trials)
    assert again.measured == [] and resumed.new_trials == 0 and resumed.best == outcome.best


def test_the_database_stays_a_gemmtune_database(tmp_path: Path) -> None:
    from gemmtune.tune.db import TuningDB

    db_path = tmp_path / "t.sqlite"
    with GroupedTuningDB(db_path) as db:
        tune_grouped(spec_for_rows(ROWS, 256, 128), ROWS, FakeMeasurer(), db, limit=2)
    with TuningDB(db_path) as db:
        assert db.check().ok and db.row_count() == 0


def _lookup(monkeypatch: pytest.MonkeyPatch, spec: GroupedSpec, db_path: Path, name: str = "NVIDIA H200"):
    import gemmtune.device
    from gemmtune.grouped.tuned import tuned_config

    class Device:
        ordinal, sm_count, cc, arch = 0, 132, (9, 0), "sm_90"

    Device.name = name
    monkeypatch.setattr(gemmtune.device, "query_device", lambda ordinal=0: Device())
    return tuned_config(spec, 0, db_path)


def test_lookup_takes_the_fastest_per_flop_of_the_key_on_this_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for_rows(ROWS, 256, 128)
    db_path = tmp_path / "t.sqlite"
    assert _lookup(monkeypatch, spec, db_path) is None  # no database: nothing, and none created
    assert not db_path.exists()
    with GroupedTuningDB(db_path) as db:
        outcome = tune_grouped(spec, ROWS, FakeMeasurer(), db)
        # A simulated environment's trials are never advice.
        tune_grouped(spec, ROWS, FakeMeasurer(Environment("NVIDIA H200", "9.0", 132, "sm_90", SIMULATED, "x")), db)
    assert _lookup(monkeypatch, spec, db_path) == outcome.best.config
    same_bucket = GroupedSpec(4, 600, 256, 128)  # other total_m, same ~128 rows a group
    assert _lookup(monkeypatch, same_bucket, db_path) == outcome.best.config
    assert _lookup(monkeypatch, GroupedSpec(4, 4000, 256, 128), db_path) is None  # another bucket
    assert _lookup(monkeypatch, GroupedSpec(4, 600, 256, 128, epilogue="relu"), db_path) is None
    assert _lookup(monkeypatch, spec, db_path, name="NVIDIA H100") is None


def test_lookup_never_writes_a_database_without_grouped_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gemmtune.tune.db import TuningDB

    db_path = tmp_path / "t.sqlite"
    TuningDB(db_path).close()
    assert _lookup(monkeypatch, GroupedSpec(4, 600, 256, 128), db_path) is None
    tables = {r[0] for r in sqlite3.connect(db_path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "grouped_trials" not in tables


def test_unreadable_database_warns_once_and_gives_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "t.sqlite"
    bad.write_text("not sqlite")
    with pytest.warns(UserWarning, match="using the default"):
        assert _lookup(monkeypatch, GroupedSpec(4, 600, 256, 128), bad) is None


def test_chosen_config_reads_the_database_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    import gemmtune.grouped.tuned as tuned

    calls = []
    tuned.forget()
    monkeypatch.setattr(tuned, "tuned_config", lambda spec, ordinal, path: calls.append(spec) or None)
    spec = GroupedSpec(4, 600, 256, 128)
    for _ in range(3):
        assert tuned.chosen_config(spec) == default_config(spec)
    assert calls == [spec]
    tuned.use_database(None)  # forgets: the next call reads again
    tuned.chosen_config(spec)
    assert calls == [spec, spec]
    tuned.forget()


# --- the watched worker ---------------------------------------------------------------------------------
def dying_evaluator(job):
    """Kills its process for 64-row tiles (a faulting candidate), else a fake timing."""
    from gemmtune.tune.grouped_measure import GroupedOutcome

    if job.config_json["bm"] == 64:
        os._exit(3)
    return GroupedOutcome(Status.OK, 1e-5, (1e-5,), {"fake": True}, torch_samples_s=(2e-5, 2e-5))


def test_a_candidate_that_kills_the_worker_is_a_crash_trial(tmp_path: Path) -> None:
    from gemmtune.tune.grouped_measure import WorkerMeasurer

    spec = spec_for_rows(ROWS, 256, 128)
    configs = [c for c in candidates(spec) if c.bm == 128][:1] + [c for c in candidates(spec) if c.bm == 64][:1]
    configs.append(configs[0].with_(stages=3))
    measurer = WorkerMeasurer(rounds=1, timeout_s=60, evaluator=dying_evaluator, environment=H200)
    try:
        trials = [measurer.measure(spec, ROWS, c) for c in configs]
    finally:
        measurer.close()
    assert [t.status for t in trials] == [Status.OK, Status.CRASH, Status.OK]
    assert trials[0].speedup == pytest.approx(2.0) and "exit code 3" in trials[1].error


# --- the command line -----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, word", [
    (["--rows", "3,x"], "integers"), (["--rows", "3,4", "--tokens", "8", "--experts", "2"], "once"),
    ([], "give the group sizes"), (["--tokens", "64"], "go together"), (["--rows", "8,8", "--dtype", "e4m3"], "needs --scale"),
    (["--rows", "8,8", "--epilogue", "add"], "unsupported"), (["--rows", "8,8", "--candidates", "0"], "at least 1"),
    (["--tokens", "64", "--experts", "4", "--topk", "5"], "exceeds")])
def test_tune_grouped_refuses_bad_input_in_one_line(argv: list[str], word: str, capsys: pytest.CaptureFixture,
                                                    tmp_path: Path) -> None:
    assert main(["tune-grouped", "-n", "256", "-k", "128", "--db", str(tmp_path / "t.sqlite"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err and not (tmp_path / "t.sqlite").exists()


def test_tune_grouped_without_a_gpu_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    import gemmtune.device

    def no_gpu(ordinal: int = 0):
        raise NoDeviceError("no NVIDIA driver found; a CUDA GPU is needed")

    monkeypatch.setattr(gemmtune.device, "query_device", no_gpu)
    assert main(["tune-grouped", "-n", "256", "-k", "128", "--rows", "8,8", "--db", str(tmp_path / "t.sqlite")]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "GPU" in err and not (tmp_path / "t.sqlite").exists()


def test_tune_grouped_prints_progress_and_a_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    import gemmtune.tune.grouped_measure as measure

    monkeypatch.setattr(measure, "WorkerMeasurer", lambda rounds, timeout: FakeMeasurer())
    argv = ["tune-grouped", "-n", "256", "-k", "128", "--tokens", "128", "--experts", "8", "--topk", "2",
            "--routing", "zipf", "--candidates", "4", "--db", str(tmp_path / "t.sqlite")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[1/4]" in out and "[4/4]" in out and "x torch._grouped_mm" in out and "best:" in out
    assert "4 new trials" in out
    assert main(argv) == 0
    assert "(in the database)" in capsys.readouterr().out
