"""Measurement in a separate process, watched by the tuner.

A candidate kernel may fault (an illegal address leaves the CUDA context unusable), hang, or take
the process down. So the GPU work happens in a child process: the parent sends one job, waits at
most `timeout_s` for the answer, and on silence kills the child; on a dead child it records a
crash. Either way the candidate is a failed trial and the next job starts a fresh child.

The evaluator (what runs in the child) is injectable: the default verifies and times on the GPU
through gemmtune.evaluate; tests pass a fake that raises, hangs or exits. It must be picklable
(a module-level function), since children are spawned, never forked: a fork would inherit the
parent's CUDA context (cuBLAS baseline), which CUDA does not support.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable

from ..errors import GemmtuneError, NoDeviceError, SpecError, Timeout
from ..lifeline import run_bound
from .trial import Status, error_text, status_of


@dataclass(frozen=True)
class MeasureJob:
    """A compiled candidate, as plain data so it crosses the process boundary cheaply."""

    config_json: dict
    source_json: dict  # KernelSource.to_json()
    arch: str
    cubin: bytes
    resources: dict  # ResourceUsage.to_json()
    compile_s: float
    nvrtc_version: str
    protocol: Any = None  # a gemmtune.timing.TimingProtocol; None for its defaults


@dataclass(frozen=True)
class PairedJob:
    """Compiled candidates of one spec to be timed in turn, `rounds` rounds (evaluate.time_in_turn): the
    tuner's last word among its leaders, where the GPU's clock drifts between one-by-one measurements."""

    jobs: tuple[MeasureJob, ...]
    rounds: int
    protocol: Any = None  # a gemmtune.timing.TimingProtocol; None for its defaults


@dataclass(frozen=True)
class MeasureOutcome:
    status: Status
    median_s: float | None = None
    samples_s: tuple[float, ...] = ()
    protocol: dict | None = None
    error: str = ""
    fatal: GemmtuneError | None = None  # not this candidate's fault: the parent raises it and stops
    rounds_s: tuple[tuple[float, ...] | None, ...] = ()  # a PairedJob's: each kernel's seconds, round by round


Evaluator = Callable[[MeasureJob | PairedJob], MeasureOutcome]

# After these the child's CUDA context may be poisoned (sticky errors), so it is replaced.
RESTART_AFTER = (Status.LAUNCH_ERROR, Status.TIMEOUT, Status.CRASH, Status.ERROR)


def compiled_of(job: MeasureJob) -> Any:
    """The job back as a gemmtune.compiler.CompiledKernel (without PTX and log: not needed to run)."""
    from ..compiler import CompiledKernel, ResourceUsage
    from ..kernel_source import KernelSource

    return CompiledKernel(KernelSource.from_json(job.source_json), job.arch, job.cubin, "",
                          ResourceUsage(**job.resources), "", job.compile_s, job.nvrtc_version)


_PREPARED: list = []  # per measuring child: recent specs' inputs and references (evaluate.Prepared), oldest first
PREPARED_BYTES = 4 << 30  # host memory they may hold together (the newest is always kept)


def prepared_for(spec: Any) -> Any:
    """The inputs and float64 reference of `spec`, drawn once per measuring child and shape: the
    candidates of one shape are all checked on the same random inputs, and a trial of a large
    shape no longer spends a second drawing them and computing the reference. The most recent
    shapes' are kept within PREPARED_BYTES (a Dask worker's child measures several shapes in turn;
    the largest shape's reference alone is about a gigabyte)."""
    from ..device import free_memory
    from ..evaluate import prepare

    found = next((p for p in _PREPARED if p.spec == spec), None)
    if found is None:
        spec.check_fits(free_memory(0))  # before the reference takes GPU memory of its own
        found = prepare(spec)
    else:
        _PREPARED.remove(found)
    _PREPARED.append(found)
    while len(_PREPARED) > 1 and sum(_held_bytes(p) for p in _PREPARED) > PREPARED_BYTES:
        _PREPARED.pop(0)
    return found


def _held_bytes(prepared: Any) -> int:
    arrays = [*prepared.inputs.values(), prepared.expected]
    return sum(getattr(array, "nbytes", 0) for array in arrays)


def gpu_evaluator(job: MeasureJob | PairedJob) -> MeasureOutcome:
    """Load the cubin, verify against the fp64 reference, then time (gemmtune.evaluate); a PairedJob's
    kernels are verified one by one and timed in turn."""
    from ..evaluate import evaluate

    if isinstance(job, PairedJob):
        return _time_in_turn(job)
    compiled = compiled_of(job)
    prepared = prepared_for(compiled.source.spec)
    evaluation = (evaluate(compiled, prepared=prepared) if job.protocol is None
                  else evaluate(compiled, protocol=job.protocol, prepared=prepared))
    if not evaluation.verify.ok or evaluation.measurement is None:
        return MeasureOutcome(Status.VERIFY_ERROR, error=f"VerifyError: {evaluation.verify.message}")
    measurement = evaluation.measurement
    return MeasureOutcome(Status.OK, float(measurement.median_s), tuple(float(s) for s in measurement.samples_s),
                          _as_json(measurement.protocol))


