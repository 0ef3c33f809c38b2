"""Verb `db`: list the tuned specs, show the best config, export and import trials as JSON lines,
check the file. `list` and `best --grouped` show the grouped GEMM tunes (the grouped_trials table) too, one line
per grouped spec key (tune/grouped_records.GroupedKey) and GPU."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GemmtuneError
from ..build import target_arch
from .common import (add_db_argument, add_family_argument, add_spec_arguments, console, family_from_args,
                     spec_from_args)

if TYPE_CHECKING:
    from ..tune.db import TuningDB


def register(subparsers) -> None:
    db = subparsers.add_parser("db", help="query the tuning database: list, best, export, import, check",
                               description="The tuning database holds every trial of every tune.")
    verbs = db.add_subparsers(dest="db_verb", metavar="ACTION", required=True)

    listing = verbs.add_parser("list", help="every tuned spec and GPU with its trial count and best result")
    add_db_argument(listing)
    listing.set_defaults(run=run_list)

    best = verbs.add_parser("best", help="the best known config for a spec, per GPU (--grouped: per grouped key)")
    add_spec_arguments(best)
    add_db_argument(best)
    add_family_argument(best)
    best.add_argument("--json", action="store_true", help="print the winning config as JSON only")
    best.add_argument("--grouped", action="store_true",
                      help="the grouped GEMM tunes instead: the best config of each grouped spec key and GPU "
                           "(only those of -n/-k/--dtype where given; no M needed)")
    best.set_defaults(run=run_best)

    export = verbs.add_parser("export", help="write every trial as JSON lines")
    export.add_argument("file", help="output file, or - for stdout")
    add_db_argument(export)
    export.set_defaults(run=run_export)

    load = verbs.add_parser("import", help="add trials from JSON lines (trials already present are kept)",
                            description="Every line is checked before any is written; then all are added in "
                                        "one transaction, so a bad file leaves the database as it was.")
    load.add_argument("file", help="input file, or - for stdin")
    add_db_argument(load)
    load.set_defaults(run=run_import)

    train = verbs.add_parser("train", help="retrain the config chooser on the database, the shipped tables and CSVs",
                             description="Fits the chooser's model (boosted trees over wave quantization, tile "
                                         "waste, occupancy and bytes per FLOP) on every successful trial of the "
                                         "tuning database, the shipped simulation tables and the timing CSVs "
                                         "given, and writes it where build/show/bench/export read it.")
    add_db_argument(train)
    train.add_argument("--csv", type=Path, action="append", default=[], metavar="FILE",
                       help="a timing CSV from bench/collect_chooser_data.py (repeatable)")
    train.add_argument("--no-tables", action="store_true", help="leave out the shipped simulation tables")
    train.add_argument("--only-latest", action="append", default=[], metavar="FAMILY",
                       help="train FAMILY on the --csv files of the newest date (YYYY-MM-DD in the file name) "
                            "holding its rows (and the database) only: the older files and the tables timed "
                            "kernels that have changed since (repeatable)")
    train.add_argument("--family", action="append", default=[], metavar="FAMILY",
                       help="refit FAMILY only; the model file keeps its other families as they are (repeatable)")
    train.add_argument("--out", type=Path, help="model file (default: the shipped gemmtune/data/chooser_model.json)")
    train.set_defaults(run=run_train)

    check = verbs.add_parser("check", help="integrity check, schema version and row counts of the database",
                             description="Run SQLite's integrity check and count the trials; exit 1 when the "
                                         "database is damaged or holds duplicate keys.")
    add_db_argument(check)
    check.set_defaults(run=run_check)


def _open(path: Path | None, must_exist: bool = True) -> "TuningDB":
    """The database to read (must_exist: refused in one line, untouched, unless it is a gemmtune one)
    or to write (created when missing)."""
    from ..tune.db import TuningDB, default_db_path
    from ..tune.db_file import DatabaseFileError, check_readable

    path = path or default_db_path()
    if must_exist and not path.exists():
        raise DatabaseFileError(f"no tuning database at {path}: run 'gemmtune tune' first or pass --db")
    if must_exist:
        check_readable(path)
    return TuningDB(path)


@dataclass(frozen=True)
class GroupedSummary:
    """The tunes of one grouped spec key on one GPU and versions: trials, failures, the fastest by time per FLOP
    (tunes of one key ran on different group sizes) with its FLOPs."""

    key: Any  # tune.grouped_records.GroupedKey
    device_name: str
    driver_version: str
    nvrtc_version: str
    family_version: str
    trials: int
    failures: int
    best: Any  # GroupedTrial or None
    best_flops: float

    @property
    def tflops(self) -> float | None:
        return self.best_flops / self.best.median_s / 1e12 if self.best is not None else None


def grouped_summaries(path: Path) -> list[GroupedSummary]:
    """Every grouped key's tunes in the database at `path`, per GPU and versions, in the order first tuned."""
    from ..tune.grouped_db import GroupedTuningDB
    from ..tune.grouped_records import GroupedKey

    groups: dict[tuple, list] = {}
    with GroupedTuningDB(path) as db:
        for where, key, flops, trial in db.every_trial():
            groups.setdefault(where, []).append((key, flops, trial))
    out = []
    for (_, device, driver, nvrtc, version), rows in groups.items():
        ok = [(flops, trial) for _, flops, trial in rows if trial.ok and flops]
        flops, best = min(ok, key=lambda pair: pair[1].median_s / pair[0]) if ok else (0.0, None)
        out.append(GroupedSummary(GroupedKey(**rows[0][0]), device, driver or "", nvrtc or "", version,
                                  len(rows), sum(not t.ok for _, _, t in rows), best, flops))
    return out


