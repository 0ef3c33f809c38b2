"""One GPU, one timed section at a time: processes contending for the per-GPU lock never hold it at
once, a waiter says whom it waits for, and a killed holder leaves the lock free."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gemmtune import gpu_lock
from gemmtune.gpu_lock import Interval, overlaps, read_intervals

SRC = str(Path(__file__).parents[1] / "src")

HOLDER = """
import sys, time
from gemmtune.gpu_lock import gpu_lock
key, rounds, hold_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for _ in range(rounds):
    with gpu_lock(key):
        print("holding", flush=True)
        time.sleep(hold_s)
"""


def holder(tmp_path: Path, key: str, rounds: int, hold_s: float, locks: str = "locks") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "GEMMTUNE_LOCK_DIR": str(tmp_path / locks),
           "GEMMTUNE_LOCK_LOG": str(tmp_path / "intervals.log")}
    return subprocess.Popen([sys.executable, "-c", HOLDER, key, str(rounds), str(hold_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(processes: list[subprocess.Popen]) -> list[str]:
    errors = []
    for process in processes:
        _out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        errors.append(err)
    return errors


def test_contending_processes_never_hold_the_lock_at_once(tmp_path: Path) -> None:
    finish([holder(tmp_path, "GPU-same", 15, 0.01) for _ in range(3)])
    intervals = read_intervals(tmp_path / "intervals.log")
    assert len(intervals) == 45 and len({i.pid for i in intervals}) == 3
    assert overlaps(intervals) == []


def test_the_overlap_check_sees_overlaps_when_there_is_no_common_lock(tmp_path: Path) -> None:
    """The check above can fail: with a lock file each (lock folders that disagree), the same
    processes' intervals on one GPU do overlap."""
    finish([holder(tmp_path, "GPU-same", 15, 0.01, locks=f"locks-{n}") for n in range(3)])
    assert overlaps(read_intervals(tmp_path / "intervals.log"))


def test_a_waiter_names_the_holder_and_a_killed_holder_frees_the_lock(tmp_path: Path) -> None:
    first = holder(tmp_path, "GPU-x", 1, 60.0)
    try:
        assert first.stdout.readline().strip() == "holding"
        second = holder(tmp_path, "GPU-x", 1, 0.0)
        time.sleep(gpu_lock.WAIT_NOTICE_S + 1.0)
        assert second.poll() is None  # still waiting
        os.kill(first.pid, signal.SIGKILL)  # the OS drops a dead holder's flock
        [err] = finish([second])
    finally:
        first.kill()
    notice = [line for line in err.splitlines() if "waiting for the GPU lock" in line]
    assert len(notice) == 1 and f"pid {first.pid}" in notice[0] and "-c" in notice[0]


def test_the_lock_is_reentrant_within_a_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMMTUNE_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("GEMMTUNE_LOCK_LOG", str(tmp_path / "log"))
    with gpu_lock.gpu_lock("GPU-r"):
        with gpu_lock.gpu_lock("GPU-r"):
            pass
    assert len(read_intervals(tmp_path / "log")) == 1  # one interval: the outer hold


def test_overlaps_finds_any_overlap_between_processes() -> None:
    assert overlaps([Interval(1, 0.0, 1.0), Interval(2, 1.0, 2.0)]) == []
    assert overlaps([Interval(1, 0.0, 10.0), Interval(2, 1.0, 2.0), Interval(3, 3.0, 4.0)])


