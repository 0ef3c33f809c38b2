"""The tuning database as a file: opening it safely, its schema version, and `gemmtune db check`.

A path given as a database may be anything: a directory, a text file, another program's SQLite
database, a gemmtune database written by a newer release, or a damaged one. Each gives a one-line
DatabaseFileError naming the path, and nothing is written to the file before it is known to be a
gemmtune database this release can read (not even the switch to WAL mode, which rewrites the header).

The schema version lives in SQLite's own header field (PRAGMA user_version). Databases from before
it existed read 0 and hold the same trials table as version 1, so they are adopted as version 1.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import GemmtuneError

SCHEMA_VERSION = 1  # raise it with every change to the trials table, and migrate older files up


class DatabaseFileError(GemmtuneError):
    """A path that cannot serve as this gemmtune's tuning database, with the reason (bad input: exit 2)."""

    exit_code = 2


class DamagedDatabaseError(DatabaseFileError):
    """A gemmtune database SQLite cannot read through: what `db check` exists to find (exit 1, as for
    the damage its integrity check reports)."""

    exit_code = 1


SQLITE_HEADER = b"SQLite format 3\x00"


def check_readable(path: Path) -> None:
    """DatabaseFileError unless `path` is an existing gemmtune database this release reads, found
    without writing anything (for verbs that only read: an empty file or an empty SQLite database is
    refused here, where opening it for writing would adopt it)."""
    if not path.exists():
        raise DatabaseFileError(f"no tuning database at {path}")
    if path.is_dir():
        raise DatabaseFileError(f"{path} is a directory, not a tuning database")
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except OSError as err:
        raise DatabaseFileError(f"cannot read the tuning database {path}: {err.strerror or err}") from None
    if not head:
        raise DatabaseFileError(f"{path} is empty, not a tuning database")
    if head != SQLITE_HEADER:
        raise DatabaseFileError(f"{path} is not a usable tuning database: it is not an SQLite file")
    # Not mode=ro: a read-only connection to a WAL database leaves its -wal and -shm files behind.
    # Reading the header and sqlite_master writes nothing.
    try:
        conn = sqlite3.connect(str(path), timeout=30.0)
    except sqlite3.Error as err:
        raise DatabaseFileError(f"cannot open the tuning database {path}: {err}") from None
    try:
        _readable_version(conn, path)
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'trials'").fetchone():
            raise DatabaseFileError(f"{path} is an empty SQLite database, not a tuning database")
    finally:
        conn.close()


def connect(path: Path, schema: str) -> sqlite3.Connection:
    """An open connection to a gemmtune database at `path` (created when missing), in WAL mode."""
    if path.is_dir():
        raise DatabaseFileError(f"{path} is a directory, not a tuning database")
    try:
        conn = sqlite3.connect(str(path), timeout=30.0)
    except sqlite3.Error as err:
        raise DatabaseFileError(f"cannot open the tuning database {path}: {err}") from None
    try:
        version = _readable_version(conn, path)
        # WAL: readers never block the tuner's writes. synchronous=NORMAL keeps every committed trial
        # through a killed process (the OS holds the WAL); only a power cut can lose the last few.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(schema)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.close()
        raise
    conn.row_factory = sqlite3.Row
    return conn


def _readable_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version once it is known to be ours (or empty); raises DatabaseFileError."""
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as err:  # "file is not a database", "database disk image is malformed"
        raise DatabaseFileError(f"{path} is not a usable tuning database: {err}") from None
    if version > SCHEMA_VERSION:
        raise DatabaseFileError(f"{path} was written by a newer gemmtune (database schema {version}; this "
                                f"gemmtune reads up to {SCHEMA_VERSION}): upgrade gemmtune to use it")
    ours = {"trials", "sqlite_sequence"}
    if tables and "trials" not in tables:
        raise DatabaseFileError(f"{path} is an SQLite database but not a gemmtune one "
                                f"(its tables: {', '.join(sorted(tables - ours)) or 'none'})")
    return version


# --- gemmtune db check ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DatabaseReport:
    path: Path
    schema_version: int
    integrity: tuple[str, ...]  # ("ok",) when SQLite finds nothing wrong
    trials: int
    by_phase: tuple[tuple[str, int], ...]
    by_status: tuple[tuple[str, int], ...]
    contexts: int
    duplicates: int  # (context, config, phase) keys stored more than once: 0 unless the schema broke

    @property
    def ok(self) -> bool:
        return self.integrity == ("ok",) and self.duplicates == 0

    def lines(self) -> list[str]:
        phases = ", ".join(f"{n} {p}" for p, n in self.by_phase) or "none"
        statuses = ", ".join(f"{n} {s}" for s, n in self.by_status) or "none"
        integrity = "ok" if self.integrity == ("ok",) else "; ".join(self.integrity[:5])
        return [f"database: {self.path}", f"schema version: {self.schema_version} (this gemmtune: {SCHEMA_VERSION})",
                f"integrity: {integrity}", f"trials: {self.trials} ({phases}) in {self.contexts} spec/GPU contexts",
                f"by status: {statuses}", f"duplicate keys: {self.duplicates}"]


def check(conn: sqlite3.Connection, path: Path) -> DatabaseReport:
    """SQLite's integrity check and the row counts; raises DatabaseFileError when it cannot even read."""
    try:
        integrity = tuple(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        trials = int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
        by_phase = _counts(conn, "phase")
        by_status = _counts(conn, "status")
        contexts = int(conn.execute("SELECT COUNT(DISTINCT context_key) FROM trials").fetchone()[0])
        duplicates = int(conn.execute(
            "SELECT COUNT(*) FROM (SELECT 1 FROM trials GROUP BY context_key, config_key, phase "
            "HAVING COUNT(*) > 1)").fetchone()[0])
    except sqlite3.DatabaseError as err:
        raise DamagedDatabaseError(f"{path} is damaged: {err}") from None
    return DatabaseReport(path, version, integrity, trials, by_phase, by_status, contexts, duplicates)


def _counts(conn: sqlite3.Connection, column: str) -> tuple[tuple[str, int], ...]:
    rows = conn.execute(f"SELECT {column}, COUNT(*) FROM trials GROUP BY {column} ORDER BY {column}")
    return tuple((str(value), int(count)) for value, count in rows)
