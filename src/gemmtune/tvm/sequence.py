"""A TVM build of several kernels, launched in order and verified and timed as one sequence.

Before the epilogue_fusion step, TVM lowers GEMM + ReLU + C to two kernels: the GEMM writes the
workload's intermediate buffer `acc` in global memory, then a second kernel reads `acc` and C and
writes D. TVM's own host code would allocate `acc` and launch both; here gemmtune does the same,
so such a schedule is measured as what TVM really produced, not refused:

    LaunchSequence   the NVRTC-ready text of all kernels, each kernel's launch, the intermediates
    CompiledSequence the text compiled once by NVRTC (the cubin holds every kernel) + per-kernel
                     ptxas resources
    evaluate_sequence  fresh inputs, D and the intermediates poisoned with NaN, every kernel launched
                     in order, compared with the float64 reference, then the whole sequence timed
                     as one launch callable under the usual TimingProtocol (L2 flushed before each
                     repetition of the sequence, not between its kernels), and checked again.

A KernelSource describes one GEMM kernel called with the GEMM's operands, so it insists on D and
on operand names; a kernel of a sequence also takes intermediates. KernelSource is therefore only
used here as NVRTC's and the loader's input (code, entry, grid, block); its `args` are the
sequence's operands and are never used to launch: each launch packs the kernel's own parameters.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..compiler import (
    CompiledKernel,
    ResourceUsage,
    compile_kernel,
    parse_resource_report,
)
from ..device import free_memory, query_device
from ..errors import ConfigError
from ..evaluate import Evaluation, check_then_time, cpu_output_check, upload_inputs
from ..kernel_source import KernelSource
from ..runtime import BoundLaunch, DeviceBuffer, LoadedKernel, pack_arguments, release
from ..spec import GemmSpec
from ..timing import TimingProtocol
from ..verify import make_inputs, reference

# _check_signature: the same check to_kernel_source makes (CUDA parameter order == lowered IR's).
from .convert import (
    CONVERT_VERSION,
    FAMILY,
    TvmBuild,
    TvmKernel,
    _check_signature,
    build_cuda,
    nvrtc_ready,
)

SEQUENCE_VERSION = "1"
# TVM names the kernels of function <symbol> "<symbol>_kernel", "<symbol>_kernel_1", ... taking fresh
# names as it walks the host code, i.e. in launch order (tests/test_tvm_sequence.py checks this
# against the lowered host function's calls).
_KERNEL_NAME = re.compile(r"^(?P<base>.+_kernel)(?:_(?P<index>\d+))?$")


@dataclass(frozen=True)
class Intermediate:
    """A global buffer TVM's host code would allocate between kernels (e.g. the accumulator `acc`)."""

    name: str
    nbytes: int


@dataclass(frozen=True)
class LaunchSequence:
    code: str  # NVRTC-ready text holding every kernel
    kernels: tuple[TvmKernel, ...]  # in launch order
    intermediates: tuple[Intermediate, ...]
    spec: GemmSpec
    family_version: str
    config: dict = field(default_factory=dict, compare=False, hash=False)

    def describe(self) -> str:
        """e.g. "2 kernels: (A,B)→acc, (C,acc)→D": what each kernel reads and writes.

        A kernel writes D, and the intermediates no earlier kernel touched (in launch order the
        first kernel to take an intermediate is the one that produces it).
        """
        pending = {i.name for i in self.intermediates}
        parts = []
        for kernel in self.kernels:
            written = [p for p in kernel.params if p == "D" or p in pending]
            read = [p for p in kernel.params if p not in written]
            pending.difference_update(written)
            parts.append(f"({','.join(read)})→{','.join(written) or '?'}")
        return f"{len(self.kernels)} kernels: {', '.join(parts)}"


def spec_operands(spec: GemmSpec) -> tuple[str, ...]:
    """The spec's arguments in the order a GEMM kernel takes them: A, B, epilogue operands, D."""
    return ("A", "B", *(op.name for op in spec.epilogue.operands()), "D")


# --- from TVM -----------------------------------------------------------------------------------
def intermediate_sizes(mod: Any) -> dict[str, int]:
    """Bytes of each global buffer the scheduled function allocates (its root block's alloc_buffers).

    Those are what TVM's host code allocates between kernels; shared and local buffers live inside
    one kernel. A function without a root block (not TensorIR) has none to offer.
    """
    root = getattr(mod["main"].body, "block", None)
    sizes = {}
    for buffer in getattr(root, "alloc_buffers", None) or ():
        if buffer.scope() == "global":
            elements = math.prod(int(extent) for extent in buffer.shape)
            sizes[buffer.name] = elements * buffer.dtype.bits // 8
    return sizes


