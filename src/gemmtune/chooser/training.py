"""Where the chooser's training rows come from: the tuning database, the shipped simulation tables,
and timing CSVs written by bench/collect_chooser_data.py. `gemmtune db train` calls `retrain`."""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import GemmtuneError
from ..input_files import InputFileError, decode, read_bytes
from ..kernels import get_family
from ..spec import GemmSpec
from .model import MODEL_PATH, ChooserModel, TrainingRow, load, save, train

CSV_FIELDS = ("family", "m", "n", "k", "layout", "dtype", "config", "median_s", "status", "gpu", "sm_count")


TIMING_CSV = "a chooser timing CSV (from bench/collect_chooser_data.py)"


def rows_from_csv(path: Path) -> list[TrainingRow]:
    """Successful rows of a collected timing CSV, plain or .gz (InputFileError, exit 2, naming the file
    when it is not one)."""
    reader = csv.DictReader(io.StringIO(_csv_text(Path(path)), newline=""))
    missing = [name for name in CSV_FIELDS if name not in (reader.fieldnames or ())]
    if missing:
        raise InputFileError(f"{path} is not {TIMING_CSV}: its header lacks {', '.join(missing)}")
    rows = []
    try:
        for number, record in enumerate(reader, start=2):
            if record["status"] != "ok" or not record["median_s"]:
                continue
            family = get_family(record["family"])
            spec = GemmSpec(int(record["m"]), int(record["n"]), int(record["k"]), record["layout"], record["dtype"])
            rows.append(TrainingRow(family.name, spec, family.config_from_json(json.loads(record["config"])),
                                    int(record["sm_count"]), float(record["median_s"]), str(path)))
    except (KeyError, ValueError, TypeError, AttributeError) as err:  # json.JSONDecodeError is a ValueError
        raise InputFileError(f"{path} is not {TIMING_CSV}: line {number}: {type(err).__name__}: {err}") from None
    return rows


def _csv_text(path: Path) -> str:
    """The CSV's text; shipped rows are gzipped to stay small."""
    raw = read_bytes(path, TIMING_CSV)
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise InputFileError(f"{path} is not {TIMING_CSV}: not a gzip file ({err})") from None
    return decode(raw, str(path), TIMING_CSV)


def rows_from_tables() -> list[TrainingRow]:
    """Every successful row of the simulation tables shipped in gemmtune/data."""
    from ..tune.simulation import SimulationTable, recorded_tables

    rows = []
    for path in recorded_tables():
        table = SimulationTable.from_csv(path)
        sm = table.environment.sm_count
        rows += [TrainingRow(table.family, table.spec, config, sm, row.median_s, path.name.removesuffix(".gz"))
                 for config, row in table.rows.items() if row.median_s is not None]
    return rows


def rows_from_db(path: Path) -> list[TrainingRow]:
    """Every successful trial of the tuning database at `path` (none when there is no file)."""
    from ..tune.db import TuningDB

    if not Path(path).exists():
        return []
    rows = []
    with TuningDB(path) as db:
        for summary in db.contexts():
            context = summary.context
            rows += [TrainingRow(context.family, context.spec, r.config, context.environment.sm_count, r.median_s,
                                 str(path)) for r in db.results(context) if r.ok and r.median_s]
    return rows


@dataclass(frozen=True)
class TrainingReport:
    rows: int
    per_family: dict
    sources: dict  # source -> rows
    path: Path


def collection_date(path: str) -> str:
    """The date a timing CSV was recorded on, from its name (bench/results/YYYY-MM-DD-...); the path
    itself where the name has none."""
    found = re.match(r"\d{4}-\d{2}-\d{2}", Path(path).name)
    return found.group(0) if found else path


def only_latest(rows: list[TrainingRow], csv_paths: list[Path], families: tuple[str, ...]) -> list[TrainingRow]:
    """The CSV and table rows, less those of each of `families` that do not come from the last CSV
    holding that family or another CSV of the same date (collection_date): the rounds that timed the
    family's candidates as they are now, where older rounds and the simulation tables timed kernels
    that have changed since."""
    sources = [str(p) for p in csv_paths]
    latest: dict[str, set[str]] = {}
    for family in families:
        holding = [s for s in sources if any(r.family == family and r.source == s for r in rows)]
        if not holding:
            raise GemmtuneError(f"--only-latest {family}: no --csv file holds {family} rows")
        date = collection_date(holding[-1])
        latest[family] = {s for s in holding if collection_date(s) == date}
    return [r for r in rows if r.family not in latest or r.source in latest[r.family]]


def retrain(csv_paths: list[Path], db_path: Path | None, out: Path = MODEL_PATH,
            use_tables: bool = True, latest_only: tuple[str, ...] = (),
            families: tuple[str, ...] = ()) -> tuple[ChooserModel, TrainingReport]:
    """Train on every source given and write the model to `out`; for the `latest_only` families, on the
    CSVs of the newest date holding their rows (only_latest) and the database's trials only. With `families`, only those are
    refitted and the model at `out` keeps its others as they are."""
    rows = [r for p in csv_paths for r in rows_from_csv(p)]
    rows += rows_from_tables() if use_tables else []
    rows = only_latest(rows, csv_paths, latest_only)
    rows += rows_from_db(db_path) if db_path is not None else []
    if families:
        rows = [r for r in rows if r.family in families]
    if not rows:
        raise GemmtuneError("no training rows: pass --csv files, keep the shipped tables, or tune something first")
    model = train(rows)
    rows = [r for r in rows if r.family in model.families]  # the report counts the rows a model was fitted on
    if families:
        kept = load(out)
        missing = [f for f in families if f not in model.families]
        if missing:
            raise GemmtuneError(f"no model trained for {', '.join(missing)}: fewer than 8 rows")
        model = ChooserModel({**(kept.families if kept else {}), **model.families},
                             tuple(sorted(set(kept.gpus if kept else ()) | set(model.gpus))))
    save(model, out)
    per_family, sources = {}, {}
    for r in rows:
        per_family[r.family] = per_family.get(r.family, 0) + 1
        sources[r.source] = sources.get(r.source, 0) + 1
    return model, TrainingReport(len(rows), per_family, sources, Path(out))
