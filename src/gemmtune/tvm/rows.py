"""One benchmark row per TVM schedule: build, NVRTC, then (on a GPU) verify and time.

Failures become rows, never exceptions, so a table shows every schedule with its reason. Rows
are gemmtune.bench.BenchRow, so TVM rows print beside the native ladder and cuBLAS.
"""
from __future__ import annotations

from collections.abc import Callable

from ..bench import BenchRow, bench_compiled
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
    try:
        compiled = compile_kernel(make_source(), arch)
    except GemmtuneError as err:
        return _failed(name, detail, err)
    if not on_gpu:
        return BenchRow(name, detail, None, None, None, COMPILED, compiled.resources.summary(),
                        compiled.resources.registers)
    return bench_compiled(name, detail, compiled, protocol)
