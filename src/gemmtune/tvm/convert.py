"""TVM's built output -> gemmtune KernelSource, so NVRTC, verify, timing and export handle it.

`build_cuda` lowers a scheduled module with TVM's own pipeline (the steps of tvm.tirx.build up to
code generation; no GPU, nvcc or NVRTC needed) and keeps both sides of the result: the CUDA text
and the lowered device functions. From those functions come, per kernel, the entry name, the
parameter order (TVM orders kernel parameters itself, so it is read, never assumed) and the
launch extents (`thread_extent` attributes: what the kernel really sees after TVM removed
virtual threads and unit loops).

`nvrtc_ready` turns TVM's text into something NVRTC compiles with no include path: see
TVM_PRELUDE_INCLUDES for why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..kernel_source import POINTER_ARGS, KernelSource
from ..spec import GemmSpec
from .target import cuda_target

FAMILY = "tvm"
CONVERT_VERSION = "1"
LAUNCH_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True)
class TvmKernel:
    """One __global__ function TVM emitted."""

    entry: str
    params: tuple[str, ...]  # buffer names in parameter order ("A_ptr" -> "A")
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


@dataclass(frozen=True)
class TvmBuild:
    cuda: str  # the CUDA text exactly as TVM generated it
    kernels: tuple[TvmKernel, ...]
    arch: str


# --- lowering ------------------------------------------------------------------------------------
def _lower_device(mod: Any, target: Any) -> tuple[Any, Any]:
    """TVM's default TIR pipeline, then the device half: (device IRModule, device target).

    These are the steps of tvm.tirx.build before code generation, kept here because build()
    returns only the finished runtime module, and the launch extents live in the lowered IR.
    """
    import tvm
    from tvm.tirx.build import split_host_device_mods

    bound = tvm.tirx.transform.BindTarget(target)(mod)
    pipeline, _, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    _, devices = split_host_device_mods(pipeline(bound))
    if len(devices) != 1:
        raise ConfigError(f"expected CUDA device code from TVM, got {len(devices)} device targets "
                          "(is every loop nest bound to GPU threads?)")
    device_target, device_mod = next(iter(devices.items()))
    return finalize_device()(device_mod), device_target


def _walk(stmt: Any, found: list[tuple[str, int]]) -> None:
    """Collect (thread tag, extent) of every thread_extent attribute under `stmt`."""
    import tvm

    if stmt is None:
        return
    if isinstance(stmt, tvm.tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        found.append((stmt.node.thread_tag, stmt.value))
    # The statement kinds that hold statements: body (For, AttrStmt, LetStmt, Allocate, ...),
    # seq (SeqStmt), then_case/else_case (IfThenElse).
    for name in ("body", "then_case", "else_case"):
        _walk(getattr(stmt, name, None), found)
    for child in getattr(stmt, "seq", None) or ():
        _walk(child, found)


def _launch_dims(func: Any, entry: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    found: list[tuple[str, int]] = []
    _walk(func.body, found)
    extents: dict[str, int] = {}
    for tag, value in found:
        if not hasattr(value, "value"):
            raise ConfigError(f"{entry}: {tag} has the non-constant extent {value}; gemmtune needs static shapes")
        if extents.setdefault(tag, int(value.value)) != int(value.value):
            raise ConfigError(f"{entry}: {tag} is launched with two extents {extents[tag]} and {value}")
    unknown = set(extents) - set(LAUNCH_TAGS)
    if unknown:
        raise ConfigError(f"{entry}: unexpected launch axes {sorted(unknown)}")
    grid = tuple(extents.get(f"blockIdx.{axis}", 1) for axis in "xyz")
    block = tuple(extents.get(f"threadIdx.{axis}", 1) for axis in "xyz")
    return grid, block  # type: ignore[return-value]


def _param_name(param: Any) -> str:
    # TVM names a buffer's data pointer "<buffer>_ptr" (A_ptr); scalars keep their own name.
    return param.name.removesuffix("_ptr")


def _kernel(entry: str, func: Any) -> TvmKernel:
    if "tirx.use_dyn_shared_memory" in list(func.attrs.get("tirx.kernel_launch_params", [])):
        # The byte count is a launch argument computed by TVM's host code, which is not kept.
        raise ConfigError(f"{entry} uses dynamic shared memory, which the TVM converter does not size yet")
    grid, block = _launch_dims(func, entry)
    return TvmKernel(entry, tuple(_param_name(p) for p in func.params), grid, block)


def _renamed(mod: Any, symbol: str) -> Any:
    """`mod` with "main" exported as `symbol`: TVM names its kernels "<symbol>_kernel"."""
    import tvm

    return tvm.IRModule({"main": mod["main"].with_attr("global_symbol", symbol)})


def build_cuda(mod: Any, arch: str = "sm_90", symbol: str | None = None) -> TvmBuild:
    """Lower and generate CUDA for a scheduled module (a few hundred ms, no GPU)."""
    from tvm.tirx.build import codegen_build

    device_mod, device_target = _lower_device(_renamed(mod, symbol) if symbol else mod, cuda_target(arch))
    kernels = tuple(_kernel(gv.name_hint, func) for gv, func in device_mod.functions.items()
                    if func.attrs.get("calling_conv") == 2)  # 2: kDeviceKernelLaunch, a __global__
    cuda = codegen_build(device_mod, device_target).inspect_source()
    return TvmBuild(cuda, kernels, arch)


# --- NVRTC-ready text ---------------------------------------------------------------------------
# Why the prelude is replaced: TVM starts every CUDA file with
#   #ifdef __CUDACC_RTC__  #include <cuda/std/cstdint> + <cuda/std/type_traits> ... #else <cstdint>...
# NVRTC ships none of these headers (libcu++ lives in the toolkit's include directory, which
# gemmtune does not pass: kernels must compile from the text alone, on a machine without a
# toolkit). The fp32 kernels only need the fixed-width integer names, so TVM's include blocks are
# cut and those names are declared directly. Headers NVRTC cannot find and we cannot stand in for
# (cuda_fp16.h, mma.h, ...) are refused with a reason instead of failing inside NVRTC.
TVM_PRELUDE_INCLUDES = ("cuda/std/", "<cstdint>", "<type_traits>", "<cuda.h>", "<stdint.h>")
NVRTC_PRELUDE = """\
// gemmtune: TVM's header block (cuda/std includes) replaced: NVRTC has no include path here.
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
"""
_CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b")
_INCLUDE = re.compile(r"^\s*#\s*include\s*([<\"][^>\"]+[>\"])")


def _conditional_groups(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line numbers of each top-level #if ... #endif group."""
    groups, depth, start = [], 0, 0
    for number, line in enumerate(lines):
        match = _CONDITIONAL.match(line)
        if not match:
            continue
        word = match.group(1)
        if word.startswith("if"):
            depth, start = depth + 1, (number if depth == 0 else start)
        elif word == "endif":
            depth -= 1
            if depth == 0:
                groups.append((start, number))
    return groups


