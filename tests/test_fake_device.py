"""device/runtime/timing/evaluate logic against a fake driver (see fake_driver.py): no GPU needed."""
from __future__ import annotations

import cuda.bindings
import numpy as np
import pytest

from fake_driver import FakeDriver, device_array, installed, param_float, param_pointer
from gemmtune import device
from gemmtune.compiler import CompiledKernel, ResourceUsage
from gemmtune.epilogue import Epilogue
from gemmtune.errors import LaunchError, ResourceError
from gemmtune.evaluate import evaluate
from gemmtune.kernel_source import KernelSource
from gemmtune.runtime import DeviceBuffer, LoadedKernel, synchronize
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol, measure

SPEC = GemmSpec(24, 40, 16, "nn", epilogue=Epilogue.parse("alpha"))
QUICK = TimingProtocol(warmup=1, min_reps=3, max_reps=5, min_time_s=0.0)


def python_gemm(skip_last: bool = False):
    """A 'kernel' computing D = alpha·A·B in fp32 from its packed arguments (A, B, alpha, D)."""
    def kernel(params: int) -> None:
        a = device_array(param_pointer(params, 0), (SPEC.m, SPEC.k))
        b = device_array(param_pointer(params, 1), (SPEC.k, SPEC.n))
        d = device_array(param_pointer(params, 3), (SPEC.m, SPEC.n))
        result = (np.float32(param_float(params, 2)) * (a @ b)).astype(np.float32)
        if skip_last:
            d[:, :-1] = result[:, :-1]
        else:
            d[:] = result
    return kernel


def compiled(entry: str = "gemm", dynamic_smem: int = 0, registers: int = 32, threads: int = 128) -> CompiledKernel:
    source = KernelSource("// python", entry, (1, 1, 1), (threads, 1, 1), ("A", "B", "alpha", "D"), SPEC, "fake", "1",
                          dynamic_smem=dynamic_smem)
    return CompiledKernel(source, "sm_90", b"cubin", "", ResourceUsage(registers, 0, 0, 0, 0), "", 0.0, "13.0")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    with installed(monkeypatch, FakeDriver({"gemm": python_gemm(), "broken": python_gemm(skip_last=True)})) as driver:
        yield driver


def test_query_device(fake: FakeDriver) -> None:
    info = device.query_device()
    assert info.name == "Fake H100" and info.arch == "sm_90" and info.sm_count == 132
    assert info.driver_version == "12.8" and device.gpu_available()
    assert device.free_memory() == 79 << 30


def test_buffer_round_trip_and_nan_fill(fake: FakeDriver) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with DeviceBuffer.from_numpy(data) as buf:
        np.testing.assert_array_equal(buf.to_numpy((3, 4)), data)
        buf.fill_nan()
        assert np.isnan(buf.to_numpy((3, 4))).all()
    assert fake.memory == {}


def test_evaluate_correct_kernel_is_timed(fake: FakeDriver) -> None:
    result = evaluate(compiled("gemm"), QUICK, np.random.default_rng(0))
    assert result.ok, result.verify.message
    assert 3 <= len(result.measurement.samples_s) <= 5
    assert fake.calls.count("memset") == len(result.measurement.samples_s)  # one L2 flush per timed rep
    assert fake.memory == {} and fake.events_alive == 0 and fake.modules_alive == 0


def test_evaluate_wrong_kernel_is_not_timed(fake: FakeDriver) -> None:
    result = evaluate(compiled("broken"), QUICK, np.random.default_rng(0))
    assert not result.ok and result.measurement is None
    assert result.verify.nan_count == SPEC.m  # the unwritten column stays NaN
    assert fake.calls.count("launch") == 1
    assert fake.memory == {} and fake.modules_alive == 0


def test_evaluate_catches_output_that_changes_while_timing(fake: FakeDriver) -> None:
    runs = {"n": 0}
    good, bad = python_gemm(), python_gemm(skip_last=True)

    def flaky(params: int) -> None:
        runs["n"] += 1
        (good if runs["n"] == 1 else bad)(params)

    fake.kernels["flaky"] = flaky
    result = evaluate(compiled("flaky"), QUICK, np.random.default_rng(0))
    assert not result.ok and result.measurement is None
    assert result.verify.message.startswith("after timing:")


