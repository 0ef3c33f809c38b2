"""Verify, then time, one compiled kernel: the single path every family and the tuner go through.

Correctness first: fresh random inputs, D poisoned with NaN, one launch, compared with a float64
reference. A wrong kernel is never timed. Timing keeps the inputs in place and relies on the
protocol's L2 flush (TimingProtocol.flush_l2) for cold-cache numbers rather than rotating input
copies: a flush costs 2×L2 of memory instead of several copies of the operands. With
flush_l2=False the times are warm-L2 times. The output is checked again after timing, so a kernel
whose result changes from run to run (a race) is caught too.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import numpy as np

from .compiler import CompiledKernel
from .device import free_memory, query_device
from .dtypes import STORAGE, from_storage, to_storage
from .gpu_lock import device_lock
from .runtime import DeviceBuffer, LoadedKernel, release, synchronize
from .spec import GemmSpec
from .timing import Measurement, TimingProtocol, measure
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


def judge_output(out: np.ndarray, spec: GemmSpec, expected: np.ndarray) -> VerifyResult:
    """D (read back) against the reference: CPU work, so no GPU lock is needed for it."""
    return compare(out, expected, spec.dtype, spec.k, spec.out_dtype)


Hold = Callable[[], AbstractContextManager]  # the GPU lock around GPU work, or nullcontext


def check_then_time(run: Callable[[], None], poison: Callable[[], None], read: Callable[[], np.ndarray],
                    judge: Callable[[np.ndarray], VerifyResult], protocol: TimingProtocol, verify_only: bool,
                    l2_bytes: int, hold: Hold = nullcontext) -> Evaluation:
    """The one order every kernel (or launch sequence) is judged in: poison the outputs, run once,
    check; then poison again, time `run` under `protocol`, and check again (a race shows there).
    `hold` is held for the GPU work (launches, the copy of D back) and released while the CPU
    judges the copy: for a large D the comparison takes seconds, in which another process's
    kernels may be timed."""
    with hold():
        poison()
        run()
        synchronize()
        out = read()
    first = judge(out)
    if not first.ok or verify_only:
        return Evaluation(first, None)
    with hold():
        poison()  # again, so the check after timing sees only what the timed launches wrote
        measurement = measure(run, protocol, l2_bytes)
        out = read()
    again = judge(out)
    if not again.ok:
        return Evaluation(replace(again, message=f"after timing: {again.message}"), None)
    return Evaluation(first, measurement)


def evaluate(compiled: CompiledKernel, protocol: TimingProtocol = TimingProtocol(),
             rng: np.random.Generator | None = None, verify_only: bool = False, ordinal: int = 0) -> Evaluation:
    """Load `compiled`, check its output on fresh inputs, and time it when it is right.

    Raises LaunchError/ResourceError when the kernel cannot run at all; a wrong result is a value.
    Every GPU step holds the GPU lock (the reference's product on the GPU too: another process's
    timing must not see it); the CPU steps between them (inputs, comparisons) do not.
    """
    spec = compiled.source.spec
    info = query_device(ordinal)
    spec.check_fits(free_memory(ordinal))
    inputs = make_inputs(spec, rng if rng is not None else np.random.default_rng())
    expected = reference(spec, inputs, gpu_reference(spec), hold=lambda: device_lock(ordinal))
    return _load_check_time(compiled, inputs, expected, protocol, verify_only, ordinal, info.l2_bytes)


def _load_check_time(compiled: CompiledKernel, inputs: dict, expected: np.ndarray, protocol: TimingProtocol,
                     verify_only: bool, ordinal: int, l2_bytes: int) -> Evaluation:
    spec = compiled.source.spec
    buffers: dict[str, DeviceBuffer] = {}
    closers: list = []
    hold = lambda: device_lock(ordinal)  # noqa: E731
    try:
        with hold():
            kernel = LoadedKernel(compiled, ordinal)
            closers.append(kernel.unload)
            bindings = upload_inputs(spec, inputs, buffers)
        d = buffers["D"]
        result = check_then_time(kernel.bind(bindings), lambda: d.fill_nan(spec.out_dtype),
                                 lambda: read_output(d, spec), lambda out: judge_output(out, spec, expected),
                                 protocol, verify_only, l2_bytes, hold)
    except BaseException:
        release(closers + [b.free for b in buffers.values()], after_error=True)
        raise
    release(closers + [b.free for b in buffers.values()], after_error=False)
    return result
