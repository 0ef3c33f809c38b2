"""One GPU, one timed launch at a time: a per-device advisory lock around every timed section.

Two tuners (or a tuner and `bench`) on one GPU would otherwise time their kernels on top of each
other, and both would believe the slowed times. Timed sections (gemmtune.timing.measure, and
gemmtune.evaluate's check-then-time) hold an exclusive flock on a file named after the GPU's UUID
in a per-user runtime folder; compiling needs no GPU and goes on in parallel. The OS drops a flock
when its holder dies, so a killed tuner never leaves the GPU locked.

The lock is re-entrant within a process (evaluate holds it and measure takes it again). The holder
writes its pid and command into the lock file, so a process that waits more than WAIT_NOTICE_S
says whose lock it waits for. Two environment variables, read at each acquisition so that spawned
workers inherit them from the command that started them:
  GEMMTUNE_LOCK_DIR  where the lock files live (default $XDG_RUNTIME_DIR/gemmtune, else
                     /tmp/gemmtune-<uid>); processes that should exclude each other must agree.
  GEMMTUNE_LOCK_LOG  a file to which each holder appends "pid start end gpu holder" (CLOCK_MONOTONIC
                     seconds; the GPU's UUID; "-" for no holder name) per held interval, for checking
                     that holders of one GPU never overlapped (lock_report: overlapping pairs, busy
                     time per holder).
  GEMMTUNE_LOCK_HOLDER  a name for the log's holder column (a Dask worker names itself, so its
                     measuring children's intervals count as its own); default: the pid.
"""
from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

WAIT_NOTICE_S = 1.0
LOCK_DIR_ENV = "GEMMTUNE_LOCK_DIR"
LOCK_LOG_ENV = "GEMMTUNE_LOCK_LOG"
LOCK_HOLDER_ENV = "GEMMTUNE_LOCK_HOLDER"


@dataclass(frozen=True)
class Interval:
    """One time a process held a lock, in CLOCK_MONOTONIC seconds (comparable across processes)."""

    pid: int
    start: float
    end: float
    holder: str = ""  # GEMMTUNE_LOCK_HOLDER of the process, if it had one
    gpu: str = ""  # the lock's key, the GPU's UUID ("" in logs written before it was recorded)

    @property
    def owner(self) -> str:
        """Whose busy time the interval counts to: the holder's name, else the process."""
        return self.holder or f"pid {self.pid}"


def lock_dir() -> Path:
    given = os.environ.get(LOCK_DIR_ENV)
    if given:
        return Path(given)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.access(runtime, os.W_OK):
        return Path(runtime) / "gemmtune"
    return Path(tempfile.gettempdir()) / f"gemmtune-{os.getuid()}"


def lock_path(key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
    return lock_dir() / f"gpu-{safe}.lock"


def holder_text() -> str:
    """'pid 123: gemmtune tune MNK=1024' (a spawned worker carries its parent's argv)."""
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)) or "python"
    return f"pid {os.getpid()} (parent {os.getppid()}): {command}"


class _Held:
    """This process's hold on one lock file: depth > 0 while held (re-entrant per process)."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()  # threads of one process take turns, like processes do
        self.depth = 0
        self.fd: int | None = None
        self.since = 0.0


_held: dict[str, _Held] = {}
_registry = threading.Lock()


def _state(key: str) -> _Held:
    with _registry:
        return _held.setdefault(key, _Held())


def _announce_after(path: Path, say: Callable[[str], None]) -> threading.Timer:
    def notice() -> None:
        try:
            whom = path.read_text(errors="replace").strip() or "a process that has not written its name yet"
        except OSError:
            whom = "an unknown process"
        say(f"gemmtune: waiting for the GPU lock {path.name}, held by {whom}")

    timer = threading.Timer(WAIT_NOTICE_S, notice)
    timer.daemon = True
    timer.start()
    return timer


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _acquire(path: Path, say: Callable[[str], None]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            timer = _announce_after(path, say)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            finally:
                timer.cancel()
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder_text() + "\n").encode(), 0)
    except BaseException:
        os.close(fd)  # closing drops the lock if it was taken
        raise
    return fd


def holder_name() -> str:
    """GEMMTUNE_LOCK_HOLDER as one word (the log is split on whitespace)."""
    return "_".join(os.environ.get(LOCK_HOLDER_ENV, "").split())


def _log_interval(interval: Interval) -> None:
    log = os.environ.get(LOCK_LOG_ENV)
    if not log:
        return
    line = f"{interval.pid} {interval.start:.9f} {interval.end:.9f} {interval.gpu or '-'} {interval.holder or '-'}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)  # one short O_APPEND write: lines of concurrent holders never interleave
    finally:
        os.close(fd)


@contextmanager
def gpu_lock(key: str, say: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold the lock for GPU `key` (its UUID) for the block; waits for other holders."""
    state = _state(key)
    with state.mutex:
        if state.depth == 0:
            state.fd = _acquire(lock_path(key), say)
            state.since = time.monotonic()
        state.depth += 1
        try:
            yield
        finally:
            state.depth -= 1
            if state.depth == 0:
                ended = time.monotonic()  # taken before the release: logged intervals never overlap
                fd, state.fd = state.fd, None
                os.close(fd)
                _log_interval(Interval(os.getpid(), state.since, ended, holder_name(), key))


def device_lock(ordinal: int | None = None):
    """gpu_lock for GPU `ordinal` (None: the GPU of the current context), keyed by its UUID."""
    from .device import current_ordinal, device_uuid

    return gpu_lock(device_uuid(current_ordinal() if ordinal is None else ordinal))


def read_intervals(log: Path | str) -> list[Interval]:
    """The intervals GEMMTUNE_LOCK_LOG recorded: "pid start end gpu holder" per line, or the older
    "pid start end [holder]" (no GPU: all one GPU)."""
    intervals = []
    for number, line in enumerate(Path(log).read_text().splitlines(), 1):
        fields = line.split()
        if len(fields) not in (3, 4, 5):
            raise ValueError(f"{log}: line {number} is not 'pid start end gpu holder': {line!r}")
        gpu, holder = (fields[3], fields[4]) if len(fields) == 5 else ("", "".join(fields[3:]))
        intervals.append(Interval(int(fields[0]), float(fields[1]), float(fields[2]),
                                  "" if holder == "-" else holder, "" if gpu == "-" else gpu))
    return intervals


def overlaps(intervals: list[Interval]) -> list[tuple[Interval, Interval]]:
    """Every pair of intervals of different processes on one GPU that overlap in time (none, when
    the lock works; sections on different GPUs may overlap, that is the point of several GPUs)."""
    pairs, running = [], []
    for interval in sorted(intervals, key=lambda i: i.start):
        running = [o for o in running if o.end > interval.start]  # touching (end == start) is no overlap
        pairs += [(o, interval) for o in running if o.pid != interval.pid and o.gpu == interval.gpu]
        running.append(interval)
    return pairs


@dataclass(frozen=True)
class LockReport:
    """What a lock log says: timed sections, overlapping pairs, and each holder's busy time."""

    sections: int
    overlapping_pairs: int
    span_s: float  # first start to last end
    busy_s: dict[str, float]  # holder -> seconds it held the lock
    counts: dict[str, int]  # holder -> timed sections
    gpu_busy_s: dict[str, float] = field(default_factory=dict)  # GPU (UUID, "" if not logged) -> seconds held

    @property
    def gpus(self) -> int:
        return max(1, len(self.gpu_busy_s))

    def lines(self) -> list[str]:
        if not self.sections:
            return ["GPU lock: no timed section recorded"]
        held = sum(self.busy_s.values())
        busiest = max(self.busy_s.values())
        spread = (busiest - min(self.busy_s.values())) / busiest if busiest > 0 else 0.0
        on = f" on {self.gpus} GPUs" if self.gpus > 1 else ""
        return [f"GPU lock: {self.sections} timed sections by {len(self.busy_s)} holders{on} over {self.span_s:.1f} s, "
                f"{self.overlapping_pairs} overlapping pairs; held {100 * held / max(self.gpus * self.span_s, 1e-9):.0f}% "
                f"of the span{' per GPU' if on else ''}",
                "busy per holder: " + ", ".join(f"{owner} {seconds:.1f} s ({self.counts[owner]})"
                                                for owner, seconds in sorted(self.busy_s.items()))
                + f"; spread {100 * spread:.0f}% of the busiest"]

    def to_json(self) -> dict:
        return {"sections": self.sections, "overlapping_pairs": self.overlapping_pairs, "span_s": self.span_s,
                "busy_s": self.busy_s, "sections_per_holder": self.counts, "gpu_busy_s": self.gpu_busy_s}


def lock_report(intervals: list[Interval]) -> LockReport:
    busy: dict[str, float] = {}
    counts: dict[str, int] = {}
    gpu_busy: dict[str, float] = {}
    for interval in intervals:
        busy[interval.owner] = busy.get(interval.owner, 0.0) + (interval.end - interval.start)
        counts[interval.owner] = counts.get(interval.owner, 0) + 1
        gpu_busy[interval.gpu] = gpu_busy.get(interval.gpu, 0.0) + (interval.end - interval.start)
    span = max(i.end for i in intervals) - min(i.start for i in intervals) if intervals else 0.0
    return LockReport(len(intervals), len(overlaps(intervals)), span, busy, counts, gpu_busy)
