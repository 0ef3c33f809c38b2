"""The timing protocol: CUDA events around each launch, warm-up first, median of the samples.

Each timed repetition is ``[flush L2] -> event start -> launch -> event end``. The flush (a
cuMemsetD32Async over twice the L2 size) sits outside the event pair, so it is not timed but
does leave the kernel a cold cache, and it keeps the GPU busy while the CPU enqueues the
start event and the launch, so launch latency does not leak into small kernels' times.
Repetitions are enqueued in batches and read back after one synchronize per batch.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .device import checked, driver, ensure_context
from .gpu_lock import device_lock
from .runtime import DeviceBuffer, release
from .stream_timing import Hold

BatchTimer = Callable[[int], list[float]]  # run n timed repetitions, return their seconds


@dataclass(frozen=True)
class TimingProtocol:
    warmup: int = 3  # untimed launches first: module load, clocks, instruction cache
    min_reps: int = 10
    max_reps: int = 200
    min_time_s: float = 0.1  # keep repeating until the timed launches add up to this
    flush_l2: bool = True
    # How the flush empties L2. "write": cuMemsetD32 over twice the L2 size; it leaves L2 full of
    # dirty lines, whose write-back the timed kernel pays as it evicts them (a few µs: noise for a
    # GEMM, a third of a 48 MB elementwise pass). "read": a memset of twice the L2 size evicts
    # everything, then a kernel reads a clean buffer of twice the L2 size, whose clean lines replace
    # the dirty ones (their write-back happens there, untimed), like Nsight Compute's cache control.
    # (A read pass alone left a half-L2 working set warm on the H100: L2 keeps lines that were reused.)
    flush_mode: str = "write"

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_reps < 1 or self.max_reps < self.min_reps or self.min_time_s < 0:
            raise ValueError(f"inconsistent timing protocol {self}")
        if self.flush_mode not in FLUSH_MODES:
            raise ValueError(f"flush_mode must be one of {', '.join(FLUSH_MODES)}, not {self.flush_mode!r}")

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "TimingProtocol":
        return TimingProtocol(**data)  # records from before flush_mode existed used "write", the default


FLUSH_MODES = ("write", "read")


@dataclass(frozen=True)
class Measurement:
    median_s: float
    samples_s: tuple[float, ...]
    protocol: TimingProtocol

    @staticmethod
    def from_samples(samples_s: list[float] | tuple[float, ...], protocol: TimingProtocol) -> "Measurement":
        if not samples_s:
            raise ValueError("a measurement needs at least one sample")
        return Measurement(statistics.median(samples_s), tuple(samples_s), protocol)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    def tflops(self, flops: int) -> float:
        return flops / self.median_s / 1e12

    def to_json(self) -> dict:
        return {"median_s": self.median_s, "samples_s": list(self.samples_s), "protocol": self.protocol.to_json()}

    @staticmethod
    def from_json(data: dict) -> "Measurement":
        return Measurement(data["median_s"], tuple(data["samples_s"]), TimingProtocol.from_json(data["protocol"]))


# --- the repetition policy (no GPU here, so it is tested on the CPU) ----------------------------
def next_batch(done: int, elapsed_s: float, protocol: TimingProtocol) -> int:
    """How many repetitions to enqueue next; 0 when the protocol is satisfied."""
    if done >= protocol.max_reps or (done >= protocol.min_reps and elapsed_s >= protocol.min_time_s):
        return 0
    if done == 0:
        return protocol.min_reps
    per_rep = elapsed_s / done
    wanted = protocol.min_time_s / per_rep - done if per_rep > 0 else protocol.max_reps
    # Overshoot a little so a slightly fast batch does not cost one more synchronize.
    return max(1, min(protocol.max_reps - done, int(wanted * 1.1) + 1))


def collect(timer: BatchTimer, protocol: TimingProtocol) -> Measurement:
    """Run batches from `timer` until next_batch says stop."""
    samples: list[float] = []
    while (count := next_batch(len(samples), sum(samples), protocol)) > 0:
        samples.extend(timer(count))
    return Measurement.from_samples(samples, protocol)


# --- CUDA events -------------------------------------------------------------------------------
class EventTimer:
    """Times batches of launches with a reused pool of CUDA event pairs."""

    def __init__(self, launch: Callable[[], None], flush: "L2Flush | None", stream: Any = 0,
                 before: Callable[[], None] | None = None):
        self.launch, self.flush, self.stream, self.before = launch, flush, stream, before
        self.events: list[tuple[Any, Any]] = []

    def _pair(self, index: int) -> tuple[Any, Any]:
        cu = driver()
        while len(self.events) <= index:
            flags = cu.CUevent_flags.CU_EVENT_DEFAULT
            start = checked(cu.cuEventCreate(flags), "cuEventCreate")
            end = checked(cu.cuEventCreate(flags), "cuEventCreate")
            self.events.append((start, end))
        return self.events[index]

    def __call__(self, count: int) -> list[float]:
        cu = driver()
        pairs = [self._pair(i) for i in range(count)]
        for start, end in pairs:
            if self.flush is not None:
                self.flush(self.stream)
            if self.before is not None:  # untimed work between the flush and the start event
                self.before()
            checked(cu.cuEventRecord(start, self.stream), "cuEventRecord")
            self.launch()
            checked(cu.cuEventRecord(end, self.stream), "cuEventRecord")
        checked(cu.cuEventSynchronize(pairs[-1][1]), "timed launches")
        return [checked(cu.cuEventElapsedTime(s, e), "cuEventElapsedTime") / 1e3 for s, e in pairs]

    def close(self) -> None:
        cu = driver()
        for pair in self.events:
            for event in pair:
                checked(cu.cuEventDestroy(event), "cuEventDestroy")
        self.events = []


# --- emptying L2 between repetitions ----------------------------------------------------------
FLUSH_READ_SOURCE = r"""// Reads every 16 bytes of a zero-filled buffer twice the size of L2, so L2 ends up holding only
// clean lines of it. The sum is zero, so the sink is never written; the compiler cannot know that.
extern "C" __global__ void l2_flush_read(const float4* __restrict__ A, float* __restrict__ D) {
    float sum = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < WORDS4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldcg(&A[i]);  // L2 only: the point is to fill L2
        sum += v.x + v.y + v.z + v.w;
    }
    if (sum != 0.0f) *D = sum;
}
"""


class L2Flush:
    """Empties L2 before each timed repetition, by a memset ("write") or a read kernel ("read")."""

    def __init__(self, l2_bytes: int, mode: str):
        self.mode = mode
        self.buffer = DeviceBuffer.alloc(2 * l2_bytes)
        self.scratch: DeviceBuffer | None = None  # ("read") memset first: it evicts what the reads leave
        self.sink: DeviceBuffer | None = None
        self.kernel = None
        self.bound: Callable[[], None] | None = None
        if mode == "read":
            try:
                self._load_reader()
            except BaseException:  # a reader that fails to compile or load must not leak 2×L2 of memory
                release(self._closers(), after_error=True)
                raise

    def _load_reader(self) -> None:
        from .compiler import compile_kernel
        from .device import query_device
        from .kernel_source import KernelSource
        from .runtime import LoadedKernel
        from .spec import GemmSpec

        self.buffer.fill_u32(0)
        self.scratch = DeviceBuffer.alloc(self.buffer.nbytes)
        self.sink = DeviceBuffer.alloc(4)
        words4 = self.buffer.nbytes // 16
        code = f"#define WORDS4 {words4}ull\n" + FLUSH_READ_SOURCE
        # KernelSource is the GEMM artifact; the flush kernel borrows its A and D argument slots.
        source = KernelSource(code=code, entry="l2_flush_read", grid=(4 * query_device().sm_count, 1, 1),
                              block=(256, 1, 1), args=("A", "D"), spec=GemmSpec(1, 1, 1), family="l2-flush",
                              family_version="1")
        self.kernel = LoadedKernel(compile_kernel(source, query_device().arch))

    def __call__(self, stream: Any = 0) -> None:
        if self.mode == "read":
            if self.bound is None:
                self.bound = self.kernel.bind({"A": self.buffer.ptr, "D": self.sink.ptr}, stream)
            self.scratch.fill_u32(0, stream)
            self.bound()
        else:
            self.buffer.fill_u32(0, stream)

    def _closers(self) -> list[Callable[[], None]]:
        closers = [self.buffer.free] + [b.free for b in (self.scratch, self.sink) if b is not None]
        return closers + ([self.kernel.unload] if self.kernel is not None else [])

    def close(self) -> None:
        release(self._closers(), after_error=False)


def measure(launch: Callable[[], None], protocol: TimingProtocol, l2_bytes: int, stream: Any = 0,
            before: Callable[[], None] | None = None) -> Measurement:
    """Time `launch` (which only enqueues work on `stream`) under `protocol`.

    `before`, when given, is enqueued after each flush and before the start event: its work is not
    timed but shapes the state `launch` meets (e.g. the GEMM whose output an elementwise pass reads,
    to time the pass as it runs inside the pair).
    """
    ensure_context()
    with device_lock():  # one timed section per GPU at a time, across processes (gpu_lock)
        return _measure(launch, protocol, l2_bytes, stream, before)


def _measure(launch: Callable[[], None], protocol: TimingProtocol, l2_bytes: int, stream: Any,
             before: Callable[[], None] | None) -> Measurement:
    for _ in range(protocol.warmup):
        if before is not None:
            before()
        launch()
    checked(driver().cuStreamSynchronize(stream), "warm-up launches")
    flush = L2Flush(l2_bytes, protocol.flush_mode) if protocol.flush_l2 and l2_bytes > 0 else None
    timer = EventTimer(launch, flush, stream, before)
    closers = [timer.close] + ([flush.close] if flush is not None else [])
    try:
        result = collect(timer, protocol)
    except BaseException:
        release(closers, after_error=True)
        raise
    release(closers, after_error=False)
    return result


# --- several launches timed in alternation ------------------------------------------------------
def round_order(names: list[str], round_index: int) -> list[str]:
    """The order of one round, from a balanced cycle of rounds (a Williams design: n rounds for n
    names, 2n when n is odd): over the cycle every name runs in every place equally often, and
    directly after every other name equally often.

    Rotating one fixed order was not enough: each launch then nearly always followed the same one,
    and on the H100 a kernel timed right after torch's unfused eager launches measured ~1% slower
    than the same kernel elsewhere in the round (2026-11-23, git show dcdd80f:bench/results/2026-11-23-h100-fused-clock.md),
    which a fixed neighbour turns into a bias between variants."""
    n = len(names)
    if n < 2:
        return list(names)
    base, low, high = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...: the differences hit every step once
    while low <= high:
        base.append(low)
        low += 1
        if low <= high:
            base.append(high)
            high -= 1
    cycle = n if n % 2 == 0 else 2 * n
    index = round_index % cycle
    order = [(i + index) % n for i in base]
    if index >= n:  # odd n: the second half of the cycle runs the rows reversed
        order.reverse()
    return [names[i] for i in order]


def ratio_to(reference_s: list[float], other_s: list[float]) -> tuple[float, float, float]:
    """Per-round ratios reference / other (higher: other is faster): (median, lower quartile, upper
    quartile). Both ran in the same round, so the GPU's clock and temperature were the same for both."""
    ratios = sorted(r / o for r, o in zip(reference_s, other_s, strict=True))
    if not ratios:
        raise ValueError("no rounds to compare")
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return statistics.median(ratios), quartiles[0], quartiles[2]


