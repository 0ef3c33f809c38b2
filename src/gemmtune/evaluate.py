"""Verify, then time, one compiled kernel: the single path every family and the tuner go through.

Correctness first: fresh random inputs, D poisoned with NaN, one launch, compared with a float64
reference. A wrong kernel is never timed. Timing keeps the inputs in place and relies on the
protocol's L2 flush (TimingProtocol.flush_l2) for cold-cache numbers rather than rotating input
copies: a flush costs 2×L2 of memory instead of several copies of the operands. With
flush_l2=False the times are warm-L2 times. The output is checked again after timing, so a kernel
whose result changes from run to run (a race) is caught too.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from .compiler import CompiledKernel
from .device import free_memory, query_device
from .dtypes import STORAGE, from_storage, to_storage
from .errors import VerifyError
from .gpu_lock import device_lock
from .runtime import DeviceBuffer, LoadedKernel, release, synchronize
from .spec import GemmSpec
from .timing import Measurement, TimingProtocol, measure, measure_alternating
from .verify import VerifyResult, compare, gpu_reference, make_inputs, reference


@dataclass(frozen=True)
class Evaluation:
    verify: VerifyResult
    measurement: Measurement | None  # None when the kernel was wrong or only verified

    @property
    def ok(self) -> bool:
        return self.verify.ok

    def tflops(self, spec: GemmSpec) -> float | None:
        return self.measurement.tflops(spec.flops) if self.measurement else None

    def to_json(self) -> dict:
        return {"verify": self.verify.to_json(),
                "measurement": self.measurement.to_json() if self.measurement else None}


def upload_inputs(spec: GemmSpec, inputs: dict, buffers: dict[str, DeviceBuffer]) -> dict[str, int | float]:
    """Copy array inputs to the device, each in its storage type (A, B: the input type; C, bias: the
    output type; bf16 as its bit patterns), and allocate D in the output type (recording each buffer
    in `buffers` as soon as it exists, so the caller frees it whatever fails next); returns the
    bindings by argument name."""
    bindings: dict[str, int | float] = {}
    for name, value in inputs.items():
        if isinstance(value, np.ndarray):
            buffers[name] = DeviceBuffer.from_numpy(to_storage(value, spec.storage_dtype(name)))
            bindings[name] = buffers[name].ptr
        else:
            bindings[name] = value
    buffers["D"] = DeviceBuffer.alloc(spec.m * spec.n * spec.out_element_bytes)
    bindings["D"] = buffers["D"].ptr
    return bindings


def read_output(d: DeviceBuffer, spec: GemmSpec) -> np.ndarray:
    """D copied back and converted from its storage type to float64."""
    return from_storage(d.to_numpy((spec.m, spec.n), STORAGE[spec.out_dtype]), spec.out_dtype)


def check_output(d: DeviceBuffer, spec: GemmSpec, expected: np.ndarray) -> VerifyResult:
    return judge_output(read_output(d, spec), spec, expected)


def judge_output(out: Any, spec: GemmSpec, expected: Any) -> VerifyResult:
    """D (read back, or a float64 tensor on the GPU) against the reference."""
    return compare(out, expected, spec.dtype, spec.k, spec.out_dtype)


class _CudaArray:
    """D's device memory seen through __cuda_array_interface__, so torch can read it in place."""

    TYPESTR = {"fp32": "<f4", "tf32": "<f4", "fp16": "<f2", "bf16": "<i2"}  # bf16: its bits, viewed after

    def __init__(self, d: DeviceBuffer, spec: GemmSpec):
        self.__cuda_array_interface__ = {"shape": (spec.m, spec.n), "typestr": self.TYPESTR[spec.out_dtype],
                                         "data": (d.ptr, False), "version": 3, "strides": None}


def read_output_on_gpu(d: DeviceBuffer, spec: GemmSpec, ordinal: int) -> Any:
    """D as a float64 torch tensor on the GPU, never copied to the host."""
    import torch

    raw = torch.as_tensor(_CudaArray(d, spec), device=f"cuda:{ordinal}")
    return (raw.view(torch.bfloat16) if spec.out_dtype == "bf16" else raw).double()


