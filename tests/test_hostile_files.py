"""Hostile files: whatever a user passes as a database, an import or a simulation table, the answer
is one line naming the file, a non-zero exit, and the existing database byte for byte as it was."""
from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from gemmtune.cli import main
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.db_file import SCHEMA_VERSION
from gemmtune.tune.simulation import table_path
from test_tune_db import FAST, SLOW, context, ok
from test_tune_simulation import synthetic_table

BINARY = bytes(range(256)) * 8  # NUL bytes and invalid UTF-8
LATIN1 = "spec,café\n1,2\n".encode("latin-1")  # text, but not UTF-8


def fingerprint(path: Path) -> str:
    """The bytes of the database and of any -wal/-shm beside it (a directory: its listing)."""
    if path.is_dir():
        return "dir:" + ",".join(sorted(p.name for p in path.iterdir()))
    parts = [path.read_bytes() if path.exists() else b"<none>"]
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        parts.append(side.read_bytes() if side.exists() else b"<none>")
    return hashlib.sha256(b"|".join(parts)).hexdigest()


def gemmtune_db(path: Path) -> Path:
    with TuningDB(path) as db:
        db.record(context(), ok(FAST, 1e-3))
        db.record(context(), ok(SLOW, 2e-3))
    return path


def one_line_failure(argv: list[str], capsys: pytest.CaptureFixture, *names: Path) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code != 0, argv
    assert len(err.splitlines()) == 1 and err.startswith("gemmtune: "), err
    assert "Traceback" not in err
    for name in names:
        assert str(name) in err, err
    return err


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = table_path("simt", GemmSpec(1024, 1024, 1024), tmp_path_factory.mktemp("tables"))
    synthetic_table(GemmSpec(1024, 1024, 1024), rows=60, seed=3).to_csv(path)
    return path


@pytest.fixture
def trials_jsonl(tmp_path: Path) -> Path:
    source = gemmtune_db(tmp_path / "source.sqlite")
    out = tmp_path / "trials.jsonl"
    assert main(["db", "export", str(out), "--db", str(source)]) == 0
    return out


# --- the database path itself -------------------------------------------------------------------------
def not_sqlite(path: Path) -> Path:
    path.write_text("this is a shopping list, not a database\n" * 50)
    return path


def a_directory(path: Path) -> Path:
    path.mkdir()
    (path / "keep").write_text("x")
    return path