def _launch_order(kernels: tuple[TvmKernel, ...]) -> tuple[TvmKernel, ...]:
    keys = []
    for kernel in kernels:
        match = _KERNEL_NAME.match(kernel.entry)
        if match is None:
            raise ConfigError(f"cannot tell when {kernel.entry} runs: TVM names kernels <symbol>_kernel[_N]")
        keys.append((match.group("base"), int(match.group("index") or 0)))
    if len({base for base, _ in keys}) > 1:
        raise ConfigError(f"kernels of several functions in one build: {[k.entry for k in kernels]}")
    return tuple(kernel for _, kernel in sorted(zip(keys, kernels), key=lambda pair: pair[0][1]))


def _intermediates(kernels: tuple[TvmKernel, ...], spec: GemmSpec,
                   sizes: Mapping[str, int]) -> tuple[Intermediate, ...]:
    """Every parameter that is not an operand of `spec`, sized from `sizes`, in order of first use."""
    found: dict[str, Intermediate] = {}
    for kernel in kernels:
        for name in kernel.params:
            if name in spec_operands(spec) or name in found:
                continue
            if name not in sizes:
                raise ConfigError(f"{kernel.entry} takes '{name}', which is neither an operand of {spec.short()} "
                                  f"nor a global buffer the workload allocates ({', '.join(sizes) or 'none'}): "
                                  "cannot size it")
            found[name] = Intermediate(name, sizes[name])
    return tuple(found.values())


def _check_operands(kernels: tuple[TvmKernel, ...], spec: GemmSpec) -> None:
    taken = {p for kernel in kernels for p in kernel.params}
    missing = [name for name in spec_operands(spec) if name not in taken]
    if missing:
        raise ConfigError(f"no kernel of the sequence takes {missing}, which {spec.short()} needs")


def to_sequence(built: TvmBuild, spec: GemmSpec, sizes: Mapping[str, int], config: dict) -> LaunchSequence:
    """The launch sequence of `built`; `sizes` (intermediate_sizes) gives each intermediate's bytes."""
    import tvm

    if not built.kernels:
        raise ConfigError("TVM emitted no kernel (is every loop nest bound to GPU threads?)")
    kernels = _launch_order(built.kernels)
    for kernel in kernels:
        _check_signature(built.cuda, kernel)
    _check_operands(kernels, spec)
    version = f"tvm-{tvm.__version__}+convert{CONVERT_VERSION}+sequence{SEQUENCE_VERSION}"
    return LaunchSequence(nvrtc_ready(built.cuda), kernels, _intermediates(kernels, spec, sizes), spec, version,
                          dict(config))


def launch_sequence(mod: Any, spec: GemmSpec, config: dict, arch: str = "sm_90") -> LaunchSequence:
    """Scheduled module -> LaunchSequence; kernels are named like convert.kernel_source names them."""
    built = build_cuda(mod, arch, symbol=f"{spec.slug()}_tvm")
    return to_sequence(built, spec, intermediate_sizes(mod), config)


# --- NVRTC --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledSequence:
    sequence: LaunchSequence
    compiled: CompiledKernel  # the whole text: its cubin holds every kernel of the sequence
    resources: tuple[ResourceUsage, ...]  # per kernel, in launch order

    def kernel(self, index: int) -> CompiledKernel:
        """Kernel `index` as a CompiledKernel for LoadedKernel (its checks, load and unload)."""
        launch = self.sequence.kernels[index]
        source = replace(self.compiled.source, entry=launch.entry, grid=launch.grid, block=launch.block)
        return replace(self.compiled, source=source, resources=self.resources[index])

    def summary(self) -> str:
        return "; ".join(f"kernel {index + 1}: {r.registers} registers, {r.shared_bytes} B smem, {r.spills} B spilled"
                         for index, r in enumerate(self.resources))


def _carrier(sequence: LaunchSequence) -> KernelSource:
    """The KernelSource NVRTC compiles: the whole text, named after the last kernel (see module doc)."""
    last = sequence.kernels[-1]
    return KernelSource(code=sequence.code, entry=last.entry, grid=last.grid, block=last.block,
                        args=spec_operands(sequence.spec), spec=sequence.spec, family=FAMILY,
                        family_version=sequence.family_version, config=dict(sequence.config))