def _config_label(config: Any) -> str:
    from .grouped_cmds import config_label

    return config_label(config)


def run_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    with _open(args.db) as db:
        summaries = db.contexts()
        grouped = grouped_summaries(db.path)
    table = Table(title="tuned specs")
    for column in ("spec", "GPU", "driver / NVRTC", "family", "trials", "failed", "best", "config"):
        table.add_column(column, justify="right" if column in ("trials", "failed", "best") else "left",
                         no_wrap=column == "spec")
    for s in summaries:
        env, best = s.context.environment, s.best
        rate = f"{best.tflops(s.context.spec):.2f} TFLOP/s" if best else "—"
        table.add_row(s.context.spec.short(), env.device_name, f"{env.driver_version} / {env.nvrtc_version}",
                      f"{s.context.family} v{s.context.family_version}", str(s.trials), str(s.failures), rate,
                      best.config.describe() if best else "—")
    for g in grouped:
        versus = f", {g.best.speedup:.2f}x torch" if g.best is not None and g.best.speedup else ""
        table.add_row(f"grouped {g.key.describe()}", g.device_name, f"{g.driver_version} / {g.nvrtc_version}",
                      f"grouped v{g.family_version}", str(g.trials), str(g.failures),
                      f"{g.tflops:.2f} TFLOP/s{versus}" if g.best is not None else "—",
                      _config_label(g.best.config) if g.best is not None else "—")
    console().print(table)
    return 0


def _int_or_none(text: Any) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise GemmtuneError(f"db best --grouped: -n/-k take integers, not {text!r}") from None


