"""The tuning database: SQLite (stdlib) in WAL mode, one row per trial, committed as it is measured.

A trial's key is its context (spec, device name/cc/SM count/arch, driver and NVRTC versions,
family and version: everything that changes the answer) plus the config and the phase ('search'
for the tuning run, 'remeasure' for the confirmation of the top few at the end).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from ..errors import GemmtuneError
from ..input_files import InputFileError
from ..spec import GemmSpec, stable_hash
from .db_file import DatabaseReport, check, connect
from .space import space_for
from .trial import SIMULATED, Environment, Status, TrialResult, TuneContext

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    context_key TEXT NOT NULL, config_key TEXT NOT NULL, phase TEXT NOT NULL,
    spec_key TEXT NOT NULL, spec_json TEXT NOT NULL, m INTEGER, n INTEGER, k INTEGER,
    device_name TEXT, device_cc TEXT, sm_count INTEGER, arch TEXT, driver_version TEXT, nvrtc_version TEXT,
    family TEXT NOT NULL, family_version TEXT NOT NULL, config_json TEXT NOT NULL,
    status TEXT NOT NULL, median_s REAL, samples_json TEXT, protocol_json TEXT, compile_s REAL,
    resources_json TEXT, error TEXT, created REAL NOT NULL,
    UNIQUE (context_key, config_key, phase)
);
CREATE INDEX IF NOT EXISTS trials_by_spec ON trials (spec_key, family, device_name);
"""

# The remeasured median wins when there is one; a config whose remeasure failed is not a winner.
RANKED = """
SELECT s.*, COALESCE(r.median_s, s.median_s) AS best_s FROM trials s
LEFT JOIN trials r ON r.context_key = s.context_key AND r.config_key = s.config_key AND r.phase = 'remeasure'
WHERE s.phase = 'search' AND s.status = 'ok' AND (r.status IS NULL OR r.status = 'ok') AND {where}
ORDER BY best_s LIMIT ?
"""

COLUMNS = ("context_key", "config_key", "phase", "spec_key", "spec_json", "m", "n", "k", "device_name", "device_cc",
           "sm_count", "arch", "driver_version", "nvrtc_version", "family", "family_version", "config_json",
           "status", "median_s", "samples_json", "protocol_json", "compile_s", "resources_json", "error", "created")


def default_db_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemmtune" / "tuning.sqlite"


@dataclass(frozen=True)
class ContextSummary:
    context: TuneContext
    trials: int
    failures: int
    best: TrialResult | None


@dataclass(frozen=True)
class Ranked:
    """A config ranked by its best known time, with the context it was measured in."""

    context: TuneContext
    result: TrialResult


