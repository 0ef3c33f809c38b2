"""stream_timing: the set-count rule, argument checks and the batching arithmetic on the CPU (a fake
clock, then the fake driver); on a GPU, a bf16 GEMV timed back to back against one flushed launch."""
from __future__ import annotations

import math

import cuda.bindings
import pytest

from gemmtune.stream_timing import (BatchTime, StreamTiming, hold_kernel, reps_for, run_batches, set_count,
                                    time_stream)

L2 = 50 * 2**20  # the H100's L2


# --- how many sets ------------------------------------------------------------------------------
@pytest.mark.parametrize("bytes_per_set", [64 << 10, 4 << 20, 32 << 20, 33_562_624, 50 << 20, 200 << 20, 1 << 30])
def test_sets_hold_three_l2s_and_at_least_four(bytes_per_set: int) -> None:
    sets = set_count(bytes_per_set, 2 << 20)
    assert sets >= 4 and sets * bytes_per_set >= 3 * (2 << 20)
    if sets > 4:  # no more than needed
        assert (sets - 1) * bytes_per_set < 3 * (2 << 20)


def test_set_count_examples() -> None:
    assert set_count(33_562_624, L2) == 5  # 1x4096x4096 bf16: 32 MiB of weights, 50 MiB of L2
    assert set_count(3 * L2, L2) == 4
    assert set_count(L2 // 4, L2) == 12
    assert set_count(1, 0) == 4
    assert set_count(8 << 20, L2) > set_count(16 << 20, L2)  # smaller sets, more of them


def test_set_count_rejects_nonsense_and_tiny_sets() -> None:
    for bad in ((0, L2), (-5, L2), (1024, -1)):
        with pytest.raises(ValueError):
            set_count(*bad)
    with pytest.raises(ValueError, match="larger problem"):
        set_count(64, L2)  # 2.5 million sets


def test_reps_fill_a_batch() -> None:
    assert reps_for(5) == 20 and reps_for(4) == 25 and reps_for(12) == 9 and reps_for(500) == 1
    assert reps_for(3, launches=10) == 4
    with pytest.raises(ValueError):
        reps_for(0)


# --- the batching arithmetic, with a fake clock -------------------------------------------------
class FakeClock:
    """Each launch takes `per_launch[b]` seconds in batch b (the first calls are the warm-up)."""

    def __init__(self, per_launch: list[float], queued: bool = True):
        self.per_launch, self.queued = per_launch, queued
        self.order: list[int] = []
        self.calls = 0

    def launch(self, i: int) -> None:
        self.order.append(i)

    def __call__(self, batch) -> BatchTime:
        before = len(self.order)
        batch()
        seconds = (len(self.order) - before) * self.per_launch[self.calls]
        self.calls += 1
        return BatchTime(seconds, self.queued)


def test_batches_rotate_sets_and_divide_by_launches() -> None:
    clock = FakeClock([1.0, 2e-6, 3e-6, 1e-6])  # a slow warm-up batch, then three timed ones
    timing = time_stream(clock.launch, sets=3, reps=2, batches=3, warmup=1, clock=clock)
    assert clock.order == [0, 1, 2] * 2 * 4  # warm-up and 3 batches, each 2 rotations of 3 sets
    assert timing == StreamTiming(pytest.approx(2e-6), 3, 6, 3, pytest.approx((2e-6, 3e-6, 1e-6)), True)
    assert timing.to_json()["launches"] == 6


def test_warm_up_is_not_timed_and_queueing_is_reported() -> None:
    clock = FakeClock([5.0, 5.0, 4e-6], queued=False)
    timing = run_batches(clock.launch, sets=4, reps=1, batches=1, warmup=2, clock=clock)
    assert timing.per_launch_s == pytest.approx(4e-6) and timing.launches == 4 and not timing.queued_ahead


@pytest.mark.parametrize("bad", [dict(reps=0), dict(reps=-1), dict(sets=0), dict(batches=0), dict(warmup=-1)])
def test_bad_counts_are_value_errors(bad: dict) -> None:
    args = dict(sets=4, reps=2, batches=3, warmup=1) | bad
    clock = FakeClock([1e-6] * 10)
    with pytest.raises(ValueError, match="stream timing needs"):
        time_stream(clock.launch, clock=clock, **args)
    assert clock.order == []  # nothing launched


# --- the real path (events, hold kernel, our kernel's bound launches) on the fake driver ---------
def test_hold_kernel_compiles() -> None:
    compiled = hold_kernel("sm_90")
    assert compiled.source.args == ("alpha", "D") and compiled.resources.registers > 0


def test_event_clock_and_kernel_launches_on_the_fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_driver import FakeDriver, param_float, param_pointer
    from gemmtune import device
    from gemmtune.compiler import CompiledKernel, ResourceUsage
    from gemmtune.errors import SpecError
    from gemmtune.kernel_source import KernelSource
    from gemmtune.runtime import DeviceBuffer, LoadedKernel
    from gemmtune.spec import GemmSpec
    from gemmtune.stream_timing import kernel_launches

    holds: list[float] = []
    outputs: list[int] = []
    fake = FakeDriver({"stream_hold": lambda params: holds.append(param_float(params, 0)),
                       "gemv": lambda params: outputs.append(param_pointer(params, 2))})
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    caches = (device._init_driver, device._primary_context, device.query_device)
    for cached in caches:
        cached.cache_clear()
    try:
        spec = GemmSpec(1, 8, 16, "nt", "bf16")
        source = KernelSource("// python", "gemv", (1, 1, 1), (32, 1, 1), ("A", "B", "D"), spec, "fake", "1")
        usage = ResourceUsage(32, 0, 0, 0, 0)
        kernel = LoadedKernel(CompiledKernel(source, "sm_90", b"cubin", "", usage, "", 0.0, "13"))
        sets = [tuple(DeviceBuffer.alloc(n) for n in (32, 256, 16)) for _ in range(4)]
        timing = time_stream(kernel_launches(kernel, sets, stream=0), sets=4, reps=3, batches=2, warmup=1)
        assert outputs == [s[2].ptr for s in sets] * 3 * 3  # warm-up + 2 batches of 3 rotations
        assert len(holds) == 3 and holds[0] == pytest.approx(1e3)  # µs: HOLD_MIN_S before the first batch
        assert timing.sets == 4 and timing.launches == 12 and timing.batches == 2 and timing.per_launch_s >= 0
        assert not timing.queued_ahead  # the fake runs launches as they come: nothing is ever queued
        assert fake.events_alive == 0 and fake.modules_alive == 1  # the clock cleaned up; the caller's kernel stays
        with pytest.raises(SpecError, match="B: buffer holds 16 B"):
            kernel_launches(kernel, [(sets[0][0], sets[0][2], sets[0][2])])  # each set is checked
        kernel.unload()
        for s in sets:
            for buf in s:
                buf.free()
    finally:
        for cached in caches:
            cached.cache_clear()


# --- GPU -----------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_bf16_gemv_back_to_back_is_not_slower_than_one_flushed_launch(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    import gemmtune
    from gemmtune.baseline import prepare
    from gemmtune.device import query_device
    from gemmtune.evaluate import evaluate
    from gemmtune.runtime import LoadedKernel
    from gemmtune.spec import GemmSpec
    from gemmtune.stream_timing import kernel_launches
    from gemmtune.timing import TimingProtocol
    from gemmtune.verify import compare

    spec = GemmSpec(1, 4096, 4096, "nt", "bf16")
    kern = gemmtune.build(spec, db_path=tmp_path / "empty.sqlite")  # as bench_untuned builds it
    protocol = TimingProtocol(warmup=3, min_reps=10, max_reps=100, min_time_s=0.05, flush_mode="read")
    single = evaluate(kern.compiled, protocol)
    assert single.ok, single.verify.message
    prepared = prepare(spec)
    sets_n = set_count(spec.min_bytes, query_device().l2_bytes)
    sets = [(prepared.gpu["A"].clone(), prepared.gpu["B"].clone(),
             torch.full((1, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")) for _ in range(sets_n)]
    stream = torch.cuda.current_stream().cuda_stream
    with LoadedKernel(kern.compiled) as loaded:
        timing = time_stream(kernel_launches(loaded, sets, stream), sets_n, stream, reps=reps_for(sets_n))
    torch.cuda.synchronize()
    print(f"single {single.measurement.median_s * 1e6:.2f} µs, stream {timing}")
    assert math.isfinite(timing.per_launch_s) and timing.per_launch_s > 0
    assert timing.per_launch_s <= 1.2 * single.measurement.median_s
    assert timing.queued_ahead
    for _, _, d in (sets[0], sets[-1]):  # the rotating launches wrote every set's D, right
        verdict = compare(d.float().cpu().numpy(), prepared.ref, spec.dtype, spec.k, spec.out_dtype)
        assert verdict.ok, verdict.message
