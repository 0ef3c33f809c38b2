"""A bench run as a record: its spec, device, rows and skipped baselines, written as JSON or CSV.

One CSV line per row, with the spec and device on every line, so the files of several runs
concatenate into one table (``tail -n +2``)."""
from __future__ import annotations

import csv
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .baselines.base import Skipped
from .bench import BenchRow
from .spec import GemmSpec
from .timing import TimingProtocol

CUBLAS = "cuBLAS"
CSV_FIELDS = ("date", "device", "spec", "name", "config", "median_us", "tflops", "x_cublas", "rel_error", "status",
              "compile_s", "samples", "message")


@dataclass(frozen=True)
class BenchReport:
    spec: GemmSpec
    device: dict  # DeviceInfo.to_json()
    protocol: TimingProtocol
    date: str  # UTC, ISO 8601
    rows: tuple[BenchRow, ...]
    skipped: tuple[Skipped, ...] = ()

    def cublas_s(self) -> float | None:
        return next((r.median_s for r in self.rows if r.name == CUBLAS and r.median_s), None)

    def x_cublas(self, row: BenchRow) -> float | None:
        """cuBLAS time / this row's time: above 1 is faster than cuBLAS."""
        cublas = self.cublas_s()
        return cublas / row.median_s if cublas and row.median_s else None

    def to_json(self) -> dict:
        return {"date": self.date, "spec": self.spec.to_json(), "device": self.device,
                "protocol": self.protocol.to_json(), "rows": [r.to_json() for r in self.rows],
                "skipped": [s.to_json() for s in self.skipped]}

    def csv_rows(self) -> list[dict]:
        def num(value: float | None, scale: float = 1.0, digits: int = 4) -> str:
            return "" if value is None else f"{value * scale:.{digits}g}"

        return [{"date": self.date, "device": self.device.get("name", ""), "spec": self.spec.short(),
                 "name": r.name, "config": r.config, "median_us": num(r.median_s, 1e6, 6), "tflops": num(r.tflops),
                 "x_cublas": num(self.x_cublas(r)), "rel_error": num(r.rel_error, digits=3), "status": r.status,
                 "compile_s": num(r.compile_s, digits=3), "samples": r.samples, "message": r.message}
                for r in self.rows]


def _atomic_text(path: Path, write) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json(report: BenchReport, path: Path) -> None:
    _atomic_text(path, lambda handle: json.dump(report.to_json(), handle, indent=1))


def write_csv(report: BenchReport, path: Path) -> None:
    def write(handle) -> None:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(report.csv_rows())
    _atomic_text(path, write)