def entry_log(log: str, entry: str) -> str:
    """The ptxas lines of `entry` alone: from its "Compiling entry function" line to the next one.

    parse_resource_report on the whole log would match <symbol>_kernel inside <symbol>_kernel_1.
    """
    lines = log.splitlines()
    start = next((n for n, line in enumerate(lines) if f"Compiling entry function '{entry}'" in line), None)
    if start is None:
        return ""
    end = next((n for n in range(start + 1, len(lines)) if "Compiling entry function" in lines[n]), len(lines))
    return "\n".join(lines[start:end])


def compile_sequence(sequence: LaunchSequence, arch: str = "sm_90", cache_dir: Path | None = None) -> CompiledSequence:
    """Compile the text once with NVRTC (gemmtune's disk cache included); read each kernel's resources."""
    compiled = compile_kernel(_carrier(sequence), arch, cache_dir)
    resources = tuple(parse_resource_report(entry_log(compiled.log, k.entry), k.entry) for k in sequence.kernels)
    return CompiledSequence(sequence, compiled, resources)


# --- the GPU ------------------------------------------------------------------------------------
def _load(compiled: CompiledSequence, ordinal: int, closers: list[Callable[[], None]]) -> list[LoadedKernel]:
    loaded = []
    for index in range(len(compiled.sequence.kernels)):
        kernel = LoadedKernel(compiled.kernel(index), ordinal)
        closers.append(kernel.unload)  # recorded at once: a later failure still unloads it
        loaded.append(kernel)
    return loaded


def _upload(sequence: LaunchSequence, inputs: dict, buffers: dict[str, DeviceBuffer]) -> dict[str, int | float]:
    """Inputs and D as for one kernel (evaluate.upload_inputs), then every intermediate allocated."""
    bindings = upload_inputs(sequence.spec, inputs, buffers)
    for intermediate in sequence.intermediates:
        buffers[intermediate.name] = DeviceBuffer.alloc(intermediate.nbytes)
        bindings[intermediate.name] = buffers[intermediate.name].ptr
    return bindings


def _bind_all(loaded: list[LoadedKernel], sequence: LaunchSequence,
              bindings: Mapping[str, int | float]) -> Callable[[], None]:
    """One callable that enqueues every kernel in launch order (what is timed)."""
    launches = [BoundLaunch(kernel.function, kernel.source, pack_arguments(launch.params, bindings, launch.entry))
                for kernel, launch in zip(loaded, sequence.kernels)]

    def run_all() -> None:
        for launch in launches:
            launch()

    return run_all


def _poison(sequence: LaunchSequence, buffers: dict[str, DeviceBuffer]) -> None:
    """NaN into D and every intermediate, so whatever no kernel wrote shows."""
    for name in ("D", *(i.name for i in sequence.intermediates)):
        buffers[name].fill_nan()


def evaluate_sequence(compiled: CompiledSequence, protocol: TimingProtocol = TimingProtocol(),
                      rng: np.random.Generator | None = None, verify_only: bool = False,
                      ordinal: int = 0) -> Evaluation:
    """Load every kernel, check the sequence's D on fresh inputs, and time the sequence when it is right.

    Like gemmtune.evaluate.evaluate: LaunchError/ResourceError when a kernel cannot run at all, a
    wrong result is a value. The time is that of all kernels, launched back to back.
    """
    sequence = compiled.sequence
    spec = sequence.spec
    info = query_device(ordinal)
    spec.check_fits(free_memory(ordinal) - sum(i.nbytes for i in sequence.intermediates))
    inputs = make_inputs(spec, rng if rng is not None else np.random.default_rng())
    expected = reference(spec, inputs)
    buffers: dict[str, DeviceBuffer] = {}
    closers: list[Callable[[], None]] = []
    try:
        loaded = _load(compiled, ordinal, closers)
        run_all = _bind_all(loaded, sequence, _upload(sequence, inputs, buffers))
        result = check_then_time(run_all, lambda: _poison(sequence, buffers),
                                 cpu_output_check(buffers["D"], spec, expected), protocol, verify_only,
                                 info.l2_bytes)
    except BaseException:
        release(closers + [b.free for b in buffers.values()], after_error=True)
        raise
    release(closers + [b.free for b in buffers.values()], after_error=False)
    return result
