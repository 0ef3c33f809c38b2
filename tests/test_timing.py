"""timing.py on the CPU: the Measurement record and the repetition policy with a fake timer."""
from __future__ import annotations

import json
import statistics

import pytest

from gemmtune.timing import Measurement, TimingProtocol, collect, next_batch


def test_measurement_median_keeps_samples_and_protocol() -> None:
    protocol = TimingProtocol(warmup=1, min_reps=3, max_reps=9, min_time_s=0.0, flush_l2=False)
    odd = Measurement.from_samples([3e-3, 1e-3, 2e-3], protocol)
    assert odd.median_s == 2e-3 and odd.samples_s == (3e-3, 1e-3, 2e-3) and odd.min_s == 1e-3
    assert Measurement.from_samples([4.0, 1.0, 2.0, 3.0], protocol).median_s == 2.5
    with pytest.raises(ValueError):
        Measurement.from_samples([], protocol)


def test_measurement_json_round_trip_and_tflops() -> None:
    m = Measurement.from_samples([1e-3, 2e-3, 3e-3], TimingProtocol())
    data = json.loads(json.dumps(m.to_json()))
    assert data["median_s"] == 2e-3 and data["samples_s"] == [1e-3, 2e-3, 3e-3]
    assert data["protocol"]["flush_l2"] is True
    assert Measurement.from_json(data) == m
    assert m.tflops(2 * 1024**3) == pytest.approx(2 * 1024**3 / 2e-3 / 1e12)


def test_protocol_rejects_inconsistent_counts() -> None:
    with pytest.raises(ValueError):
        TimingProtocol(min_reps=10, max_reps=5)
    with pytest.raises(ValueError):
        TimingProtocol(min_reps=0)
    assert TimingProtocol.from_json(TimingProtocol().to_json()) == TimingProtocol()


class FakeTimer:
    """Every launch takes `seconds`; records the batch sizes asked for."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.batches: list[int] = []

    def __call__(self, count: int) -> list[float]:
        self.batches.append(count)
        return [self.seconds] * count


def test_slow_kernel_stops_at_min_reps() -> None:
    timer = FakeTimer(0.1)
    m = collect(timer, TimingProtocol(min_reps=5, max_reps=100, min_time_s=0.2))
    assert len(m.samples_s) == 5 and timer.batches == [5]


def test_fast_kernel_repeats_until_min_time() -> None:
    timer = FakeTimer(1e-4)
    m = collect(timer, TimingProtocol(min_reps=10, max_reps=10_000, min_time_s=0.05))
    assert sum(m.samples_s) >= 0.05
    assert len(m.samples_s) <= 600  # overshoots a little, not wildly
    assert len(timer.batches) <= 3  # few synchronizes


def test_very_fast_kernel_is_capped_at_max_reps() -> None:
    timer = FakeTimer(1e-7)
    m = collect(timer, TimingProtocol(min_reps=10, max_reps=200, min_time_s=1.0))
    assert len(m.samples_s) == 200


def test_next_batch_policy() -> None:
    p = TimingProtocol(min_reps=10, max_reps=50, min_time_s=1.0)
    assert next_batch(0, 0.0, p) == 10
    assert next_batch(50, 0.1, p) == 0
    assert next_batch(10, 2.0, p) == 0
    assert 1 <= next_batch(10, 0.5, p) <= 40
    assert next_batch(10, 0.0, p) == 40  # timer resolution: no estimate, so fill up to max


def test_flush_mode_is_checked_and_defaults_to_the_old_protocol():
    from gemmtune.timing import TimingProtocol

    assert TimingProtocol().flush_mode == "write"
    assert TimingProtocol.from_json({"warmup": 1, "min_reps": 1, "max_reps": 1, "min_time_s": 0.0,
                                     "flush_l2": True}).flush_mode == "write"
    with pytest.raises(ValueError, match="flush_mode"):
        TimingProtocol(flush_mode="evict")


def test_read_flush_kernel_compiles_without_a_gpu(tmp_path):
    from gemmtune.compiler import compile_kernel
    from gemmtune.kernel_source import KernelSource
    from gemmtune.spec import GemmSpec
    from gemmtune.timing import FLUSH_READ_SOURCE

    source = KernelSource("#define WORDS4 7864320ull\n" + FLUSH_READ_SOURCE, "l2_flush_read", (528, 1, 1),
                          (256, 1, 1), ("A", "D"), GemmSpec(1, 1, 1), "l2-flush", "1")
    compiled = compile_kernel(source, "sm_90", tmp_path)
    assert compiled.resources.spills == 0 and "ld.global.cg" in compiled.ptx


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8])
def test_round_order_balances_places_and_neighbours(n):
    from gemmtune.timing import round_order

    names = ["cuBLAS", *(f"v{i}" for i in range(n - 1))]
    cycle = n if n % 2 == 0 else 2 * n
    orders = [round_order(names, i) for i in range(cycle)]
    assert all(sorted(order) == sorted(names) for order in orders)
    for place in range(n):  # every name in every place equally often
        counts = {name: sum(order[place] == name for order in orders) for name in names}
        assert len(set(counts.values())) == 1, (place, counts)
    follows = {(a, b): 0 for a in names for b in names if a != b}
    for order in orders:
        for a, b in zip(order, order[1:]):
            follows[(a, b)] += 1
    if n > 1:  # every name directly after every other equally often
        assert len(set(follows.values())) == 1, follows
    assert round_order(names, cycle) == orders[0]


def test_ratio_to_compares_round_by_round():
    from gemmtune.timing import ratio_to

    # The clock halves in the second round for both: the per-round ratio stays 1.25.
    assert ratio_to([1.0, 2.0, 1.0], [0.8, 1.6, 0.8])[0] == pytest.approx(1.25)
    median, low, high = ratio_to([1.0, 1.0, 1.0, 1.0], [1.0, 0.5, 2.0, 1.0])
    assert median == pytest.approx(1.0) and low < median < high
    with pytest.raises(ValueError):
        ratio_to([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        ratio_to([], [])


@pytest.mark.gpu
def test_a_lead_keeps_slow_host_launches_out_of_the_timing():
    """A launch whose host side takes 600 µs before it enqueues a short kernel: timed from the flush
    alone, the GPU waits for the host inside the timing; with a 3 ms lead it does not."""
    import time

    from gemmtune.device import query_device
    from gemmtune.runtime import DeviceBuffer, LoadedKernel
    from gemmtune.stream_timing import hold_kernel
    from gemmtune.timing import TimingProtocol, measure_alternating

    try:
        dev = query_device()
    except Exception as exc:  # no GPU or no driver
        pytest.skip(f"no GPU: {exc}")
    kernel = LoadedKernel(hold_kernel(dev.arch))
    sink = DeviceBuffer.alloc(4)
    try:
        short = kernel.bind({"alpha": 20.0, "D": sink.ptr})  # 20 µs on the GPU

        def slow_host() -> None:
            end = time.perf_counter() + 600e-6
            while time.perf_counter() < end:
                pass
            short()

        protocol = TimingProtocol(warmup=2)
        without = measure_alternating({"slow": slow_host}, 20, dev.l2_bytes, protocol)["slow"]
        with_lead = measure_alternating({"slow": slow_host}, 20, dev.l2_bytes, protocol, lead_s=3e-3)["slow"]
    finally:
        sink.free()
        kernel.unload()
    assert statistics.median(with_lead) < 100e-6 < 300e-6 < statistics.median(without)