def test_fault_becomes_launch_error_and_frees_everything(fake: FakeDriver) -> None:
    def faulting(params: int) -> None:
        fake.pending_error = fake_error("CUDA_ERROR_ILLEGAL_ADDRESS")

    fake.kernels["faulting"] = faulting
    with pytest.raises(LaunchError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        evaluate(compiled("faulting"), QUICK, np.random.default_rng(0))
    assert fake.memory == {} and fake.modules_alive == 0


def fake_error(name: str):
    return getattr(cuda.bindings.driver.CUresult, name)


def test_verify_only_skips_timing(fake: FakeDriver) -> None:
    result = evaluate(compiled("gemm"), QUICK, np.random.default_rng(0), verify_only=True)
    assert result.ok and result.measurement is None and "record" not in fake.calls


def test_missing_entry_and_resources(fake: FakeDriver) -> None:
    with pytest.raises(LaunchError, match="CUDA_ERROR_NOT_FOUND"):
        LoadedKernel(compiled("nowhere"))
    assert fake.modules_alive == 0
    with pytest.raises(ResourceError, match="registers"):
        LoadedKernel(compiled("gemm", registers=255, threads=1024))
    assert fake.modules_alive == 0


def test_dynamic_shared_memory_opt_in(fake: FakeDriver) -> None:
    with LoadedKernel(compiled("gemm", dynamic_smem=100 * 1024)):
        pass
    assert "set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=102400" in fake.calls


def test_measure_without_flush(fake: FakeDriver) -> None:
    kernel_runs = []
    protocol = TimingProtocol(warmup=2, min_reps=4, max_reps=4, min_time_s=0.0, flush_l2=False)
    m = measure(lambda: kernel_runs.append(1), protocol, l2_bytes=1 << 20)
    assert len(m.samples_s) == 4 and len(kernel_runs) == 6 and "memset" not in fake.calls
    assert all(s >= 0 for s in m.samples_s) and fake.events_alive == 0
    synchronize()


def test_allocation_keeps_the_current_context(fake: FakeDriver) -> None:
    DeviceBuffer.alloc(64).free()
    assert fake.context == 0x5000  # none was current: GPU 0's primary context
    fake.context = 0x5001  # as if a kernel had been loaded on GPU 1
    DeviceBuffer.alloc(64).free()
    assert fake.context == 0x5001


# --- 16-bit storage: upload, poison, read back --------------------------------------------------------
def half_gemm(spec: GemmSpec, skip_last: bool = False):
    """A 'kernel' on 16-bit storage (A, B, D): fp32 products of the stored inputs, D rounded once."""
    import ctypes

    from gemmtune.dtypes import from_storage, to_storage

    def kernel(params: int) -> None:
        def stored(index: int, shape: tuple[int, ...]) -> np.ndarray:
            return device_array(param_pointer(params, index), shape, ctypes.c_uint16)

        a, b = (from_storage(stored(i, s).view(np.float16) if spec.dtype == "fp16" else stored(i, s), spec.dtype)
                for i, s in ((0, spec.a_shape), (1, spec.b_shape)))
        result = to_storage((a.astype(np.float32) @ b.astype(np.float32)), spec.out_dtype).view(np.uint16)
        d = stored(2, (spec.m, spec.n))
        if skip_last:
            d[:, :-1] = result[:, :-1]
        else:
            d[:] = result
    return kernel


def half_compiled(spec: GemmSpec, entry: str) -> CompiledKernel:
    source = KernelSource("// python", entry, (1, 1, 1), (128, 1, 1), ("A", "B", "D"), spec, "fake", "1")
    return CompiledKernel(source, "sm_90", b"cubin", "", ResourceUsage(32, 0, 0, 0, 0), "", 0.0, "13.0")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_buffers_poison_every_element(fake: FakeDriver, dtype: str) -> None:
    from gemmtune.dtypes import STORAGE, from_storage, round_to, to_storage

    values = round_to(np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), dtype)  # an odd count of halves
    with DeviceBuffer.from_numpy(to_storage(values, dtype)) as buf:
        assert buf.nbytes == 30
        np.testing.assert_array_equal(from_storage(buf.to_numpy((3, 5), STORAGE[dtype]), dtype), values)
        buf.fill_nan(dtype)
        assert np.isnan(from_storage(buf.to_numpy((3, 5), STORAGE[dtype]), dtype)).all()  # the 15th too


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_evaluate_16_bit_round_trip(fake: FakeDriver, dtype: str) -> None:
    spec = GemmSpec(13, 7, 24, "nn", dtype)
    fake.kernels.update({"half": half_gemm(spec), "half_broken": half_gemm(spec, skip_last=True)})
    good = evaluate(half_compiled(spec, "half"), QUICK, np.random.default_rng(0))
    assert good.ok, good.verify.message
    bad = evaluate(half_compiled(spec, "half_broken"), QUICK, np.random.default_rng(0))
    assert not bad.ok and bad.verify.nan_count == spec.m  # the unwritten column keeps its 16-bit NaN
    assert fake.memory == {} and fake.modules_alive == 0


def test_time_in_turn_times_the_right_kernels_round_by_round_and_frees_everything(fake: FakeDriver) -> None:
    """evaluate.time_in_turn (the tuner's last word): each kernel checked first, the wrong one (None) not timed,
    the right ones timed once a round; modules, buffers and events let go after."""
    from gemmtune.evaluate import prepare, time_in_turn

    rounds = time_in_turn([compiled("gemm"), compiled("broken"), compiled("gemm")], prepare(SPEC, np.random.default_rng(0)),
                          4, QUICK)
    assert rounds[1] is None and len(rounds[0]) == len(rounds[2]) == 4
    assert fake.calls.count("launch") == 3 + 2 * (QUICK.warmup + 4)  # a check each, then warm-up and 4 rounds of two
    assert fake.memory == {} and fake.events_alive == 0 and fake.modules_alive == 0


def test_time_in_turn_catches_output_that_changes_while_timing(fake: FakeDriver) -> None:
    from gemmtune.errors import VerifyError
    from gemmtune.evaluate import prepare, time_in_turn

    runs = {"n": 0}
    good, bad = python_gemm(), python_gemm(skip_last=True)

    def flaky(params: int) -> None:
        runs["n"] += 1
        (good if runs["n"] == 1 else bad)(params)

    fake.kernels["flaky"] = flaky
    with pytest.raises(VerifyError, match="after timing in turn"):
        time_in_turn([compiled("flaky")], prepare(SPEC, np.random.default_rng(0)), 3, QUICK)
    assert fake.memory == {} and fake.modules_alive == 0
