"""Grouped-GEMM trials in the tuning database: a table of their own (`grouped_trials`) beside `trials`, in the
same SQLite file, opened the same way (db_file.connect: one-line refusals of files that are not ours).

One row per (context, config), committed as it is measured: re-running a tune skips the configs its context
holds. The lookup ranks a key's verified trials, over every tune of that key on the GPU, by time per FLOP (tunes
of one bucket ran on different group sizes, so their raw times do not compare).
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from ..spec import stable_hash
from .db import SCHEMA as TRIALS_SCHEMA
from .db_file import check_readable, connect
from .grouped_records import GroupedContext, GroupedKey, GroupedTrial, config_from_json
from .trial import SIMULATED, Status

GROUPED_SCHEMA = """
CREATE TABLE IF NOT EXISTS grouped_trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    context_key TEXT NOT NULL, config_key TEXT NOT NULL, lookup_key TEXT NOT NULL,
    key_json TEXT NOT NULL, total_m INTEGER NOT NULL, rows_json TEXT NOT NULL, flops REAL NOT NULL,
    device_name TEXT, device_cc TEXT, sm_count INTEGER, arch TEXT, driver_version TEXT, nvrtc_version TEXT,
    family_version TEXT NOT NULL, config_json TEXT NOT NULL,
    status TEXT NOT NULL, median_s REAL, samples_json TEXT, torch_median_s REAL, torch_samples_json TEXT,
    error TEXT, created REAL NOT NULL, torch_op TEXT,
    UNIQUE (context_key, config_key)
);
CREATE INDEX IF NOT EXISTS grouped_trials_by_key ON grouped_trials (lookup_key, device_name, family_version);
"""

COLUMNS = ("context_key", "config_key", "lookup_key", "key_json", "total_m", "rows_json", "flops", "device_name",
           "device_cc", "sm_count", "arch", "driver_version", "nvrtc_version", "family_version", "config_json",
           "status", "median_s", "samples_json", "torch_median_s", "torch_samples_json", "error", "created", "torch_op")

BEST = """
SELECT config_json FROM grouped_trials
WHERE lookup_key = ? AND device_name = ? AND sm_count = ? AND family_version = ? AND status = 'ok'
      AND driver_version != ? ORDER BY median_s / flops LIMIT 1
"""


class GroupedTuningDB:
    """The grouped_trials table of a tuning database file (created with the file's `trials` table, so every
    other verb still recognises the file as a gemmtune database)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = connect(self.path, TRIALS_SCHEMA + GROUPED_SCHEMA)
        add_missing_columns(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "GroupedTuningDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, context: GroupedContext, trial: GroupedTrial) -> None:
        """Store one trial and commit at once (a kill loses at most the trial in flight); a config already
        stored for the context is kept."""
        row = row_of(context, trial, time.time())
        marks = ", ".join("?" for _ in COLUMNS)
        with self.conn:
            self.conn.execute(f"INSERT OR IGNORE INTO grouped_trials ({', '.join(COLUMNS)}) VALUES ({marks})",
                              [row[c] for c in COLUMNS])

    def results(self, context: GroupedContext) -> list[GroupedTrial]:
        """The context's trials, in the order they were measured."""
        rows = self.conn.execute("SELECT * FROM grouped_trials WHERE context_key = ? ORDER BY id",
                                 (context.context_hash(),)).fetchall()
        return [trial_of(row) for row in rows]

    def every_trial(self) -> list[tuple[tuple, dict, float, GroupedTrial]]:
        """Every trial, in the order measured: (where: lookup key, GPU, driver, NVRTC and generator version;
        the grouped key as JSON; the spec's FLOPs; the trial), for listings across keys."""
        return [((row["lookup_key"], row["device_name"], row["driver_version"], row["nvrtc_version"],
                  row["family_version"]), json.loads(row["key_json"]), row["flops"], trial_of(row))
                for row in self.conn.execute("SELECT * FROM grouped_trials ORDER BY id")]

    def best_config_json(self, key: GroupedKey, device_name: str, sm_count: int, family_version: str) -> dict | None:
        """The fastest verified config (time per FLOP) of `key` on that GPU and generator version, as JSON."""
        found = self.conn.execute(BEST, (key.hash(), device_name, sm_count, family_version, SIMULATED)).fetchone()
        return json.loads(found["config_json"]) if found else None


def best_config_json(path: Path, key: GroupedKey, device_name: str, sm_count: int, family_version: str) -> dict | None:
    """GroupedTuningDB.best_config_json without creating anything: the call path's lookup leaves a database
    without grouped trials as it was (DatabaseFileError for a file that is not a gemmtune database)."""
    check_readable(path)
    conn = sqlite3.connect(str(path), timeout=30.0)
    try:
        conn.row_factory = sqlite3.Row
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'grouped_trials'").fetchone():
            return None
        found = conn.execute(BEST, (key.hash(), device_name, sm_count, family_version, SIMULATED)).fetchone()
    finally:
        conn.close()
    return json.loads(found["config_json"]) if found else None


ADDED_COLUMNS = (("torch_op", "TEXT"),)  # columns later than the table: added to files written before them


def add_missing_columns(conn: sqlite3.Connection) -> None:
    """ALTER an older grouped_trials table up to COLUMNS (its rows read '' in the new columns)."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(grouped_trials)")}
    with conn:
        for name, kind in ADDED_COLUMNS:
            if name not in present:
                conn.execute(f"ALTER TABLE grouped_trials ADD COLUMN {name} {kind}")


def row_of(context: GroupedContext, trial: GroupedTrial, created: float) -> dict:
    env, config_json = context.environment, trial.config.to_json()
    return {
        "context_key": context.context_hash(), "config_key": stable_hash(config_json), "lookup_key": context.key.hash(),
        "key_json": json.dumps(context.key.to_json(), sort_keys=True), "total_m": context.spec.total_m,
        "rows_json": json.dumps(list(context.rows)), "flops": float(context.flops), "device_name": env.device_name,
        "device_cc": env.cc, "sm_count": env.sm_count, "arch": env.arch, "driver_version": env.driver_version,
        "nvrtc_version": env.nvrtc_version, "family_version": context.family_version,
        "config_json": json.dumps(config_json, sort_keys=True), "status": trial.status.value,
        "median_s": trial.median_s, "samples_json": json.dumps(list(trial.samples_s)),
        "torch_median_s": trial.torch_median_s, "torch_samples_json": json.dumps(list(trial.torch_samples_s)),
        "error": trial.error, "created": created, "torch_op": trial.torch_op,
    }


def trial_of(row) -> GroupedTrial:
    return GroupedTrial(config_from_json(json.loads(row["config_json"])), Status(row["status"]), row["median_s"],
                        tuple(json.loads(row["samples_json"] or "[]")), row["torch_median_s"],
                        tuple(json.loads(row["torch_samples_json"] or "[]")), row["error"] or "",
                        row["torch_op"] or "")