def measure_alternating(launches: dict[str, Callable[[], None]], rounds: int, l2_bytes: int,
                        protocol: TimingProtocol = TimingProtocol(), stream: Any = 0,
                        lead_s: float = 0.0) -> dict[str, list[float]]:
    """Time each of `launches` once per round, `rounds` rounds, L2 emptied before every launch (as
    `protocol` says); returns each name's seconds, round by round.

    For kernels long enough that the GPU's power limit moves its clock between timings (a 1.5 ms
    8192^3 GEMM at 700 W): timed in turn within a round, a kernel and its reference see the same clock,
    so the ratio of their times in each round is steady where the times themselves are not.

    lead_s > 0: stream_timing's Hold keeps the GPU busy that long after each flush, before the start
    event. A launch whose host side is slow (torch's Python and cuBLAS's heuristics: tens of µs, at
    times far more) could otherwise reach the GPU after the start event had passed, and the idle gap
    would be timed as part of the kernel."""
    if rounds < 1 or not launches:
        raise ValueError("measure_alternating needs at least one launch and one round")
    ensure_context()
    names = list(launches)
    with device_lock():
        for launch in launches.values():
            for _ in range(protocol.warmup):
                launch()
        checked(driver().cuStreamSynchronize(stream), "warm-up launches")
        flush = L2Flush(l2_bytes, protocol.flush_mode) if protocol.flush_l2 and l2_bytes > 0 else None
        hold = Hold() if lead_s > 0 else None
        before = (lambda: hold(lead_s, stream)) if hold is not None else None
        timers = {name: EventTimer(launch, flush, stream, before) for name, launch in launches.items()}
        closers = ([t.close for t in timers.values()] + ([flush.close] if flush is not None else [])
                   + ([hold.close] if hold is not None else []))
        times: dict[str, list[float]] = {name: [] for name in names}
        try:
            for index in range(rounds):
                for name in round_order(names, index):
                    times[name].extend(timers[name](1))
        except BaseException:
            release(closers, after_error=True)
            raise
        release(closers, after_error=False)
    return times
