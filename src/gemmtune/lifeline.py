"""Children that die with their parent, and signals that stop a run cleanly.

Every process gemmtune starts (the measuring worker, the compile pools of every family and of TVM)
is bound to its parent when it starts: on Linux the kernel sends it SIGKILL when the parent dies
(prctl PR_SET_PDEATHSIG), and a watchdog thread polls the parent's pid as a fallback (other
systems, and the one case the kernel misses: PDEATHSIG fires when the parent *thread* that
started the child ends, so a parent that dies some other way is still caught within a poll).
Either way a child holding a CUDA context or GPU memory outlives its parent by well under 2 s,
however the parent died (SIGKILL, the OOM killer, SIGTERM, Ctrl-C).

Children ignore SIGINT: Ctrl-C reaches the whole foreground process group, and the parent, not
each child, decides how a run stops (it saves what it has and shuts its children down).

    pool = spawn_pool(4)                                   # a ProcessPoolExecutor bound this way
    process = context.Process(target=run_bound, args=(os.getpid(), serve, conn))

    with stop_signals():                                   # SIGINT/SIGTERM raise Interrupted
        ...
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
POLL_S = 0.25  # how often the watchdog looks at the parent's pid


def set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Ask Linux to send `signum` to this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc symbol: the watchdog alone does the job
        return False


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup: the parent that would want it is gone


def _watch(parent_pid: int) -> None:
    stop = threading.Event()
    while not stop.wait(POLL_S):
        if os.getppid() != parent_pid:  # re-parented: the parent died
            _die()


def bind_to_parent(parent_pid: int) -> None:
    """Make this (child) process end when `parent_pid` ends. Call first thing in a child."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        _die()
    threading.Thread(target=_watch, args=(parent_pid,), name="gemmtune-lifeline", daemon=True).start()


def run_bound(parent_pid: int, target: Callable[..., Any], *args: Any) -> Any:
    """A multiprocessing.Process target: bind to the parent, then run `target(*args)`."""
    bind_to_parent(parent_pid)
    return target(*args)


def spawn_pool(workers: int | None) -> ProcessPoolExecutor:
    """A pool of spawned (never forked: a fork inherits a CUDA context) processes bound to this one."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=bind_to_parent, initargs=(os.getpid(),))


# --- looking at process trees (Linux /proc; what tests and bench/reliability.py check) ---------------
def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (dead, waiting to be reaped) holds no memory and counts as gone."""
    state = _stat(pid)
    return state is not None and state[0] not in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Pids of the living processes below `pid`: children, their children, and so on."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        state = _stat(int(entry.name))
        if state is not None and state[0] not in ("Z", "X"):
            parents.setdefault(state[1], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return sorted(found)


# --- stopping a run by signal ---------------------------------------------------------------------
class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; a BaseException like KeyboardInterrupt, so no `except Exception`
    on the way swallows it. `exit_code` is the shell's convention: 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


@contextmanager
def stop_signals(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Inside the block SIGINT and SIGTERM raise Interrupted (main thread only); restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
