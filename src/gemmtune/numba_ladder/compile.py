"""numba kernel -> PTX (numba.cuda.compile_ptx, no GPU needed) -> cubin (ptxas -v) -> CompiledKernel.

The result is the same CompiledKernel the NVRTC path makes, so gemmtune's runtime loads and
launches it, evaluate() verifies and times it and bench rows it, exactly as a CUDA-C kernel. The
KernelSource's `code` is the Python of the kernel factory (what a person reads); the PTX is kept
in CompiledKernel.ptx. Kernel parameters are raw float32 pointers, so the argument order is the
CUDA-C one: A, B, D.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..compiler import ARCHES, CompiledKernel, parse_resource_report
from ..errors import CompileError, ConfigError, GemmtuneError
from ..kernel_source import KernelSource
from ..kernels.simt.config import SimtConfig, arch_number, rejections
from ..spec import GemmSpec

FAMILY = "numba"
VERSION = "1"
PTXAS_TIMEOUT_S = 300.0
_ENTRY = re.compile(r"\.visible \.entry (\S+?)\(")


def require_numba():
    """numba.cuda, or a one-line error naming the extra."""
    from . import numpy_compat

    numpy_compat()
    try:
        from numba import cuda
    except ImportError as exc:
        raise GemmtuneError("the numba backend needs numba-cuda: pip install 'gemmtune[numba]'") from exc
    return cuda


def check_spec(spec: GemmSpec, config: SimtConfig, arch: str) -> None:
    """Reject what the numba kernels do not implement, with the reason (ConfigError)."""
    problems = rejections(config, spec, arch)
    problems.pop("pipeline", None)  # cp.async: the numba double-buffer step stages in registers instead
    if config.stages == 2 and not config.warptiled:
        problems["stages"] = "numba double-buffers only the warp-tiled kernel"
    if not spec.epilogue.is_identity:
        problems["epilogue"] = f"the numba kernels compute D = A·B only, not epilogue {spec.epilogue}"
    if arch not in ARCHES:
        problems["arch"] = f"unknown arch '{arch}'; choose one of {', '.join(ARCHES)}"
    if problems:
        raise ConfigError("numba: " + "; ".join(f"{k}: {v}" for k, v in sorted(problems.items())))


def compile_ptx(spec: GemmSpec, config: SimtConfig, arch: str = "sm_90") -> tuple[str, str, "NumbaKernel"]:
    """(ptx, entry name, kernel plan) for one ladder config; needs numba-cuda, not a GPU."""
    cuda = require_numba()
    from numba import types

    from .kernels import kernel_for

    check_spec(spec, config, arch)
    plan = kernel_for(spec, config)
    pointer = types.CPointer(types.float32)
    number = arch_number(arch)
    threads = plan.block[0] * plan.block[1] * plan.block[2]
    try:
        ptx, _ = cuda.compile_ptx(plan.function, (pointer, pointer, pointer), cc=(number // 10, number % 10),
                                  launch_bounds=(threads,))
    except Exception as exc:  # numba raises its own typing/lowering errors; keep the first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CompileError(f"numba could not compile {plan.template} for {arch}: {first}") from exc
    found = _ENTRY.search(ptx)
    if not found:
        raise CompileError(f"numba's PTX for {plan.template} has no .entry")
    return ptx, found.group(1), plan


def kernel_source(spec: GemmSpec, config: SimtConfig, plan, entry: str) -> KernelSource:
    """The common artifact; `code` is the factory's Python (readable), headed by the shape and config."""
    from . import kernels

    header = (f"# gemmtune {FAMILY} v{VERSION}: {spec.short()}\n# config: {config.describe()}\n"
              f"# M, N, K = {spec.m}, {spec.n}, {spec.k} (frozen into the kernel as constants)\n")
    code = header + inspect.getsource(getattr(kernels, _factory_name(plan.template)))
    return KernelSource(code=code, entry=entry, grid=plan.grid, block=plan.block, args=("A", "B", "D"), spec=spec,
                        family=FAMILY, family_version=VERSION, config=config.to_json())


def _factory_name(template: str) -> str:
    return "warptiling" if template == "double_buffer" else template


def compile_numba(spec: GemmSpec, config: SimtConfig, arch: str = "sm_90") -> CompiledKernel:
    """numba -> PTX -> ptxas cubin with its resource report, as a CompiledKernel."""
    started = time.perf_counter()
    ptx, entry, plan = compile_ptx(spec, config, arch)
    cubin, log = assemble(ptx, arch)
    resources = parse_resource_report(log, entry)
    source = kernel_source(spec, config, plan, entry)
    return CompiledKernel(source, arch, cubin, ptx, resources, log, time.perf_counter() - started,
                          f"numba-cuda {numba_cuda_version()}")


# --- ptxas ------------------------------------------------------------------------------------------
def ptxas_candidates() -> list[Path]:
    """ptxas of the nvidia-cuda-nvcc wheel (the test extra), then the one on PATH."""
    found = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for layout in ("cu13", "cu12", "cuda_nvcc"):
            path = Path(root) / layout / "bin" / "ptxas"
            if path.is_file() and os.access(path, os.X_OK):
                found.append(path)
    on_path = shutil.which("ptxas")
    if on_path and Path(on_path) not in found:
        found.append(Path(on_path))
    return found


def assemble(ptx: str, arch: str) -> tuple[bytes, str]:
    """(cubin, ptxas -v log). numba's NVVM may emit a newer PTX ISA than one ptxas reads, so each
    candidate is tried in turn; the error names the last refusal."""
    candidates = ptxas_candidates()
    if not candidates:
        raise CompileError("no ptxas found: pip install 'nvidia-cuda-nvcc>=13.0,<14' or put a CUDA toolkit on PATH")
    refusal = ""
    with tempfile.TemporaryDirectory(prefix="gemmtune-numba-") as tmp:
        source, target = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(ptx)
        for ptxas in candidates:
            done = subprocess.run([str(ptxas), f"-arch={arch}", "-O3", "-v", str(source), "-o", str(target)],
                                  capture_output=True, text=True, timeout=PTXAS_TIMEOUT_S)
            if done.returncode == 0:
                return target.read_bytes(), done.stdout + done.stderr
            refusal = next((line for line in done.stderr.splitlines() if "error" in line.lower()),
                           done.stderr.strip()[:300])
    raise CompileError(f"ptxas could not assemble numba's PTX for {arch}: {refusal.strip()}")


def numba_cuda_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "unknown"