def newer_gemmtune(path: Path) -> Path:
    gemmtune_db(path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    return path


def another_programs_db(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT, minutes INTEGER)")
        conn.execute("INSERT INTO recipes VALUES ('soup', 40)")
    conn.close()
    return path


def binary_file(path: Path) -> Path:
    path.write_bytes(BINARY)
    return path


BAD_DATABASES = {"not sqlite": (not_sqlite, "not a usable tuning database"),
                 "a directory": (a_directory, "is a directory"),
                 "newer gemmtune": (newer_gemmtune, "newer gemmtune"),
                 "another program's": (another_programs_db, "not a gemmtune one"),
                 "binary": (binary_file, "not a usable tuning database")}


@pytest.mark.parametrize("case", sorted(BAD_DATABASES))
def test_a_bad_database_path_is_one_line_and_left_alone(case: str, tmp_path: Path, table_csv: Path,
                                                        trials_jsonl: Path, capsys: pytest.CaptureFixture) -> None:
    make, reason = BAD_DATABASES[case]
    path = make(tmp_path / "tuning.sqlite")
    before = fingerprint(path)
    verbs = [["db", "list"], ["db", "best", "MNK=1024"], ["db", "check"], ["db", "import", str(trials_jsonl)],
             ["db", "export", str(tmp_path / "out.jsonl")],
             ["tune", "MNK=1024", "t=4", "--simulate", str(table_csv), "--top", "0"]]
    for verb in verbs:
        err = one_line_failure([*verb, "--db", str(path)], capsys, path)
        assert reason in err, (verb, err)
        assert fingerprint(path) == before, verb


# --- files given to `db import` ---------------------------------------------------------------------------
def test_import_of_a_binary_or_non_utf8_file_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = gemmtune_db(tmp_path / "tuning.sqlite")
    before = fingerprint(db)
    for name, data, reason in (("blob.bin", BINARY, "not UTF-8"), ("latin.jsonl", LATIN1, "not UTF-8"),
                               ("nul.jsonl", b'{"a": 1}\n\x00\x00\x00\n', "NUL bytes")):
        bad = tmp_path / name
        bad.write_bytes(data)
        err = one_line_failure(["db", "import", str(bad), "--db", str(db)], capsys, bad)
        assert reason in err
        assert fingerprint(db) == before, name


def test_import_is_all_or_nothing(tmp_path: Path, trials_jsonl: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuning.sqlite"
    with TuningDB(db) as handle:
        handle.record(context(spec=GemmSpec(64, 64, 64)), ok(FAST, 1e-5))
    before = fingerprint(db)
    good = trials_jsonl.read_text().splitlines()
    assert len(good) == 2
    wrong_family = json.dumps({**json.loads(good[0]), "family": "no-such-family"})
    for bad_line in ("{\"spec\": 1}", "[1, 2, 3]", wrong_family, "not json at all"):
        mixed = tmp_path / "mixed.jsonl"
        mixed.write_text("\n".join([good[0], good[1], bad_line]) + "\n")
        err = one_line_failure(["db", "import", str(mixed), "--db", str(db)], capsys, mixed)
        assert "line 3" in err
        assert fingerprint(db) == before, bad_line
    with TuningDB(db) as handle:
        assert handle.check().trials == 1


def test_a_bad_import_never_creates_a_database(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "blob.bin"
    bad.write_bytes(BINARY)
    one_line_failure(["db", "import", str(bad), "--db", str(tmp_path / "new.sqlite")], capsys, bad)
    assert not (tmp_path / "new.sqlite").exists()


# --- files given to `tune --simulate` ----------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["binary csv", "non-utf8 csv", "binary json", "garbage json"])
def test_simulate_with_a_hostile_table_changes_nothing(damage: str, tmp_path: Path, table_csv: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    csv_path = tmp_path / table_csv.name
    shutil.copy(table_csv, csv_path)
    shutil.copy(table_csv.with_suffix(".json"), csv_path.with_suffix(".json"))
    target = csv_path if "csv" in damage else csv_path.with_suffix(".json")
    target.write_bytes({"binary": BINARY, "non-utf8": LATIN1, "garbage": b"{ not json"}[damage.split()[0]])
    db = gemmtune_db(tmp_path / "tuning.sqlite")
    before = fingerprint(db)
    err = one_line_failure(["tune", "MNK=1024", "t=4", "--simulate", str(csv_path), "--db", str(db)], capsys)
    assert str(csv_path.with_suffix("")) in err  # names the table (its .csv or its .json)
    assert fingerprint(db) == before


# --- db check ---------------------------------------------------------------------------------------------
def test_db_check_reports_version_counts_and_integrity(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = gemmtune_db(tmp_path / "tuning.sqlite")
    assert main(["db", "check", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"schema version: {SCHEMA_VERSION}" in out and "integrity: ok" in out
    assert "trials: 2 (2 search) in 1 spec/GPU contexts" in out and "duplicate keys: 0" in out


def test_db_check_catches_a_damaged_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = tmp_path / "tuning.sqlite"
    with TuningDB(db) as handle:
        for m in range(8, 400):
            handle.record(context(spec=GemmSpec(m, 64, 64)), ok(FAST, 1e-5 * m))
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    data[3 * page:5 * page] = BINARY[: 2 * page] * (2 * page // len(BINARY[: 2 * page]))  # two pages of garbage
    db.write_bytes(bytes(data))
    code = main(["db", "check", "--db", str(db)])
    captured = capsys.readouterr()
    assert code == 1
    assert len(captured.err.strip().splitlines()) == 1 and str(db) in captured.err


def test_a_database_from_before_versions_is_adopted(tmp_path: Path) -> None:
    db = gemmtune_db(tmp_path / "tuning.sqlite")
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    with TuningDB(db) as handle:
        assert handle.check().schema_version == SCHEMA_VERSION and handle.check().trials == 2


# --- every verb that reads a file × every kind of hostile file ---------------------------------------------
def _cut_json(path: Path) -> None:
    path.write_text('{"spec": {"m": 1024, "n": 1024, "k": 10')  # a recording cut off mid-write


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside.json").write_text("{}")


HOSTILE = {
    "binary": lambda path: path.write_bytes(BINARY),
    "truncated json": _cut_json,
    "empty": lambda path: path.write_bytes(b""),
    # valid JSON of the wrong shape: the keys a reader looks for first, holding the wrong types
    "wrong schema": lambda path: path.write_text('{"pairs": 3, "cublas": "fast", "spec": [1], "device": null, '
                                                 '"family": 7, "entries": "none", "format": 2}\n'),
    "json list": lambda path: path.write_text("[1, 2, 3]\n"),
    "directory": _directory,
    "missing": lambda path: None,
}


@dataclass(frozen=True)
class FileVerb:
    """A verb reading the file `name` (made hostile in a fresh folder) with `argv(path, folder)`."""

    name: str
    argv: Callable[[Path, Path], list[str]]
    setup: Callable[[Path, Path, Path], None] = lambda folder, table, trials: None
    skip: tuple[str, ...] = ()  # hostile kinds that are ordinary input for this verb (a database it creates)


def _good_table(folder: Path, table: Path, _trials: Path) -> None:
    shutil.copy(table, folder / "table.csv")
    shutil.copy(table.with_suffix(".json"), folder / "table.json")


def _sidecar_only(folder: Path, table: Path, _trials: Path) -> None:
    shutil.copy(table, folder / "table.csv")


def _csv_only(folder: Path, table: Path, _trials: Path) -> None:
    shutil.copy(table.with_suffix(".json"), folder / "table.json")


def _good_db(folder: Path, _table: Path, _trials: Path) -> None:
    gemmtune_db(folder / "good.sqlite")


SIZES = ["MNK=1024"]
FILE_VERBS = {
    "plot ladder": FileVerb("rec.json", lambda p, d: ["plot", "ladder", str(p), "--out", str(d / "o")]),
    "plot roofline": FileVerb("rec.json", lambda p, d: ["plot", "roofline", str(p), "--out", str(d / "o")]),
    "plot convergence": FileVerb("t.sqlite", lambda p, d: ["plot", "convergence", "--db", str(p), "--out", str(d / "o")]),
    "db import": FileVerb("trials.jsonl", lambda p, d: ["db", "import", str(p), "--db", str(d / "new.sqlite")]),
    "db check": FileVerb("t.sqlite", lambda p, d: ["db", "check", "--db", str(p)]),
    "db list": FileVerb("t.sqlite", lambda p, d: ["db", "list", "--db", str(p)]),
    "db best": FileVerb("t.sqlite", lambda p, d: ["db", "best", *SIZES, "--db", str(p)]),
    "db export": FileVerb("t.sqlite", lambda p, d: ["db", "export", str(d / "out.jsonl"), "--db", str(p)]),
    "db train --db": FileVerb("t.sqlite", lambda p, d: ["db", "train", "--db", str(p), "--no-tables",
                                                         "--out", str(d / "model.json")]),
    "db train --csv": FileVerb("rows.csv", lambda p, d: ["db", "train", "--csv", str(p), "--db", str(d / "good.sqlite"),
                                                          "--no-tables", "--out", str(d / "model.json")], _good_db),
    "tune --simulate (csv)": FileVerb("table.csv", lambda p, d: ["tune", *SIZES, "t=4", "--simulate", str(p),
                                                                  "--top", "0", "--db", str(d / "new.sqlite")],
                                      _csv_only),
    "tune --simulate (json)": FileVerb("table.json", lambda p, d: ["tune", *SIZES, "t=4", "--simulate",
                                                                    str(d / "table.csv"), "--top", "0",
                                                                    "--db", str(d / "new.sqlite")], _sidecar_only),
    "tune --db": FileVerb("t.sqlite", lambda p, d: ["tune", *SIZES, "t=4", "--simulate", str(d / "table.csv"),
                                                    "--top", "0", "--db", str(p)], _good_table,
                          skip=("empty", "missing")),  # tune starts a new database there
    "show --db": FileVerb("t.sqlite", lambda p, d: ["show", *SIZES, "--no-code", "--arch", "sm_90", "--db", str(p)]),
    "export --db": FileVerb("t.sqlite", lambda p, d: ["export", *SIZES, "--arch", "sm_90", "--out", str(d / "k"),
                                                      "--db", str(p)]),
    "profile --db": FileVerb("t.sqlite", lambda p, d: ["profile", *SIZES, "--db", str(p)]),
    "bench --db": FileVerb("t.sqlite", lambda p, d: ["bench", *SIZES, "--db", str(p)]),
    "shapes show": FileVerb("workload.json", lambda p, d: ["shapes", "show", str(p)]),
    "tune-many (json)": FileVerb("workload.json", lambda p, d: ["tune-many", str(p), "--trials", "4",
                                                               "--db", str(d / "new.sqlite")]),
    "tune-many (csv)": FileVerb("workload.csv", lambda p, d: ["tune-many", str(p), "--trials", "4",
                                                             "--db", str(d / "new.sqlite")]),
    "tvm show-cuda --trace": FileVerb("best_trace.py", lambda p, d: ["tvm", "show-cuda", "MNK=64", "--arch", "sm_90",
                                                                   "--schedule", "tuned", "--trace", str(p)]),
    "export --backend tvm --apply-trace": FileVerb("best_trace.py", lambda p, d: [
        "export", "MNK=64", "--arch", "sm_90", "--backend", "tvm", "--schedule", "tuned", "--apply-trace", str(p),
        "--out", str(d / "k")]),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("verb", list(FILE_VERBS))
def test_every_file_reader_answers_a_hostile_file_in_one_line(verb: str, kind: str, tmp_path: Path,
                                                               table_csv: Path, trials_jsonl: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    case = FILE_VERBS[verb]
    if "tvm" in verb:
        pytest.importorskip("tvm")
    if kind in case.skip:
        pytest.skip(f"{verb} takes a {kind} path as a new file")
    folder = tmp_path / "work"
    folder.mkdir()
    case.setup(folder, table_csv, trials_jsonl)
    path = folder / case.name
    HOSTILE[kind](path)
    before = fingerprint(path) if path.exists() else None
    code = main(case.argv(path, folder))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1 and lines[0].startswith("gemmtune: "), lines
    assert code == 2, (code, lines)
    assert str(path) in lines[0] or str(path.with_suffix("")) in lines[0], lines  # names the file
    assert (fingerprint(path) if path.exists() else None) == before  # a reader never writes what it reads


# --- an export folder's kernel.json (gemmtune.load reads it first) -------------------------------------------
@pytest.fixture(scope="module")
def export_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("export") / "k"
    assert main(["export", "MNK=64", "--arch", "sm_90", "--out", str(folder), "--config", "naive"]) == 0
    return folder


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_manifest_is_one_line(kind: str, export_folder: Path, tmp_path: Path) -> None:
    from gemmtune.export.loader import compiled_from_folder
    from gemmtune.export.manifest import MANIFEST, read_manifest
    from gemmtune.input_files import InputFileError

    folder = tmp_path / "k"
    shutil.copytree(export_folder, folder)
    (folder / MANIFEST).unlink()
    HOSTILE[kind](folder / MANIFEST)
    for reader in (read_manifest, compiled_from_folder):
        with pytest.raises(InputFileError) as caught:
            reader(folder)
        assert len(str(caught.value).splitlines()) == 1 and str(folder) in str(caught.value)