def _time_in_turn(job: PairedJob) -> MeasureOutcome:
    from ..evaluate import time_in_turn
    from ..timing import TimingProtocol

    kernels = [compiled_of(one) for one in job.jobs]
    protocol = job.protocol or TimingProtocol()
    rounds = time_in_turn(kernels, prepared_for(kernels[0].source.spec), job.rounds, protocol)
    return MeasureOutcome(Status.OK, protocol=_as_json(protocol),
                          rounds_s=tuple(None if times is None else tuple(times) for times in rounds))


def _as_json(protocol: Any) -> dict | None:
    if hasattr(protocol, "to_json"):
        return protocol.to_json()
    return dataclasses.asdict(protocol) if dataclasses.is_dataclass(protocol) else None


# Failures of the machine, not of a candidate: recording them would mark good configs as failed
# (and a resumed tune never retries a recorded config).
SYSTEMIC = (NoDeviceError, SpecError)


def evaluate_safely(evaluator: Evaluator, job: MeasureJob | PairedJob) -> MeasureOutcome:
    try:
        return evaluator(job)
    except SYSTEMIC as exc:
        return MeasureOutcome(status_of(exc), error=error_text(exc), fatal=exc)
    except Exception as exc:  # the isolation boundary: whatever one candidate raises becomes its record
        return MeasureOutcome(status_of(exc), error=error_text(exc))


READY = "ready"


def serve(conn: Connection, evaluator: Evaluator) -> None:
    """The child's loop: one job in, one outcome out, until None or the parent goes away."""
    conn.send(READY)  # imports are done: from here on the watchdog times jobs alone
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(evaluate_safely(evaluator, job))


class MeasureWorker:
    """The parent's handle on the measuring child, with the watchdog."""

    def __init__(self, evaluator: Evaluator = gpu_evaluator, timeout_s: float = 60.0, startup_s: float = 120.0,
                 recycle_after: int = 500):
        self.evaluator, self.timeout_s, self.startup_s = evaluator, timeout_s, startup_s
        self.recycle_after = recycle_after  # bounds what a long run leaks into one context
        self.context = multiprocessing.get_context("spawn")
        self.process: Any = None
        self.conn: Connection | None = None
        self.jobs = 0
        self.starts = 0  # children started; more than one means restarts happened

    def measure(self, job: MeasureJob | PairedJob) -> MeasureOutcome:
        """The candidate's outcome; raises GemmtuneError when measuring cannot go on at all."""
        self._ensure_started()
        try:
            self.conn.send(job)
            answered = self.conn.poll(self.timeout_s)
        except (BrokenPipeError, ConnectionResetError):
            return self._crashed()
        if not answered:
            self._stop(kill=True)
            return MeasureOutcome(Status.TIMEOUT,
                                  error=f"Timeout: no result within {self.timeout_s:g} s; worker restarted")
        try:
            outcome = self.conn.recv()
        except (EOFError, ConnectionResetError):
            return self._crashed()
        self.jobs += 1
        if outcome.status in RESTART_AFTER or self.jobs >= self.recycle_after or outcome.fatal:
            self._stop(kill=False)
        if outcome.fatal is not None:
            raise outcome.fatal
        return outcome

    def close(self) -> None:
        self._stop(kill=False)

    def _ensure_started(self) -> None:
        """Start a child unless one is alive. A child that cannot start is no candidate's fault
        (it has run nothing yet), so that raises instead of failing the candidate."""
        if self.process is not None and self.process.is_alive():
            return
        self._stop(kill=True)
        parent, child = self.context.Pipe(duplex=True)
        # Bound to this process: it ends within a poll of our death, however we die (lifeline).
        self.process = self.context.Process(target=run_bound, args=(os.getpid(), serve, child, self.evaluator),
                                            daemon=True, name="gemmtune-measure")
        self.process.start()
        child.close()
        self.conn, self.jobs = parent, 0
        self.starts += 1
        try:
            if self.conn.poll(self.startup_s) and self.conn.recv() == READY:
                return
        except (EOFError, ConnectionResetError):
            raise GemmtuneError(f"the measuring process died on start: {self._crashed().error}") from None
        self._stop(kill=True)
        raise Timeout(f"the measuring process did not start within {self.startup_s:g} s")

    def _crashed(self) -> MeasureOutcome:
        self.process.join(5.0)
        code = self.process.exitcode
        self._stop(kill=True)
        return MeasureOutcome(Status.CRASH, error=f"measuring process died (exit code {code}); worker restarted")

    def _stop(self, kill: bool) -> None:
        if self.process is None:
            return
        if kill and self.process.is_alive():
            self.process.kill()
        elif self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, ConnectionResetError):
                self.process.kill()
        self.process.join(10.0)
        if self.process.is_alive():  # it ignored the polite request
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()
        self.process, self.conn = None, None
