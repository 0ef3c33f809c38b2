"""Back-to-back ("decode stream") timing: one launch repeated over rotating operand sets.

In an LLM decode step the GEMVs run back to back over different weight matrices: each reads its
operands cold from DRAM, and its launch latency overlaps the kernel before it. This protocol times
that, for any `launch(i)` (i = operand-set index: our kernel, torch.mm, a copy):

- R operand sets that together hold at least 3× L2 (`set_count`) are launched in turn 0, 1, ..., R-1,
  0, 1, ...: between two launches on one set at least 2× L2 of other sets' bytes pass through L2, so
  every launch meets its operands cold, with no flush kernel;
- a batch is R × reps launches between one pair of CUDA events. A hold kernel spins on the GPU while
  the host enqueues the batch, so the batch is already queued when its start event fires and the
  GPU, not the Python enqueue rate, sets the pace (`queued_ahead` says whether that held);
- `warmup` untimed batches, then `batches` timed ones; the result is the median over batches of
  batch time / launches.

timing.measure (one launch between its events, L2 flushed before it) stays the single-launch
protocol; this one is reported beside it, never instead of it.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from .device import checked, driver, ensure_context, query_device
from .gpu_lock import device_lock
from .runtime import DeviceBuffer, LoadedKernel, release

SETS_L2_FACTOR = 3  # the sets together hold at least this many L2s
MIN_SETS = 4
MAX_SETS = 4096  # beyond this the sets are too small for rotation to empty L2: time a larger problem
LAUNCHES_PER_BATCH = 100  # the default batch size (reps_for); a few hundred stay within the launch queue
HOLD_MIN_S = 1e-3
HOLD_MAX_S = 0.5

Launch = Callable[[int], None]  # enqueue one launch on operand set i; returns without waiting


@dataclass(frozen=True)
class StreamTiming:
    per_launch_s: float  # median over the timed batches of batch time / launches
    sets: int  # operand sets rotated through (R)
    launches: int  # launches per timed batch (R × reps)
    batches: int  # timed batches
    samples_s: tuple[float, ...] = ()  # each timed batch's time per launch
    queued_ahead: bool = True  # every timed batch was fully enqueued before its start event fired

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BatchTime:
    seconds: float  # between the batch's start and end events
    queued_ahead: bool


BatchClock = Callable[[Callable[[], None]], BatchTime]  # runs an enqueue-the-batch callable, times it


def set_count(bytes_per_set: int, l2_bytes: int) -> int:
    """R = max(4, ceil(3 · L2 / bytes per set)): enough sets that R · bytes ≥ 3 · L2."""
    if bytes_per_set < 1 or l2_bytes < 0:
        raise ValueError(f"set_count needs bytes_per_set ≥ 1 and l2_bytes ≥ 0, got {bytes_per_set}, {l2_bytes}")
    sets = max(MIN_SETS, -(-SETS_L2_FACTOR * l2_bytes // bytes_per_set))
    if sets > MAX_SETS:
        raise ValueError(f"sets of {bytes_per_set} B need {sets} > {MAX_SETS} of them to exceed 3× L2; "
                         "time a larger problem")
    return sets


def reps_for(sets: int, launches: int = LAUNCHES_PER_BATCH) -> int:
    """Rotations per batch so that a batch holds about `launches` launches (at least one rotation)."""
    if sets < 1 or launches < 1:
        raise ValueError(f"reps_for needs sets ≥ 1 and launches ≥ 1, got {sets}, {launches}")
    return max(1, -(-launches // sets))


def _check_counts(sets: int, reps: int, batches: int, warmup: int) -> None:
    if sets < 1 or reps < 1 or batches < 1 or warmup < 0:
        raise ValueError(f"stream timing needs sets, reps, batches ≥ 1 and warmup ≥ 0; "
                         f"got sets={sets} reps={reps} batches={batches} warmup={warmup}")


def time_stream(launch: Launch, sets: int, stream: Any = 0, reps: int = 20, batches: int = 5, warmup: int = 1,
                clock: BatchClock | None = None) -> StreamTiming:
    """Time `launch` back to back over `sets` operand sets on `stream` (see the module docstring).

    `launch(i)` must only enqueue work on `stream`. `clock` replaces the CUDA events (tests).
    """
    _check_counts(sets, reps, batches, warmup)
    if clock is not None:
        return run_batches(launch, sets, reps, batches, warmup, clock)
    ensure_context()
    with device_lock():  # one timed section per GPU at a time, like timing.measure
        events = EventClock(stream)
        try:
            result = run_batches(launch, sets, reps, batches, warmup, events)
        except BaseException:
            release([events.close], after_error=True)
            raise
        release([events.close], after_error=False)
        return result


def run_batches(launch: Launch, sets: int, reps: int, batches: int, warmup: int, clock: BatchClock) -> StreamTiming:
    """The batching arithmetic, whatever times the batches."""
    _check_counts(sets, reps, batches, warmup)

    def batch() -> None:
        for _ in range(reps):
            for i in range(sets):
                launch(i)

    for _ in range(warmup):
        clock(batch)
    timed = [clock(batch) for _ in range(batches)]
    launches = sets * reps
    samples = tuple(t.seconds / launches for t in timed)
    return StreamTiming(statistics.median(samples), sets, launches, batches, samples,
                        all(t.queued_ahead for t in timed))


# --- the CUDA clock: [hold] -> start event -> batch -> end event --------------------------------
HOLD_SOURCE = r"""// Spins one thread for alpha microseconds of the GPU's global timer, so the launches queued
// behind it start back to back. D is never written.
extern "C" __global__ void stream_hold(float alpha, float* D) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    const unsigned long long wait_ns = (unsigned long long)(alpha * 1000.0f);
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < wait_ns);
}
"""


def hold_kernel(arch: str):
    """The compiled hold kernel (it borrows the GEMM artifact's alpha and D parameter slots)."""
    from .compiler import compile_kernel
    from .kernel_source import KernelSource
    from .spec import GemmSpec

    source = KernelSource(code=HOLD_SOURCE, entry="stream_hold", grid=(1, 1, 1), block=(1, 1, 1),
                          args=("alpha", "D"), spec=GemmSpec(1, 1, 1), family="stream-hold", family_version="1")
    return compile_kernel(source, arch)


class Hold:
    """The hold kernel, loaded once beside the 4-byte buffer it names as D: `hold(seconds, stream)`
    keeps the GPU busy that long, so what the host enqueues behind it starts back to back. Call
    close() when done."""

    def __init__(self) -> None:
        self.scratch = DeviceBuffer.alloc(4)
        try:
            self.kernel = LoadedKernel(hold_kernel(query_device().arch))
        except BaseException:
            release([self.scratch.free], after_error=True)
            raise

    def __call__(self, seconds: float, stream: Any = 0) -> None:
        self.kernel.launch({"alpha": seconds * 1e6, "D": self.scratch.ptr}, stream)

    def close(self) -> None:
        release([self.kernel.unload, self.scratch.free], after_error=False)


def _event_done(event: Any) -> bool:
    cu = driver()
    result = cu.cuEventQuery(event)
    code = result[0] if isinstance(result, tuple) else result
    if int(code) == int(cu.CUresult.CUDA_ERROR_NOT_READY):
        return False
    checked(result, "cuEventQuery")
    return True


class EventClock:
    """Times one batch on `stream` as [hold kernel] -> start event -> batch -> end event.

    The hold lasts twice the host's enqueue time of the batch before (HOLD_MIN_S to HOLD_MAX_S), so
    the batch is queued before the start event fires; `queued_ahead` is whether the start event was
    still pending once the host had enqueued the end event. Call close() when done.
    """

    def __init__(self, stream: Any = 0):
        cu = driver()
        self.stream = stream
        self.hold_s = HOLD_MIN_S
        self._closers: list[Callable[[], None]] = []
        try:
            self.hold = Hold()
            self._closers.append(self.hold.close)
            self.start = self._event(cu)
            self.end = self._event(cu)
        except BaseException:
            release(self._closers, after_error=True)
            raise

    def _event(self, cu: Any) -> Any:
        event = checked(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        self._closers.append(lambda: checked(driver().cuEventDestroy(event), "cuEventDestroy"))
        return event

    def __call__(self, batch: Callable[[], None]) -> BatchTime:
        cu = driver()
        self.hold(self.hold_s, self.stream)
        checked(cu.cuEventRecord(self.start, self.stream), "cuEventRecord")
        began = time.perf_counter()
        batch()
        checked(cu.cuEventRecord(self.end, self.stream), "cuEventRecord")
        enqueue_s = time.perf_counter() - began
        queued_ahead = not _event_done(self.start)
        checked(cu.cuEventSynchronize(self.end), "timed batch")
        seconds = checked(cu.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime") / 1e3
        self.hold_s = min(HOLD_MAX_S, max(HOLD_MIN_S, 2 * enqueue_s))
        return BatchTime(seconds, queued_ahead)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        release(reversed(closers), after_error=False)


# --- our compiled kernel on caller-provided operands ---------------------------------------------
OperandSet = tuple[Any, Any, Any]  # A, B, D as the spec stores them: torch CUDA tensors or DeviceBuffers


def kernel_launches(kernel: LoadedKernel, operand_sets: Sequence[OperandSet], stream: Any = 0,
                    dependent_launch: bool = True) -> Launch:
    """launch(i) for time_stream: `kernel` (a spec without epilogue operands) on operand set i. Every
    set is checked against the spec (invoke.bind: shape, storage type, alignment) and packed once.
    `dependent_launch`: as LoadedKernel.bind (False launches a dependent-launch kernel plainly)."""
    from .invoke import bind

    bound = [kernel.bind(bind(kernel.source, a, b, {}, d), stream, dependent_launch) for a, b, d in operand_sets]
    return lambda i: bound[i]()