class TuningDB:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Refuses (one line, file untouched) a directory, a non-SQLite file, another program's
        # database and one from a newer gemmtune; sets WAL mode and the schema otherwise.
        self.conn = connect(self.path, SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "TuningDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ------------------------------------------------------------------------------
    def record(self, context: TuneContext, result: TrialResult, phase: str = "search") -> None:
        """Store one trial and commit at once, so a kill loses at most the trial in flight."""
        self._insert(row_of(context, result, phase, time.time()), replace=phase != "search")

    def _insert(self, row: dict, replace: bool) -> bool:
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        marks = ", ".join("?" for _ in COLUMNS)
        with self.conn:
            cursor = self.conn.execute(f"{verb} INTO trials ({', '.join(COLUMNS)}) VALUES ({marks})",
                                       [row[c] for c in COLUMNS])
        return cursor.rowcount > 0

    # --- reading ------------------------------------------------------------------------------
    def results(self, context: TuneContext, phase: str = "search") -> list[TrialResult]:
        rows = self.conn.execute("SELECT * FROM trials WHERE context_key = ? AND phase = ? ORDER BY id",
                                 (context.key(), phase)).fetchall()
        return [result_of(row) for row in rows]

    def ranked(self, context: TuneContext, limit: int = 1) -> list[TrialResult]:
        return [r.result for r in self._ranked("s.context_key = ?", [context.key()], limit)]

    def best(self, context: TuneContext) -> TrialResult | None:
        found = self.ranked(context, 1)
        return found[0] if found else None

    def ranked_for_spec(self, spec: GemmSpec, family: str, limit: int = 1000) -> list[Ranked]:
        """Best-first configs for `spec` over every device and version in the database."""
        return self._ranked("s.spec_key = ? AND s.family = ?", [spec.key(), family], limit)

    def ranked_for_device(self, family: str, device_name: str, limit: int = 100000) -> list[Ranked]:
        return self._ranked("s.family = ? AND s.device_name = ?", [family, device_name], limit)

    def _ranked(self, where: str, params: list, limit: int) -> list[Ranked]:
        rows = self.conn.execute(RANKED.format(where=where), [*params, limit]).fetchall()
        return [Ranked(context_of(row), result_of(row, median=row["best_s"])) for row in rows]

    def contexts(self) -> list[ContextSummary]:
        rows = self.conn.execute(
            "SELECT context_key, COUNT(*) AS trials, SUM(status != 'ok') AS failures, MIN(id) AS first "
            "FROM trials WHERE phase = 'search' GROUP BY context_key ORDER BY first").fetchall()
        out = []
        for row in rows:
            sample = self.conn.execute("SELECT * FROM trials WHERE id = ?", (row["first"],)).fetchone()
            context = context_of(sample)
            out.append(ContextSummary(context, row["trials"], row["failures"] or 0, self.best(context)))
        return out

    # --- export / import ----------------------------------------------------------------------
    def export_jsonl(self, handle: IO[str]) -> int:
        count = 0
        for row in self.conn.execute("SELECT * FROM trials ORDER BY id"):
            handle.write(json.dumps(exported(row), sort_keys=True) + "\n")
            count += 1
        return count

    def import_jsonl(self, lines: Iterator[str] | IO[str], source: str = "the import") -> tuple[int, int]:
        """(added, skipped): a trial already present under its key is kept as it is. All or nothing:
        every line is checked before the first is written, and all are written in one transaction."""
        return self.insert_rows(parse_import(lines, source))

    def insert_rows(self, rows: list[dict]) -> tuple[int, int]:
        marks = ", ".join("?" for _ in COLUMNS)
        added = 0
        with self.conn:  # one transaction: a failure (or a kill) part-way leaves the database as it was
            for row in rows:
                cursor = self.conn.execute(f"INSERT OR IGNORE INTO trials ({', '.join(COLUMNS)}) VALUES ({marks})",
                                           [row[c] for c in COLUMNS])
                added += cursor.rowcount > 0
        return added, len(rows) - added

    def row_count(self) -> int:
        """Trials in the database, every spec and phase (cheap: no integrity check)."""
        return int(self.conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])

    def check(self) -> DatabaseReport:
        """Integrity, schema version and row counts (gemmtune db check)."""
        return check(self.conn, self.path)


# --- rows <-> records -----------------------------------------------------------------------------
def row_of(context: TuneContext, result: TrialResult, phase: str, created: float) -> dict:
    return _row(context, result.config.to_json(), phase, created, {
        "status": result.status.value, "median_s": result.median_s, "samples_json": json.dumps(list(result.samples_s)),
        "protocol_json": _dumps(result.protocol), "compile_s": result.compile_s,
        "resources_json": _dumps(result.resources), "error": result.error})


def _row(context: TuneContext, config_json: dict, phase: str, created: float, outcome: dict) -> dict:
    env, spec = context.environment, context.spec
    return {
        "context_key": context.key(), "config_key": stable_hash(config_json), "phase": phase,
        "spec_key": spec.key(), "spec_json": json.dumps(spec.to_json(), sort_keys=True), "m": spec.m, "n": spec.n,
        "k": spec.k, "device_name": env.device_name, "device_cc": env.cc, "sm_count": env.sm_count, "arch": env.arch,
        "driver_version": env.driver_version, "nvrtc_version": env.nvrtc_version, "family": context.family,
        "family_version": context.family_version, "config_json": json.dumps(config_json, sort_keys=True),
        "created": created, **outcome,
    }


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def context_of(row: sqlite3.Row) -> TuneContext:
    env = Environment(row["device_name"], row["device_cc"], row["sm_count"], row["arch"], row["driver_version"],
                      row["nvrtc_version"])
    return TuneContext(GemmSpec.from_json(json.loads(row["spec_json"])), env, row["family"], row["family_version"])


