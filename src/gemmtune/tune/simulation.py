"""The simulation runner: replays a recorded table config -> time (or failure) instead of a GPU.

Tables live in src/gemmtune/data/ as ``<family>_<spec slug>.csv`` (or ``.csv.gz``, gzip-compressed: the shipped
large ones, to keep the package small; one row per config: the config's
fields, median_s, status) beside a ``.json`` with the spec, device and versions they were recorded
on. Strategies run against them on any machine, so search behaviour is tested without a GPU.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..input_files import InputFileError, decode, read_bytes, read_json_object, read_text
from ..spec import GemmSpec
from .space import CandidateSet, space_for
from .trial import SIMULATED, Environment, Status, TrialResult, TuneContext

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class TableRow:
    status: Status
    median_s: float | None


@dataclass(frozen=True, eq=False)
class SimulationTable:
    family: str
    family_version: str
    spec: GemmSpec
    environment: Environment  # where the table was recorded
    rows: dict  # config -> TableRow
    meta: dict = field(default_factory=dict)

    @property
    def best_s(self) -> float:
        return min(r.median_s for r in self.rows.values() if r.status is Status.OK and r.median_s is not None)

    def context(self) -> TuneContext:
        return TuneContext(self.spec, self.environment, self.family, self.family_version)

    @staticmethod
    def from_results(context: TuneContext, results: Sequence[TrialResult],
                     meta: dict | None = None) -> "SimulationTable":
        rows = {r.config: TableRow(r.status, r.median_s if r.ok else None) for r in results}
        return SimulationTable(context.family, context.family_version, context.spec, context.environment, rows,
                               dict(meta or {}))

    def to_csv(self, path: Path) -> None:
        """Write the table (gzip-compressed where `path` ends in .gz) and its .json sidecar, each atomically."""
        config_type = space_for(self.family).config_type
        names = [f.name for f in fields(config_type)]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(names + ["median_s", "status"])
        for config, row in sorted(self.rows.items()):
            values = [int(v) if isinstance(v, bool) else v for v in (getattr(config, n) for n in names)]
            writer.writerow(values + ["" if row.median_s is None else f"{row.median_s:.6g}", row.status.value])
        body = text.getvalue().encode()
        _atomic_write(Path(path), gzip.compress(body, mtime=0) if _gzipped(Path(path)) else body)
        meta = {**self.meta, "family": self.family, "family_version": self.family_version,
                "spec": self.spec.to_json(), "environment": self.environment.to_json(), "rows": len(self.rows)}
        _atomic_write(sidecar(path), (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())

    @staticmethod
    def from_csv(path: Path) -> "SimulationTable":
        """The table at `path`; InputFileError (exit 2) naming the file — the CSV or its .json — when
        either is not what a table needs."""
        path = Path(path)
        meta = read_json_object(sidecar(path), TABLE_META)
        text = _table_text(path)
        try:
            return SimulationTable._read(meta, text)
        except (ValueError, KeyError, TypeError, AttributeError, csv.Error) as err:
            # SpecError is a ValueError: a table naming an unknown family or a bad spec lands here too
            raise InputFileError(f"{path} is not a simulation table: {type(err).__name__}: {err}") from None

    @staticmethod
    def _read(meta: dict, text: str) -> "SimulationTable":
        config_type = space_for(meta["family"]).config_type
        kinds = {f.name: f.type for f in fields(config_type)}
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = [n for n in ("median_s", "status") if n not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"the header has no {' or '.join(missing)} column")
        rows = {}
        for record in reader:
            config = config_type(**{n: _typed(kinds[n], record[n]) for n in kinds if n in record})
            median = float(record["median_s"]) if record["median_s"] else None
            rows[config] = TableRow(Status(record["status"]), median)
        if not rows:
            raise ValueError("it holds no rows")
        return SimulationTable(meta["family"], meta["family_version"], GemmSpec.from_json(meta["spec"]),
                               Environment.from_json(meta["environment"]), rows, meta)


TABLE_CSV = "a simulation table (CSV of configs, median_s and status)"
TABLE_META = "a simulation table's .json (spec, family and environment)"


def _typed(kind: Any, text: str) -> Any:
    """CSV text back to the config field's type (annotations are strings under postponed evaluation)."""
    name = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
    if name == "bool":
        return text.strip().lower() in ("1", "true")
    if name == "int":
        return int(text)
    if name == "float":
        return float(text)
    return text


def _gzipped(path: Path) -> bool:
    return path.suffix == ".gz"


