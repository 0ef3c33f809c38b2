"""A workload: the GEMMs a model runs, each with how often it runs and its share of GEMM time.

`gemmtune tune-many WORKLOAD` tunes every shape of one under a total budget split by those shares;
`gemmtune shapes from-torch` writes one from a torch model (capture.py). On disk it is JSON

    {"shapes": [{"m": 4096, "n": 11008, "k": 4096, "layout": "nt", "dtype": "bf16",
                 "epilogue": "none", "count": 32, "share": 0.21}, ...]}

or CSV with the header `m,n,k,layout,dtype,epilogue,count,share` (epilogue, count and share may be
left empty: no epilogue, once, and a share by a roofline estimate × count). Optional fields: ``out_dtype``,
and ``gated`` (JSON true, CSV 1 or true) for a gated (SwiGLU) GEMM, N its output width (GemmSpec.gated); a
shape's JSON is its spec's, so optimize()'s fused SwiGLU sites round-trip. A bad file is refused with one line
naming it (InputFileError, exit status 2).
"""
from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import GemmtuneError
from .input_files import InputFileError, json_kind, read_json_object, read_text
from .spec import GemmSpec

FIELDS = ("m", "n", "k", "layout", "dtype", "epilogue", "count", "share")
OPTIONAL_FIELDS = ("out_dtype", "gated")  # left out of files whose shapes do not need them
GATED_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False, "": False}
# A rough roofline for shares nobody measured (an H100's order of magnitude; only ratios matter):
# decode-sized GEMMs stream their weights, so bytes over bandwidth, not FLOPs, set their time.
PEAK_FLOPS = {"fp32": 50e12, "tf32": 400e12, "fp16": 800e12, "bf16": 800e12}
BANDWIDTH = 3.0e12  # bytes/s


def estimated_seconds(spec: GemmSpec) -> float:
    """The larger of the spec's FLOPs over the dtype's peak and its fewest bytes over bandwidth."""
    return max(spec.flops / PEAK_FLOPS[spec.dtype], spec.min_bytes / BANDWIDTH)
WHAT = "a workload (JSON with a 'shapes' list, or CSV with columns m,n,k,layout,dtype[,epilogue,count,share])"


@dataclass(frozen=True)
class WorkloadShape:
    """One GEMM of the workload: `count` runs of it per model step; `share` of the GEMM time (None:
    estimated by a roofline × count)."""

    spec: GemmSpec
    count: int = 1
    share: float | None = None

    def to_json(self) -> dict:
        data = {**self.spec.to_json(), "count": self.count}
        return data if self.share is None else {**data, "share": self.share}


@dataclass(frozen=True)
class Workload:
    shapes: tuple[WorkloadShape, ...]

    def shares(self) -> list[float]:
        """Each shape's share of the workload's GEMM time, summing to 1: the given shares where every
        shape has one, else the roofline estimate × count."""
        if all(s.share is not None for s in self.shapes):
            weights = [float(s.share) for s in self.shapes]
        else:
            weights = [estimated_seconds(s.spec) * s.count for s in self.shapes]
        total = sum(weights)
        return [w / total for w in weights]

    def split(self, total: float, floor: float = 0.0) -> list[float]:
        """`total` (seconds or trials) split by share, each part at least `floor`."""
        return [max(floor, total * share) for share in self.shares()]

    def to_json(self) -> dict:
        return {"shapes": [s.to_json() for s in self.shapes]}


def _number(value: Any, name: str, where: str, kind: type, minimum: float) -> Any:
    if isinstance(value, bool) or value is None or value == "":
        raise InputFileError(f"{where}: '{name}' is missing or not a number")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise InputFileError(f"{where}: '{name}' is {value!r}, not a {'whole number' if kind is int else 'number'}") from None
    if kind is int and isinstance(value, float) and value != number:
        raise InputFileError(f"{where}: '{name}' is {value!r}, not a whole number")
    if number < minimum:
        raise InputFileError(f"{where}: '{name}' is {value!r}, below {minimum}")
    return number


