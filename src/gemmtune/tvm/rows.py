"""One benchmark row per TVM schedule: build, NVRTC, then (on a GPU) verify and time.

Failures become rows, never exceptions, so a table shows every schedule with its reason. Rows
are gemmtune.bench.BenchRow, so TVM rows print beside the native ladder and cuBLAS.
"""
from __future__ import annotations

from collections.abc import Callable

from ..bench import BenchRow
from ..compiler import compile_kernel
from ..errors import GemmtuneError
from ..kernel_source import KernelSource
from ..timing import TimingProtocol

COMPILED = "compiled"  # status of a row that compiled on a machine without a GPU


def _failed(name: str, detail: str, err: GemmtuneError, registers: int | None = None) -> BenchRow:
    return BenchRow(name, detail, None, None, None, type(err).__name__, str(err), registers)


def source_row(name: str, detail: str, make_source: Callable[[], KernelSource], arch: str,
               protocol: TimingProtocol, on_gpu: bool) -> BenchRow:
    """Build `make_source()`, compile it, and verify + time it when `on_gpu`."""
    from ..evaluate import evaluate

    try:
        compiled = compile_kernel(make_source(), arch)
    except GemmtuneError as err:
        return _failed(name, detail, err)
    registers = compiled.resources.registers
    if not on_gpu:
        return BenchRow(name, detail, None, None, None, COMPILED, compiled.resources.summary(), registers)
    try:
        result = evaluate(compiled, protocol)
    except GemmtuneError as err:
        return _failed(name, detail, err, registers)
    if not result.verify.ok or result.measurement is None:
        return BenchRow(name, detail, None, None, result.verify.rel_error, "VerifyError", result.verify.message,
                        registers)
    m, spec = result.measurement, compiled.source.spec
    return BenchRow(name, detail, m.median_s, m.tflops(spec.flops), result.verify.rel_error, "ok", "", registers,
                    len(m.samples_s))
