"""Resume after a kill: a tune in a subprocess (simulation runner, a small delay per trial) is
SIGKILLed mid-run; re-running it finishes the budget with no trial lost and none measured twice."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from gemmtune.spec import GemmSpec
from gemmtune.tune.simulation import table_path
from test_tune_simulation import synthetic_table

TRIALS = 120
SCRIPT = """
import sys
from pathlib import Path
from gemmtune.tune.db import TuningDB
from gemmtune.tune.simulation import SimulationRunner, SimulationTable
from gemmtune.tune.tuner import TuneOptions, tune

table_csv, db_path, log_path, delay = sys.argv[1:5]
table = SimulationTable.from_csv(Path(table_csv))
runner = SimulationRunner(table, delay_s=float(delay), log_path=Path(log_path))
with TuningDB(db_path) as db:
    tune(table.spec, runner, db, TuneOptions(trials=%d, batch=4, remeasure_top=0))
""" % TRIALS


def tune_process(table: Path, db: Path, log: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(table), str(db), str(log), str(delay)], env=env)


def rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'trials'").fetchone():
            return []  # the tune has opened the file but not yet created its schema
        return conn.execute("SELECT id, config_key, created FROM trials WHERE phase = 'search' ORDER BY id").fetchall()


def wait_for_rows(db: Path, count: int, process: subprocess.Popen, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while len(rows(db)) < count:
        assert process.poll() is None, "the tune ended before it could be killed"
        assert time.monotonic() < deadline, "the tune made no progress"
        time.sleep(0.05)


def logged(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_sigkill_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    table = table_path("simt", GemmSpec(1024, 1024, 1024), tmp_path)
    synthetic_table(GemmSpec(1024, 1024, 1024), rows=400, seed=8).to_csv(table)
    db, first_log, second_log = tmp_path / "t.sqlite", tmp_path / "first.log", tmp_path / "second.log"

    first = tune_process(table, db, first_log, delay=0.02)
    wait_for_rows(db, 30, first)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    before = rows(db)
    assert 30 <= len(before) < TRIALS
    # Every trial measured before the kill is in the database, except at most the one in flight.
    assert len(set(logged(first_log)) - {key for _, key, _ in before}) <= 1

    second = tune_process(table, db, second_log, delay=0.0)
    assert second.wait(60) == 0
    after = rows(db)
    keys = [key for _, key, _ in after]
    assert len(after) == TRIALS and len(set(keys)) == TRIALS
    assert after[: len(before)] == before  # the first run's rows are untouched
    assert not set(logged(second_log)) & {key for _, key, _ in before}  # nothing measured twice
    assert len(logged(second_log)) == TRIALS - len(before)