def test_timed_sections_on_the_fake_gpu_take_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda.bindings

    from fake_driver import FakeDriver
    from gemmtune import device
    from gemmtune.timing import TimingProtocol, measure

    monkeypatch.setattr(cuda.bindings, "driver", FakeDriver())
    for cached in (device._init_driver, device._primary_context, device.query_device, device.device_uuid):
        cached.cache_clear()
    monkeypatch.setenv("GEMMTUNE_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("GEMMTUNE_LOCK_LOG", str(tmp_path / "log"))
    try:
        measure(lambda: None, TimingProtocol(warmup=0, min_reps=2, max_reps=2, min_time_s=0.0, flush_l2=False), 0)
    finally:
        for cached in (device._init_driver, device._primary_context, device.query_device, device.device_uuid):
            cached.cache_clear()
    assert len(read_intervals(tmp_path / "log")) == 1
    raw = b"fake-gpu-uuid-00".hex()  # the fake driver's UUID, formatted as nvidia-smi does
    expected = f"GPU-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"
    assert [p.name for p in tmp_path.glob("*.lock")] == [f"gpu-{expected}.lock"]


def test_overlaps_counts_every_pair_not_only_neighbours() -> None:
    """A long section overlapping two later ones is two pairs; a process never overlaps itself."""
    long, a, b = Interval(1, 0.0, 10.0), Interval(2, 1.0, 2.0), Interval(3, 3.0, 4.0)
    assert overlaps([b, long, a]) == [(long, a), (long, b)]
    assert overlaps([Interval(1, 0.0, 2.0), Interval(1, 1.0, 3.0)]) == []


def test_lock_report_counts_busy_time_per_holder(tmp_path: Path) -> None:
    """Intervals named by GEMMTUNE_LOCK_HOLDER count to that holder whatever their pid (a worker and
    its measuring children); unnamed ones count to their process. Old three-column lines still read."""
    log = tmp_path / "log"
    log.write_text("10 0.0 1.0 worker-0\n11 1.0 1.5 worker-0\n12 2.0 4.0 worker-1\n13 4.0 4.25\n")
    report = gpu_lock.lock_report(read_intervals(log))
    assert report.sections == 4 and report.overlapping_pairs == 0 and report.span_s == 4.25
    assert report.busy_s == {"worker-0": 1.5, "worker-1": 2.0, "pid 13": 0.25}
    assert report.counts == {"worker-0": 2, "worker-1": 1, "pid 13": 1}
    first, second = report.lines()
    assert "4 timed sections by 3 holders over 4.2 s, 0 overlapping pairs" in first
    assert "worker-0 1.5 s (2)" in second and "worker-1 2.0 s (1)" in second
    log.write_text("10 0.0 1.0 worker-0\n12 0.5 4.0 worker-1\n")
    assert gpu_lock.lock_report(read_intervals(log)).overlapping_pairs == 1
    assert gpu_lock.lock_report([]).lines() == ["GPU lock: no timed section recorded"]


def test_a_named_holder_is_written_to_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMMTUNE_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("GEMMTUNE_LOCK_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("GEMMTUNE_LOCK_HOLDER", "worker 3")
    with gpu_lock.gpu_lock("GPU-n"):
        pass
    [interval] = read_intervals(tmp_path / "log")
    assert interval.pid == os.getpid() and interval.holder == "worker_3" and interval.end >= interval.start


def test_a_damaged_log_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("1 0.0 1.0\ngarbage\n")
    with pytest.raises(ValueError, match="line 2 is not 'pid start end"):
        read_intervals(tmp_path / "log")


def test_sections_on_different_gpus_may_overlap_and_old_logs_still_read(tmp_path):
    """The log names each section's GPU: two GPUs timing at once is no overlap, one GPU is."""
    from gemmtune.gpu_lock import lock_report

    log = tmp_path / "log"
    log.write_text("1 0.0 2.0 GPU-a worker-0\n2 1.0 3.0 GPU-b worker-1\n3 1.5 1.8 GPU-a -\n"
                   "4 5.0 6.0\n5 5.5 6.5 old-holder\n")
    intervals = read_intervals(log)
    assert [(i.gpu, i.holder) for i in intervals] == [("GPU-a", "worker-0"), ("GPU-b", "worker-1"), ("GPU-a", ""),
                                                      ("", ""), ("", "old-holder")]
    pairs = overlaps(intervals)
    assert {(a.pid, b.pid) for a, b in pairs} == {(1, 3), (4, 5)}
    report = lock_report(intervals)
    assert report.gpus == 3 and report.overlapping_pairs == 2
    assert "on 3 GPUs" in report.lines()[0]


@pytest.mark.parametrize("on_gpu", [False, True])
def test_the_check_runs_outside_the_lock_and_the_gpu_work_inside(monkeypatch, on_gpu):
    """check_then_time holds the GPU lock for poison, launch and copy-back, and lets it go while a
    CPU judge compares the copy (seconds for a large D, in which another worker may time its
    kernels); a judge on the GPU runs inside the lock."""
    from contextlib import contextmanager

    import gemmtune.evaluate as evaluate
    from gemmtune.timing import TimingProtocol
    from gemmtune.verify import VerifyResult

    held, steps = [False], []

    @contextmanager
    def hold():
        assert not held[0]
        held[0] = True
        yield
        held[0] = False

    def step(name):
        return lambda *args: steps.append((name, held[0])) or (np.zeros(1) if name == "read" else None)

    monkeypatch.setattr(evaluate, "synchronize", step("sync"))
    monkeypatch.setattr(evaluate, "measure", lambda run, protocol, l2: steps.append(("measure", held[0])) or "m")
    judged = lambda out: steps.append(("judge", held[0])) or VerifyResult(0.0, 1.0, True, 0, "ok", 0.0, 1.0)  # noqa: E731
    check = evaluate.OutputCheck(step("read"), judged, on_gpu=on_gpu)
    result = evaluate.check_then_time(step("run"), step("poison"), check, TimingProtocol(), False, 0, hold)
    assert result.ok and result.measurement == "m"
    assert steps == [("poison", True), ("run", True), ("sync", True), ("read", True), ("judge", on_gpu),
                     ("poison", True), ("measure", True), ("read", True), ("judge", on_gpu)]
