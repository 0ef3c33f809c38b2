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
  GEMMTUNE_LOCK_LOG  a file to which each holder appends "pid start end" (CLOCK_MONOTONIC seconds)
                     per held interval, for checking that holders never overlapped.
"""
from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

WAIT_NOTICE_S = 1.0
LOCK_DIR_ENV = "GEMMTUNE_LOCK_DIR"
LOCK_LOG_ENV = "GEMMTUNE_LOCK_LOG"


@dataclass(frozen=True)
class Interval:
    """One time a process held a lock, in CLOCK_MONOTONIC seconds (comparable across processes)."""

    pid: int
    start: float
    end: float


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


def _log_interval(interval: Interval) -> None:
    log = os.environ.get(LOCK_LOG_ENV)
    if not log:
        return
    line = f"{interval.pid} {interval.start:.9f} {interval.end:.9f}\n".encode()
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
                _log_interval(Interval(os.getpid(), state.since, ended))


def device_lock(ordinal: int | None = None):
    """gpu_lock for GPU `ordinal` (None: the GPU of the current context), keyed by its UUID."""
    from .device import current_ordinal, device_uuid

    return gpu_lock(device_uuid(current_ordinal() if ordinal is None else ordinal))


def read_intervals(log: Path) -> list[Interval]:
    intervals = []
    for line in Path(log).read_text().splitlines():
        pid, start, end = line.split()
        intervals.append(Interval(int(pid), float(start), float(end)))
    return intervals


def overlaps(intervals: list[Interval]) -> list[tuple[Interval, Interval]]:
    """Pairs of intervals of different processes that overlap in time (none, when the lock works)."""
    ordered = sorted(intervals, key=lambda i: i.start)
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if b.start < a.end and a.pid != b.pid]
