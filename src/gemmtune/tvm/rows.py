"""One benchmark row per TVM schedule: build, NVRTC, then (on a GPU) verify and time.

Failures become rows, never exceptions, so a table shows every schedule with its reason. Rows
are gemmtune.bench.BenchRow, so TVM rows print beside the native ladder and cuBLAS.

A schedule TVM lowers to one kernel goes the KernelSource way (source_row). One it lowers to
several (a ladder prefix before epilogue_fusion: GEMM into `acc`, then ReLU + C) is measured as
the launch sequence TVM produced (sequence.py); its config column names the kernels.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..bench import BenchRow, bench_compiled, evaluation_row
from ..compiler import compile_kernel
from ..errors import GemmtuneError
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from ..timing import TimingProtocol

if TYPE_CHECKING:
    from .schedules import Named
    from .sequence import CompiledSequence, LaunchSequence

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


# --- several kernels ----------------------------------------------------------------------------
def bench_sequence(name: str, detail: str, compiled: CompiledSequence, protocol: TimingProtocol) -> BenchRow:
    """Verify, then time, a compiled launch sequence (like bench.bench_compiled for one kernel).

    `registers` is the most any kernel of the sequence uses.
    """
    from .sequence import evaluate_sequence

    return evaluation_row(name, detail, compiled.sequence.spec, lambda: evaluate_sequence(compiled, protocol),
                          max(r.registers for r in compiled.resources))


def sequence_row(name: str, detail: str, make_sequence: Callable[[], LaunchSequence], arch: str,
                 protocol: TimingProtocol, on_gpu: bool) -> BenchRow:
    """Like source_row for a launch sequence; the row's config gains the sequence's description."""
    from .sequence import compile_sequence

    try:
        compiled = compile_sequence(make_sequence(), arch)
    except GemmtuneError as err:
        return _failed(name, detail, err)
    detail = f"{detail}; {compiled.sequence.describe()}" if detail else compiled.sequence.describe()
    if not on_gpu:
        return BenchRow(name, detail, None, None, None, COMPILED, compiled.summary(),
                        max(r.registers for r in compiled.resources))
    return bench_sequence(name, detail, compiled, protocol)


def module_row(name: str, detail: str, make_named: Callable[[], Named], spec: GemmSpec, arch: str,
               protocol: TimingProtocol, on_gpu: bool) -> BenchRow:
    """A scheduled module's row: one kernel through source_row, several as a launch sequence."""
    from .convert import build_cuda, to_kernel_source
    from .sequence import intermediate_sizes, to_sequence

    try:
        named = make_named()
        built = build_cuda(named.mod, arch, symbol=f"{spec.slug()}_tvm")  # as convert.kernel_source names it
    except GemmtuneError as err:
        return _failed(name, detail, err)
    if len(built.kernels) <= 1:
        return source_row(name, detail, lambda: to_kernel_source(built, spec, named.config), arch, protocol, on_gpu)
    return sequence_row(name, detail, lambda: to_sequence(built, spec, intermediate_sizes(named.mod), named.config),
                        arch, protocol, on_gpu)


def schedule_detail(name: str) -> str:
    """The config column of a named schedule: a ladder row's tiles, or what dlight/tuned are."""
    from . import ladder

    row = "epilogue_fusion" if name == "manual" else name  # as schedules.named_schedule maps it
    if row in ladder.RUNG_NAMES:
        return ladder.rung(row).tiles.describe()
    return "default GPU rules" if name == "dlight" else name


def schedule_row(spec: GemmSpec, name: str, arch: str, protocol: TimingProtocol, on_gpu: bool,
                 label: str | None = None) -> BenchRow:
    """The row of schedule `name` (a ladder row, naive, manual or dlight), labelled `label` or `name`."""
    from .schedules import named_schedule

    return module_row(label or name, schedule_detail(name), lambda: named_schedule(spec, name, arch), spec, arch,
                      protocol, on_gpu)


def ladder_rows(spec: GemmSpec, arch: str, protocol: TimingProtocol, on_gpu: bool) -> list[BenchRow]:
    """Every row of the TVM ladder, naive to epilogue_fusion (the `gemmtune ladder --backend tvm` table)."""
    from .ladder import RUNG_NAMES

    return [schedule_row(spec, name, arch, protocol, on_gpu) for name in RUNG_NAMES]