def result_of(row: sqlite3.Row, median: float | None = None) -> TrialResult:
    config = space_for(row["family"]).config_type.from_json(json.loads(row["config_json"]))
    return TrialResult(config, Status(row["status"]), row["median_s"] if median is None else median,
                       tuple(json.loads(row["samples_json"] or "[]")), row["compile_s"], _loads(row["resources_json"]),
                       _loads(row["protocol_json"]), row["error"] or "")


def exported(row: sqlite3.Row) -> dict:
    context = context_of(row)
    return {
        "spec": context.spec.to_json(), "environment": context.environment.to_json(), "family": context.family,
        "family_version": context.family_version, "config": json.loads(row["config_json"]), "phase": row["phase"],
        "status": row["status"], "median_s": row["median_s"], "samples_s": json.loads(row["samples_json"] or "[]"),
        "protocol": _loads(row["protocol_json"]), "compile_s": row["compile_s"],
        "resources": _loads(row["resources_json"]), "error": row["error"] or "", "created": row["created"],
    }


def parse_import(lines: Iterator[str] | IO[str], source: str = "the import") -> list[dict]:
    """Every non-blank line as a row; GemmtuneError naming `source` and the line for the first bad one."""
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            rows.append(imported(line, number, source))
    return rows


def imported(line: str, number: int, source: str = "the import") -> dict:
    try:
        data = json.loads(line)
        context = TuneContext(GemmSpec.from_json(data["spec"]), Environment.from_json(data["environment"]),
                              data["family"], data["family_version"])
        space_for(context.family).config_type.from_json(data["config"])  # readable back, or refused now
        outcome = {"status": Status(data["status"]).value, "median_s": data["median_s"],
                   "samples_json": json.dumps(data.get("samples_s", [])), "protocol_json": _dumps(data.get("protocol")),
                   "compile_s": data.get("compile_s"), "resources_json": _dumps(data.get("resources")),
                   "error": data.get("error", "")}
        return _row(context, data["config"], data["phase"], float(data["created"]), outcome)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputFileError(f"{source}: line {number} is not a gemmtune trial: {_short(exc)}") from None


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


# --- the question gemmtune.build asks -------------------------------------------------------------
def best_known_config(spec: GemmSpec, arch_or_device: Any, db_path: Path | str | None = None,
                      family: str | None = None) -> Any | None:
    """The config of best_known_trial, or None."""
    found = best_known_trial(spec, arch_or_device, db_path, family)
    return found.result.config if found else None


def best_known_trial(spec: GemmSpec, arch_or_device: Any, db_path: Path | str | None = None,
                     family: str | None = None) -> Ranked | None:
    """The fastest verified trial the database holds for `spec` and the current family version, or None.

    `arch_or_device` is an arch string ('sm_90': any device of that arch) or a DeviceInfo (that
    device by name, cc and SM count; an exact driver/NVRTC match wins, else any versions). `family`
    defaults to the registry's choice for the spec on that arch. Never creates a database.
    """
    path = Path(db_path) if db_path is not None else default_db_path()
    if not path.exists():
        return None
    if family is None:
        from ..kernels import family_for

        arch = arch_or_device if isinstance(arch_or_device, str) else arch_or_device.arch
        family = family_for(spec, arch).name
    with TuningDB(path) as db:
        ranked = db.ranked_for_spec(spec, family)
    # Replayed numbers are never advice for a real build, nor are times of another generator version.
    version = space_for(family).version
    measured = [r for r in ranked
                if r.context.environment.driver_version != SIMULATED and r.context.family_version == version]
    matching = [r for r in measured if _same_target(r.context.environment, arch_or_device)]
    if not isinstance(arch_or_device, str):
        exact = [r for r in matching if _same_versions(r.context.environment, arch_or_device)]
        matching = exact or matching
    return matching[0] if matching else None


def _same_target(env: Environment, arch_or_device: Any) -> bool:
    if isinstance(arch_or_device, str):
        return env.arch == arch_or_device
    device = Environment.from_device(arch_or_device, env.nvrtc_version)
    return (env.device_name, env.cc, env.sm_count) == (device.device_name, device.cc, device.sm_count)


def _same_versions(env: Environment, device: Any) -> bool:
    nvrtc = _current_nvrtc()
    return env.driver_version == str(device.driver_version) and nvrtc in (None, env.nvrtc_version)


def _current_nvrtc() -> str | None:
    from ..compiler import nvrtc_version

    try:
        return nvrtc_version()
    except GemmtuneError:  # NVRTC not installed: match on the driver alone
        return None