Hold = Callable[[], AbstractContextManager]  # the GPU lock around GPU work, or nullcontext


@dataclass(frozen=True)
class OutputCheck:
    """How D is checked: `read` it back, `judge` it against the reference. A judge on the GPU runs
    under the GPU lock with the launches; one on the CPU runs after the lock is let go."""

    read: Callable[[], Any]
    judge: Callable[[Any], VerifyResult]
    on_gpu: bool = False


def check_then_time(run: Callable[[], None], poison: Callable[[], None], check: OutputCheck,
                    protocol: TimingProtocol, verify_only: bool, l2_bytes: int,
                    hold: Hold = nullcontext) -> Evaluation:
    """The one order every kernel (or launch sequence) is judged in: poison the outputs, run once,
    check; then poison again, time `run` under `protocol`, and check again (a race shows there).
    `hold` is held for the GPU work (launches, D read back, a judge on the GPU) and let go while a
    CPU judge compares: for a large D that takes seconds, in which another worker may time."""
    def run_once() -> None:
        poison()
        run()
        synchronize()

    def timed() -> Measurement:
        poison()  # again, so the check after timing sees only what the timed launches wrote
        return measure(run, protocol, l2_bytes)

    _, first = _held_check(check, hold, run_once)
    if not first.ok or verify_only:
        return Evaluation(first, None)
    measurement, again = _held_check(check, hold, timed)
    if not again.ok:
        return Evaluation(replace(again, message=f"after timing: {again.message}"), None)
    return Evaluation(first, measurement)


def _held_check(check: OutputCheck, hold: Hold, gpu_work: Callable[[], Any] = lambda: None) -> tuple[Any, VerifyResult]:
    """`gpu_work`, then D read back, under `hold`; judged there where the judge is on the GPU, else after
    `hold` is let go. Returns what `gpu_work` returned and the verdict."""
    with hold():
        done = gpu_work()
        out = check.read()
        verdict = check.judge(out) if check.on_gpu else None
    return done, verdict or check.judge(out)


@dataclass(frozen=True)
class Prepared:
    """A spec's random inputs and their float64 reference: what every check of that spec needs
    before any kernel runs. evaluate() draws fresh ones per call unless it is given these; a tuner
    that measures many candidates of one shape passes the same (tune/worker.py)."""

    spec: GemmSpec
    inputs: dict
    expected: np.ndarray


def prepare(spec: GemmSpec, rng: np.random.Generator | None = None, ordinal: int = 0) -> Prepared:
    """Draw `spec`'s inputs and compute the reference (its product on the GPU under the GPU lock
    for large problems; another process's timing must not see it)."""
    inputs = make_inputs(spec, rng if rng is not None else np.random.default_rng())
    return Prepared(spec, inputs, reference(spec, inputs, gpu_reference(spec), hold=lambda: device_lock(ordinal)))


def evaluate(compiled: CompiledKernel, protocol: TimingProtocol = TimingProtocol(),
             rng: np.random.Generator | None = None, verify_only: bool = False, ordinal: int = 0,
             prepared: Prepared | None = None) -> Evaluation:
    """Load `compiled`, check its output on fresh inputs (or `prepared` ones), and time it when it
    is right.

    Raises LaunchError/ResourceError when the kernel cannot run at all; a wrong result is a value.
    Every GPU step holds the GPU lock; the CPU steps between them (inputs, comparisons) do not.
    """
    spec = compiled.source.spec
    info = query_device(ordinal)
    spec.check_fits(free_memory(ordinal))
    if prepared is None or prepared.spec != spec:
        prepared = prepare(spec, rng, ordinal)
    return _load_check_time(compiled, prepared.inputs, prepared.expected, protocol, verify_only, ordinal,
                            info.l2_bytes)


def _load_check_time(compiled: CompiledKernel, inputs: dict, expected: np.ndarray, protocol: TimingProtocol,
                     verify_only: bool, ordinal: int, l2_bytes: int) -> Evaluation:
    return _with_loaded([compiled], compiled.source.spec, inputs, expected, ordinal,
                        lambda runs, check, poison, hold: check_then_time(runs[0], poison, check, protocol,
                                                                          verify_only, l2_bytes, hold))


