"""NVRTC: CUDA text -> cubin + PTX for one architecture, with the ptxas resource report.

No GPU is needed. Results are cached on disk by a hash of the source, options, architecture and
NVRTC version; cache files are written atomically (temp file + os.replace).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .errors import CompileError, GemmtuneError
from .kernel_source import KernelSource

# NVRTC 13 keeps its own cache (~/.nv/ComputeCache) and on a hit skips ptxas, printing no resource
# report (seen on the H200 machine for sources that differ only in comments). gemmtune caches by content
# hash itself, so NVRTC's cache is turned off before NVRTC first loads (it reads the variable once).
# The same variable stops the driver caching PTX it JIT-compiles; gemmtune loads cubins. Set
# CUDA_CACHE_DISABLE=0 yourself to keep it on.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120")
BASE_OPTIONS = ("--std=c++17",)


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reported for the entry function."""

    registers: int
    shared_bytes: int  # static shared memory
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    constant_bytes: int = 0

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (f"{self.registers} registers, {self.shared_bytes} B static smem, {self.stack_bytes} B stack, "
                f"{self.spill_store_bytes} B spill stores, {self.spill_load_bytes} B spill loads")


@dataclass(frozen=True)
class CompiledKernel:
    source: KernelSource
    arch: str
    cubin: bytes
    ptx: str
    resources: ResourceUsage
    log: str
    compile_seconds: float
    nvrtc_version: str


_REG = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_resource_report(log: str, entry: str) -> ResourceUsage:
    """Read the ptxas -v lines that belong to `entry` out of an NVRTC log."""
    lines = log.splitlines()
    names = lambda line: re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line)  # noqa: E731  (whole names: not `<entry>_stage`)
    start = next((i for i, line in enumerate(lines) if "Function properties for" in line and entry in names(line)), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if "Compiling entry function" in line and entry in names(line)), 0)
    block = "\n".join(lines[start:start + 6])
    regs, stack = _REG.search(block), _STACK.search(block)
    if not regs or not stack:
        raise CompileError(f"no ptxas resource report for '{entry}' in the NVRTC log")
    smem, cmem = _SMEM.search(block), _CMEM.search(block)
    return ResourceUsage(
        registers=int(regs.group(1)), shared_bytes=int(smem.group(1)) if smem else 0,
        stack_bytes=int(stack.group(1)), spill_store_bytes=int(stack.group(2)),
        spill_load_bytes=int(stack.group(3)), constant_bytes=int(cmem.group(1)) if cmem else 0,
    )


def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on install
        raise GemmtuneError("NVRTC is not available: pip install cuda-bindings nvidia-cuda-nvrtc") from exc
    return nvrtc


def _check(result, what: str) -> None:
    code = result[0] if isinstance(result, tuple) else result
    if int(code) != 0:
        raise CompileError(f"NVRTC {what} failed: {code}")


def _program_log(nvrtc, prog) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


def _nvrtc_compile(source: KernelSource, arch: str, code: str | None = None) -> tuple[bytes, str, str]:
    """NVRTC's cubin, PTX and log for `source` (compiled from `code` where given: the source with a marker)."""
    nvrtc = _nvrtc()
    text = source.code if code is None else code
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), f"{source.entry}.cu".encode(), 0, [], [])
    _check(err, "program creation")
    try:
        options = [f"--gpu-architecture={arch}", "-Xptxas=-v", *BASE_OPTIONS, *source.options]
        result = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        log = _program_log(nvrtc, prog)
        if int(result[0]) != 0:
            first = next((line for line in log.splitlines() if "error" in line), log.strip()[:300])
            raise CompileError(f"NVRTC could not compile {source.entry} for {arch}: {first.strip()}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin read")
        _, psize = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * psize
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "PTX read")
        return cubin, ptx.rstrip(b"\x00").decode(), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemmtune" / "nvrtc"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def uncached(source: KernelSource) -> str:
    """The source with an empty kernel of a name used once, so that its PTX is new to NVRTC's own cache.

    Where NVRTC was loaded before CUDA_CACHE_DISABLE was set (torch, say, imported first), its cache stays
    on, and a hit skips ptxas and its resource report: two configs whose kernels differ only in comments
    (a split tail that splits nothing) then failed one compile in pytest-xdist runs on the H200
    (2026-11-29, "no ptxas resource report"). The second compile of such a source adds this kernel."""
    return (f"{source.code}\n// (compiled again with this empty kernel: NVRTC's own cache had this PTX and ran no ptxas)\n"
            f'extern "C" __global__ void gemmtune_uncached_{uuid.uuid4().hex}() {{}}\n')


def compile_kernel(source: KernelSource, arch: str = "sm_90", cache_dir: Path | None = None) -> CompiledKernel:
    """Compile `source` for `arch` (e.g. sm_90), reusing the disk cache when it holds the result.

    A source with arch-specific instructions (wgmma) is compiled for the 'a' target of that arch."""
    if source.arch_specific and not arch.endswith("a"):
        arch += "a"
    if arch not in ARCHES:
        raise CompileError(f"unknown arch '{arch}'; choose one of {', '.join(ARCHES)}")
    version = nvrtc_version()
    cache = (cache_dir or default_cache_dir()) / f"{source.content_hash()}-{arch}-nvrtc{version}"
    meta_path, cubin_path = cache.with_suffix(".json"), cache.with_suffix(".cubin")
    if meta_path.exists() and cubin_path.exists():
        meta = json.loads(meta_path.read_text())
        return CompiledKernel(source, arch, cubin_path.read_bytes(), meta["ptx"],
                              ResourceUsage(**meta["resources"]), meta["log"], meta["compile_seconds"], version)
    started = time.perf_counter()
    cubin, ptx, log = _nvrtc_compile(source, arch)
    try:
        resources = parse_resource_report(log, source.entry)
    except CompileError:
        cubin, ptx, log = _nvrtc_compile(source, arch, uncached(source))
        resources = parse_resource_report(log, source.entry)
    seconds = time.perf_counter() - started
    _atomic_write(cubin_path, cubin)
    meta = {"ptx": ptx, "resources": resources.to_json(), "log": log, "compile_seconds": seconds}
    _atomic_write(meta_path, json.dumps(meta).encode())
    return CompiledKernel(source, arch, cubin, ptx, resources, log, seconds, version)


def ptx_image(compiled: CompiledKernel) -> CompiledKernel:
    """The kernel as the PTX its GPU's driver would JIT-compile (arch `compute_XX`), in place of the cubin.

    NVRTC's PTX for sm_XX is written for the virtual arch compute_XX, which any GPU of that compute
    capability or newer loads (cuModuleLoadData JIT-compiles it). So code for GPUs we do not have (a T4's
    sm_75, an A100's sm_80, an RTX 3090's sm_86, an L40S's sm_89) runs on an H100/H200: that proves the
    code those GPUs would run computes the right thing, with the config checked against their limits
    (gemmtune.arch); not their speed, occupancy or the SASS their own driver would make. The resource
    report stays that of ptxas for sm_XX."""
    if not compiled.arch.startswith("sm_") or compiled.arch.endswith(("a", "f")):
        raise CompileError(f"{compiled.arch} code runs only on its own arch (family): no PTX image for other GPUs")
    virtual = compiled.arch.replace("sm_", "compute_")
    return replace(compiled, arch=virtual, cubin=compiled.ptx.encode() + b"\0")