def _is_tvm_include(line: str) -> bool:
    match = _INCLUDE.match(line)
    return bool(match) and any(marker in match.group(1) for marker in TVM_PRELUDE_INCLUDES)


def nvrtc_ready(cuda: str) -> str:
    """TVM's CUDA text without the includes NVRTC lacks (see TVM_PRELUDE_INCLUDES)."""
    lines = cuda.splitlines()
    drop: set[int] = set()
    for first, last in _conditional_groups(lines):
        if any(_is_tvm_include(line) for line in lines[first:last + 1]):
            drop.update(range(first, last + 1))
    drop.update(n for n, line in enumerate(lines) if _is_tvm_include(line))
    kept = [line for n, line in enumerate(lines) if n not in drop]
    left = [m.group(1) for line in kept if (m := _INCLUDE.match(line))]
    if left:
        raise ConfigError(f"TVM's CUDA includes {', '.join(left)}, which NVRTC cannot find without "
                          "the CUDA toolkit's headers")
    return NVRTC_PRELUDE + "\n".join(kept) + "\n"


# --- KernelSource -----------------------------------------------------------------------------
def single_kernel(built: TvmBuild) -> TvmKernel:
    """The one kernel of `built`, or ConfigError saying why a module with more cannot be launched."""
    if len(built.kernels) != 1:
        names = ", ".join(f"{k.entry}({', '.join(k.params)})" for k in built.kernels) or "none"
        raise ConfigError(f"TVM emitted {len(built.kernels)} kernels [{names}]; gemmtune launches one kernel "
                          "per source (a GEMM with an epilogue needs the epilogue_fusion step)")
    kernel = built.kernels[0]
    unknown = [p for p in kernel.params if p not in POINTER_ARGS]
    if unknown:
        raise ConfigError(f"{kernel.entry} takes {unknown} besides the GEMM operands (an intermediate buffer "
                          "TVM would allocate, or a dynamic shape): not launchable as one gemmtune kernel")
    return kernel


def _check_signature(cuda: str, kernel: TvmKernel) -> None:
    """The CUDA definition must take the parameters in the order read from the lowered IR."""
    match = re.search(rf"\b{re.escape(kernel.entry)}\(([^)]*)\)\s*{{", cuda)
    if match is None:
        raise ConfigError(f"no definition of {kernel.entry} in TVM's CUDA text")
    names = tuple(_param_name_text(p) for p in match.group(1).split(","))
    if names != kernel.params:
        raise ConfigError(f"{kernel.entry}: the CUDA text takes {names}, the lowered IR {kernel.params}")


def _param_name_text(declaration: str) -> str:
    name = declaration.strip().split()[-1].lstrip("*")
    return name.removesuffix("_ptr")


def to_kernel_source(built: TvmBuild, spec: GemmSpec, config: dict) -> KernelSource:
    """The KernelSource of a single-kernel TVM build for `spec`; `config` says which schedule."""
    import tvm

    kernel = single_kernel(built)
    _check_signature(built.cuda, kernel)
    expected = {"A", "B", "D"} | {op.name for op in spec.epilogue.operands()}
    if set(kernel.params) != expected:
        raise ConfigError(f"{kernel.entry} takes {kernel.params}, but {spec.short()} needs {sorted(expected)}")
    return KernelSource(
        code=nvrtc_ready(built.cuda), entry=kernel.entry, grid=kernel.grid, block=kernel.block,
        args=kernel.params, spec=spec, family=FAMILY,
        family_version=f"tvm-{tvm.__version__}+convert{CONVERT_VERSION}", config=dict(config),
    )


def kernel_source(mod: Any, spec: GemmSpec, config: dict, arch: str = "sm_90") -> KernelSource:
    """Scheduled module -> KernelSource in one call; the entry is named after the spec."""
    return to_kernel_source(build_cuda(mod, arch, symbol=f"{spec.slug()}_tvm"), spec, config)
