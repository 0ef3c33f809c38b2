"""No orphans: the children gemmtune starts end within 2 s of their parent's death, however it died;
SIGINT and SIGTERM stop a tune cleanly (trials saved, one line, exit 130 / 143)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemmtune.lifeline import alive, descendants
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.simulation import table_path
from test_tune_simulation import synthetic_table

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

TESTS = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
GRACE_S = 2.0


def start_parent(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(TESTS / "lifeline_parent.py"), *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, what: str, parent: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if parent.poll() is not None:
            raise AssertionError(f"the parent exited ({parent.returncode}) before {what}: {parent.stderr.read()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def survivors_after(children: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in children):
            return []
        time.sleep(0.05)
    return [pid for pid in children if alive(pid)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_measuring_worker_and_compile_pool_die_with_the_parent(signum: int, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    parent = start_parent("pipeline", str(ready))
    children: list[int] = []
    try:
        wait_for(ready.exists, "the worker measures", parent)
        wait_for(lambda: len(descendants(parent.pid)) >= 3, "two compile processes and the worker", parent)
        children = descendants(parent.pid)
        os.kill(parent.pid, signum)
        parent.wait(10)
        left = survivors_after(children, GRACE_S)
        assert left == [], f"{len(left)} of {len(children)} children outlived the parent by {GRACE_S} s"
    finally:
        parent.kill()
        kill_all(children)


def test_a_compile_pool_dies_with_the_parent(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    parent = start_parent("compile", str(ready))
    children: list[int] = []
    try:
        wait_for(lambda: all(Path(f"{ready}.{i}").exists() for i in (0, 1)), "both compile jobs run", parent)
        children = descendants(parent.pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert survivors_after(children, GRACE_S) == []
    finally:
        parent.kill()
        kill_all(children)


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = table_path("simt", GemmSpec(1024, 1024, 1024, math="simt"), tmp_path_factory.mktemp("tables"))
    synthetic_table(GemmSpec(1024, 1024, 1024, math="simt"), rows=400, seed=5).to_csv(path)
    return path


def rows_in(db: Path) -> int:
    if not db.exists():
        return 0
    with TuningDB(db) as handle:
        return handle.check().trials


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_stop_a_tune_cleanly(signum: int, code: int, tmp_path: Path, table_csv: Path) -> None:
    db = tmp_path / "tuning.sqlite"
    parent = start_parent("tune-cli", str(db), str(table_csv))
    try:
        wait_for(lambda: rows_in(db) >= 5, "five trials", parent)
        os.kill(parent.pid, signum)
        _out, err = parent.communicate(timeout=30)
    finally:
        parent.kill()
    assert parent.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert f"stopped by {signal.Signals(signum).name}" in last and str(db) in last
    saved = rows_in(db)
    assert f"{saved} new trials, {saved} in total" in last  # every trial it reported is in the database
    assert 5 <= saved < 200 and "Traceback" not in err


def test_linux_delivers_the_parent_death_signal() -> None:
    """The first line of defence (the pid watchdog is the second): prctl accepts PR_SET_PDEATHSIG."""
    probe = "from gemmtune.lifeline import set_parent_death_signal as s; print(s())"
    done = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr
