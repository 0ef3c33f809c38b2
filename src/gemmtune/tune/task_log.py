"""Where a cluster's time went: every task it ran, as (worker, kind, shape, start, stop).

`tune-many --task-log FILE` records Dask's task stream while the run lasts and writes one JSON line
per task's compute interval. The summary says, per task kind (compile, measure, baseline), how many
ran and for how long; per worker, the share of the run it spent computing; and per shape, the span
from its first task's start to its last task's end. With the GPU lock log beside it, that separates
the four places a run's wall time goes: compiling, measuring under the lock, waiting for the lock,
and idle workers (a shape's rounds waiting on their slowest trial). Task keys are
`<function>-<shape label>-<unique hex>` (DaskRunner names them so): Dask still groups them by
function (its key_split drops the label and the hex), so its per-function duration estimates hold.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

KEY_SEPARATOR = "-"


def task_key(function: str, label: str, unique: str) -> str:
    """A Dask key that names the function and the shape it works for."""
    return KEY_SEPARATOR.join((function, label.replace(KEY_SEPARATOR, "/"), unique))


@dataclass(frozen=True)
class TaskInterval:
    worker: str
    kind: str  # the task's function, e.g. compile_on_worker
    label: str  # the shape it worked for ("" for tasks not keyed by DaskRunner)
    start: float  # seconds since the epoch (the workers' clocks)
    stop: float

    @staticmethod
    def from_key(worker: str, key: Any, start: float, stop: float) -> "TaskInterval":
        parts = str(key).split(KEY_SEPARATOR)
        return TaskInterval(worker, parts[0], KEY_SEPARATOR.join(parts[1:-1]), start, stop)


class TaskLog:
    """Records the task stream of `client`'s cluster while open; on leaving, writes `path` (one JSON
    object per line), whatever ended the run."""

    def __init__(self, client: Any, path: Path):
        self.client, self.path = client, path
        self._stream: Any = None

    def __enter__(self) -> "TaskLog":
        from distributed import get_task_stream

        self._stream = get_task_stream(self.client)
        self._stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._stream.__exit__(*exc)
        names = {address: f"worker-{info.get('name', address)}"
                 for address, info in self.client.scheduler_info().get("workers", {}).items()}
        intervals = [TaskInterval.from_key(names.get(task.get("worker", ""), str(task.get("worker", ""))),
                                           task.get("key", ""), step["start"], step["stop"])
                     for task in self._stream.data for step in task.get("startstops", ())
                     if step.get("action") == "compute"]
        write_intervals(self.path, intervals)
        return False


def write_intervals(path: Path, intervals: Iterable[TaskInterval]) -> None:
    path.write_text("".join(json.dumps(vars(i)) + "\n" for i in sorted(intervals, key=lambda i: i.start)))


def read_intervals(path: Path) -> list[TaskInterval]:
    return [TaskInterval(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def summary_lines(intervals: list[TaskInterval], longest_shapes: int = 3) -> list[str]:
    """Per kind: count, mean and total seconds; per worker: computing share of the span; the shapes
    whose tasks spanned the longest."""
    if not intervals:
        return ["tasks: none recorded"]
    start = min(i.start for i in intervals)
    span = max(i.stop for i in intervals) - start
    lines = [f"tasks: {len(intervals)} over {span:.1f} s"]
    by_kind = _grouped(intervals, lambda i: i.kind)
    lines.append("compute by kind: " + "; ".join(
        f"{kind} {len(group)} × {_computing(group) / len(group):.2f} s = {_computing(group):.1f} s"
        for kind, group in sorted(by_kind.items())))
    if span > 0:
        lines.append("computing per worker (share of the span): " + ", ".join(
            f"{worker} {100 * _computing(group) / span:.0f}%"
            for worker, group in sorted(_grouped(intervals, lambda i: i.worker).items())))
    by_shape = _grouped([i for i in intervals if i.label], lambda i: i.label)
    spans = sorted(((max(i.stop for i in group) - min(i.start for i in group), label)
                    for label, group in by_shape.items()), reverse=True)
    if spans:
        lines.append("longest shapes (first task start to last task end): "
                     + ", ".join(f"{label} {seconds:.1f} s" for seconds, label in spans[:longest_shapes]))
    return lines


def _grouped(intervals: Iterable[TaskInterval], key: Any) -> dict[str, list[TaskInterval]]:
    groups: dict[str, list[TaskInterval]] = {}
    for interval in intervals:
        groups.setdefault(key(interval), []).append(interval)
    return groups


def _computing(intervals: list[TaskInterval]) -> float:
    return sum(i.stop - i.start for i in intervals)