def run_best_grouped(args: argparse.Namespace) -> int:
    """One line per grouped key and GPU with its fastest config (filtered by -n, -k and a non-default --dtype)."""
    n, k = _int_or_none(args.n), _int_or_none(args.k)
    dtype = args.dtype if args.dtype != "fp32" else None  # fp32: the flag's default, never a grouped dtype
    with _open(args.db) as db:
        found = [g for g in grouped_summaries(db.path) if g.best is not None and (n is None or g.key.n == n)
                 and (k is None or g.key.k == k) and (dtype is None or g.key.dtype == dtype)]
    if not found:
        raise GemmtuneError("the database has no successful grouped trial" + (" for those sizes" if n or k or dtype else ""))
    for g in found:
        config = json.dumps(g.best.config.to_json(), sort_keys=True)
        if args.json:
            print(config)
            continue
        versus = f", {g.best.speedup:.2f}x torch._grouped_mm" if g.best.speedup else ""
        print(f"{g.key.describe()} on {g.device_name}: {g.best.median_s * 1e6:.1f} µs, {g.tflops:.2f} TFLOP/s"
              f"{versus}  {_config_label(g.best.config)}\n  {config}")
    return 0


def run_best(args: argparse.Namespace) -> int:
    if args.grouped:
        return run_best_grouped(args)
    spec = spec_from_args(args)
    family = family_from_args(args, spec, target_arch(None)).name  # bad input first, whatever the database
    with _open(args.db) as db:
        ranked = db.ranked_for_spec(spec, family)
    per_gpu = {}
    for entry in ranked:  # best first, so the first per GPU wins
        per_gpu.setdefault(entry.context.environment.device_name, entry)
    if not per_gpu:
        raise GemmtuneError(f"the database has no successful trial for {spec.short()}")
    if args.json:
        print(json.dumps(ranked[0].result.config.to_json(), sort_keys=True))
        return 0
    for device, entry in per_gpu.items():
        result = entry.result
        print(f"{device}: {result.median_s * 1e6:.1f} µs, {result.tflops(spec):.2f} TFLOP/s  "
              f"{result.config.describe()}\n  {json.dumps(result.config.to_json(), sort_keys=True)}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    with _open(args.db) as db:
        if args.file == "-":
            count = db.export_jsonl(sys.stdout)
        else:
            with open(args.file, "w") as handle:
                count = db.export_jsonl(handle)
    print(f"exported {count} trials", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from ..tune.db import parse_import

    from ..input_files import read_bytes

    name = "standard input" if args.file == "-" else args.file
    raw = sys.stdin.buffer.read() if args.file == "-" else read_bytes(Path(args.file), TRIALS)
    rows = parse_import(import_text(raw, name).splitlines(), name)  # before the database is opened
    with _open(args.db, must_exist=False) as db:
        added, skipped = db.insert_rows(rows)
    print(f"imported {added} trials ({skipped} already present)", file=sys.stderr)
    return 0


TRIALS = "a JSON-lines text file of trials (from `gemmtune db export`)"


def import_text(raw: bytes, name: str) -> str:
    """The bytes of a JSON-lines file as text; InputFileError (exit 2) naming the file when they are
    not, or hold no trial at all."""
    from ..input_files import decode

    return decode(raw, name, TRIALS)


def run_check(args: argparse.Namespace) -> int:
    with _open(args.db) as db:
        report = db.check()
    for line in report.lines():
        print(line)
    if not report.ok:
        print(f"gemmtune: {report.path} failed its check", file=sys.stderr)
        return 1
    return 0


def run_train(args: argparse.Namespace) -> int:
    from ..chooser.model import MODEL_PATH
    from ..chooser.training import retrain
    from ..tune.db import default_db_path

    if args.db is not None:  # named: it must be a database (the default one may be absent)
        from ..tune.db_file import check_readable

        check_readable(args.db)
    model, report = retrain(args.csv, args.db or default_db_path(), args.out or MODEL_PATH,
                            use_tables=not args.no_tables, latest_only=tuple(args.only_latest), families=tuple(args.family))
    families = ", ".join(f"{name}: {count} rows" for name, count in sorted(report.per_family.items()))
    print(f"trained the chooser on {report.rows} rows ({families}); wrote {report.path}")
    for name, fam in sorted(model.families.items()):
        print(f"  {name}: {len(fam.trees)} trees over {len(fam.feature_names)} features, {fam.shapes} shapes")
    return 0