def sidecar(path: Path | str) -> Path:
    """A table's .json: the CSV's name with .csv (or .csv.gz) replaced by .json."""
    path = Path(path)
    return (path.with_suffix("") if _gzipped(path) else path).with_suffix(".json")


def _table_text(path: Path) -> str:
    """A table's CSV text, decompressed where its name ends in .gz; InputFileError naming the file."""
    if not _gzipped(path):
        return read_text(path, TABLE_CSV)
    try:
        raw = gzip.decompress(read_bytes(path, TABLE_CSV))
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
        raise InputFileError(f"{path} is not {TABLE_CSV}: not gzip data ({err})") from None
    return decode(raw, str(path), TABLE_CSV)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; a table is package data anyone may read
    os.replace(tmp, path)


def recorded_spec(family: str, spec: GemmSpec) -> GemmSpec:
    """The spec a `family` table for `spec` is filed and matched under. simt tables of fp32 specs
    were recorded with math auto, when auto meant simt on every GPU; for simt, math simt is the same
    problem, so it reads them too (auto on sm_90 now takes 3xtf32 from M·N·K = 2^29)."""
    return replace(spec, math="auto") if family == "simt" and spec.math == "simt" else spec


def replays(table: SimulationTable, spec: GemmSpec) -> bool:
    """Whether `table` holds the trials of `spec` (recorded_spec)."""
    return recorded_spec(table.family, table.spec) == recorded_spec(table.family, spec)


def table_path(family: str, spec: GemmSpec, directory: Path = DATA_DIR) -> Path:
    """Where `family`'s table of `spec` is in `directory`: its .csv, or its .csv.gz where only that exists."""
    path = Path(directory) / f"{family}_{recorded_spec(family, spec).slug()}.csv"
    packed = path.with_name(path.name + ".gz")
    return packed if packed.exists() and not path.exists() else path


def recorded_tables(directory: Path = DATA_DIR) -> list[Path]:
    """Recorded tables shipped with the package (each CSV, plain or gzipped, with its .json sidecar)."""
    found = [*Path(directory).glob("*.csv"), *Path(directory).glob("*.csv.gz")]
    return sorted(p for p in found if sidecar(p).exists())


class SimulationRunner:
    """A Runner that looks results up instead of measuring. `delay_s` imitates measurement time;
    `log_path`, when given, gets one line per replayed config (tests check resume with it)."""

    def __init__(self, table: SimulationTable, delay_s: float = 0.0, log_path: Path | None = None):
        self.table, self.delay_s, self.log_path = table, delay_s, log_path
        env = table.environment
        # Never file replayed numbers under the real device's key in a shared database.
        self.environment = Environment(f"simulated {env.device_name}", env.cc, env.sm_count, env.arch,
                                       SIMULATED, env.nvrtc_version)

    def restrict(self, candidates: CandidateSet) -> CandidateSet:
        return candidates.subset(list(self.table.rows))

    def measurable(self, config: Any) -> bool:
        """Whether the table has the config (the tuner asks before measuring seeds outside its space)."""
        return config in self.table.rows

    def run(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        for config in configs:
            if self.delay_s:
                time.sleep(self.delay_s)
            yield self._lookup(config)

    def remeasure(self, configs: Sequence[Any]) -> Iterator[TrialResult]:
        return self.run(configs)

    def close(self) -> None:
        """Nothing to release; here so the tuner can treat every runner alike."""

    def _lookup(self, config: Any) -> TrialResult:
        row = self.table.rows.get(config)
        if self.log_path is not None:
            with open(self.log_path, "a") as log:
                log.write(config.key() + "\n")
        if row is None:
            return TrialResult(config, Status.ERROR, error="config not in the simulation table")
        if row.status is not Status.OK:
            return TrialResult(config, row.status, error=f"recorded as {row.status.value}")
        return TrialResult(config, Status.OK, row.median_s, samples_s=(row.median_s,))


def replay(strategy: Any, runner: SimulationRunner, budget: int, batch: int = 8,
           target_s: float | None = None) -> list[TrialResult]:
    """Ask/tell against the runner until `budget` trials, exhaustion, or a time <= target_s."""
    results: list[TrialResult] = []
    while len(results) < budget:
        configs = strategy.ask(min(batch, budget - len(results)))
        if not configs:
            break
        told = list(runner.run(configs))
        strategy.tell(told)
        results += told
        if target_s is not None and any(r.ok and r.median_s <= target_s for r in told):
            break
    return results


def trials_to_reach(results: Sequence[TrialResult], target_s: float) -> int | None:
    """1-based count of trials until the first time <= target_s; None if never reached."""
    for count, result in enumerate(results, start=1):
        if result.ok and result.median_s <= target_s:
            return count
    return None