T = TypeVar("T")


def _with_loaded(kernels: Sequence[CompiledKernel], spec: GemmSpec, inputs: dict, expected: np.ndarray, ordinal: int,
                 body: Callable[[list, OutputCheck, Callable[[], None], Hold], T]) -> T:
    """`kernels` loaded and `spec`'s inputs uploaded under the GPU lock, D's check made; then `body(runs, check,
    poison, hold)` (each kernel bound to the inputs, D's poisoning, the lock). Modules and buffers are let go
    after, whatever happens, and a judge's reference on the GPU with them."""
    buffers: dict[str, DeviceBuffer] = {}
    closers: list = []
    hold = lambda: device_lock(ordinal)  # noqa: E731
    try:
        with hold():
            loaded = []
            for compiled in kernels:
                loaded.append(LoadedKernel(compiled, ordinal))
                closers.append(loaded[-1].unload)
            bindings = upload_inputs(spec, inputs, buffers)
            check = output_check(buffers["D"], spec, expected, ordinal)
        result = body([kernel.bind(bindings) for kernel in loaded], check,
                      lambda: buffers["D"].fill_nan(spec.out_dtype), hold)
    except BaseException:
        release(closers + [b.free for b in buffers.values()], after_error=True)
        raise
    release(closers + [b.free for b in buffers.values()], after_error=False)
    if check.on_gpu:  # the reference and the judge's float64 copies: gigabytes for a large D
        del check
        import torch

        torch.cuda.empty_cache()
    return result


def time_in_turn(kernels: Sequence[CompiledKernel], prepared: Prepared, rounds: int,
                 protocol: TimingProtocol = TimingProtocol()) -> list[list[float] | None]:
    """Kernels of one spec, each checked on `prepared`'s inputs (D poisoned first, as evaluate does), then
    the right ones timed in turn, `rounds` rounds (timing.measure_alternating: L2 emptied before every
    launch, the order balanced), so that the clock the GPU's power limit moves moves them alike. Returns
    each kernel's seconds round by round, None for a wrong one; D is checked again after timing (the
    last launch's). On GPU 0 (a measuring process sees one GPU)."""
    spec = prepared.spec
    info = query_device(0)
    spec.check_fits(free_memory(0))

    def check_then_time_in_turn(runs: list, check: OutputCheck, poison: Callable[[], None],
                                hold: Hold) -> list[list[float] | None]:
        right = [check_then_time(run, poison, check, protocol, True, info.l2_bytes, hold).verify.ok for run in runs]
        launches = {index: run for index, (run, ok) in enumerate(zip(runs, right)) if ok}
        if not launches:
            return [None] * len(runs)
        with hold():
            poison()
        times = measure_alternating(launches, rounds, info.l2_bytes, protocol)
        _, after = _held_check(check, hold)
        if not after.ok:  # the last timed launch left a wrong D: a race no single check caught
            raise VerifyError(f"after timing in turn: {after.message}")
        return [times.get(index) for index in range(len(runs))]

    return _with_loaded(kernels, spec, prepared.inputs, prepared.expected, 0, check_then_time_in_turn)


def output_check(d: DeviceBuffer, spec: GemmSpec, expected: np.ndarray, ordinal: int) -> OutputCheck:
    """On the GPU (torch) for the problems whose reference is computed there, else on the CPU.
    Called under the GPU lock: the reference goes up to the GPU once for both checks."""
    if not gpu_reference(spec):
        return cpu_output_check(d, spec, expected)
    import torch

    on_device = torch.from_numpy(expected).to(f"cuda:{ordinal}")
    return OutputCheck(lambda: read_output_on_gpu(d, spec, ordinal), lambda out: judge_output(out, spec, on_device),
                       on_gpu=True)


def cpu_output_check(d: DeviceBuffer, spec: GemmSpec, expected: np.ndarray) -> OutputCheck:
    """D read back to the host and judged there against the numpy reference."""
    return OutputCheck(lambda: read_output(d, spec), lambda out: judge_output(out, spec, expected))