def shape_from_fields(fields: dict, where: str) -> WorkloadShape:
    """One shape from a JSON object or a CSV row (strings), or InputFileError saying what is wrong."""
    unknown = sorted(set(fields) - set(FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise InputFileError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    m, n, k = (_number(fields.get(name), name, where, int, 1) for name in ("m", "n", "k"))
    epilogue = fields.get("epilogue") or None
    try:
        spec = GemmSpec(m, n, k, fields.get("layout") or "nn", fields.get("dtype") or "fp32",
                        None if epilogue == "none" else epilogue, fields.get("out_dtype") or None,
                        gated=_gated(fields.get("gated"), where))
    except GemmtuneError as err:
        raise InputFileError(f"{where}: {err}") from None
    count = _number(fields["count"], "count", where, int, 1) if fields.get("count") not in (None, "") else 1
    share = _number(fields["share"], "share", where, float, 0.0) if fields.get("share") not in (None, "") else None
    return WorkloadShape(spec, count, share)


def _gated(value: Any, where: str) -> bool:
    """The shape's gated flag: JSON true/false (or absent), CSV 1/0, true/false, yes/no (or empty)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    flag = GATED_WORDS.get(str(value).strip().lower()) if isinstance(value, str) else None
    if flag is None:
        raise InputFileError(f"{where}: 'gated' is {value!r}, not true or false")
    return flag


def _from_json(path: Path) -> list[WorkloadShape]:
    data = read_json_object(path, WHAT)
    shapes = data.get("shapes")
    if not isinstance(shapes, list):
        raise InputFileError(f"{path} is not {WHAT}: 'shapes' is {'missing' if shapes is None else 'a JSON ' + json_kind(shapes)}, not a list")
    for i, item in enumerate(shapes):
        if not isinstance(item, dict):
            raise InputFileError(f"{path}: shape {i + 1} is a JSON {json_kind(item)}, not an object")
    return [shape_from_fields(item, f"{path}: shape {i + 1}") for i, item in enumerate(shapes)]


def _from_csv(path: Path) -> list[WorkloadShape]:
    reader = csv.DictReader(io.StringIO(read_text(path, WHAT)))
    missing = [f for f in ("m", "n", "k") if f not in (reader.fieldnames or [])]
    if missing:
        raise InputFileError(f"{path} is not {WHAT}: no column {missing[0]!r} in its header")
    return [shape_from_fields({k: (v or "").strip() for k, v in row.items() if k}, f"{path}: line {i + 2}")
            for i, row in enumerate(reader)]


def load_workload(path: Path | str) -> Workload:
    """The workload in a .json or .csv file; InputFileError (one line, exit 2) when it is not one."""
    path = Path(path)
    shapes = _from_csv(path) if path.suffix.lower() == ".csv" else _from_json(path)
    if not shapes:
        raise InputFileError(f"{path} is a workload with no shapes")
    seen: dict[GemmSpec, int] = {}
    for i, shape in enumerate(shapes):
        if shape.spec in seen:
            raise InputFileError(f"{path}: shape {i + 1} repeats shape {seen[shape.spec] + 1} "
                                 f"({shape.spec.short()}); give it once with its count")
        seen[shape.spec] = i
    if any(s.share is not None for s in shapes) and not all(s.share is not None for s in shapes):
        raise InputFileError(f"{path}: some shapes have a share and some not; give every shape one, or none")
    if all(s.share is not None for s in shapes) and sum(s.share for s in shapes) <= 0:
        raise InputFileError(f"{path}: the shares add up to 0")
    return Workload(tuple(shapes))


def merge(workloads: list[Workload]) -> Workload:
    """One workload of several (a model captured at several batch sizes): a shape in more than one
    adds up its counts; shares are dropped (the roofline estimate × count then splits the budget)."""
    counts: dict[GemmSpec, int] = {}
    for workload in workloads:
        for shape in workload.shapes:
            counts[shape.spec] = counts.get(shape.spec, 0) + shape.count
    return Workload(tuple(WorkloadShape(spec, count) for spec, count in counts.items()))


def save_workload(workload: Workload, path: Path | str) -> None:
    """Write the workload as JSON, atomically (a crash leaves the old file or the new one)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(workload.to_json(), indent=1) + "\n")
    os.replace(part, path)
