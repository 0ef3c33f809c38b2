"""Building CUTLASS candidates: nvcc -> one shared library per candidate, cached by content.

No GPU is needed. The headers come from the ``nvidia-cutlass`` wheel (``cutlass_library/source``:
``include`` and ``tools/util/include``); nvcc is the CUDA toolkit's on PATH (the one matching the
driver, as CUTLASS users build), else the nvidia-cuda-nvcc wheel's. A library is cached under
``<cache>/gemmtune/cutlass/`` by a hash of its source, flags, arch, nvcc build and CUTLASS version,
written atomically, so a second run (or a copy of the cache on another machine with the same nvcc)
builds nothing. nvcc runs are parallel: each sm90 kernel takes about a minute and 3.5 GB.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..compiler import default_cache_dir
from ..errors import CompileError, GemmtuneError, Timeout
from ..spec import GemmSpec
from .cutlass_source import CutlassCandidate, render

NVCC_TIMEOUT_S = 900.0
BYTES_PER_JOB = 4 << 30  # an sm90 CollectiveBuilder kernel peaks at about 3.5 GB in nvcc


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    nvcc_build: str  # e.g. "V13.0.88": part of the cache key
    cutlass_root: Path  # cutlass_library/source
    cutlass_version: str

    def flags(self, arch: str) -> list[str]:
        source = self.cutlass_root
        number = arch.removeprefix("sm_")
        return ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr", "-DNDEBUG",
                f"-gencode=arch=compute_{number},code={arch}",
                f"-I{source / 'include'}", f"-I{source / 'tools' / 'util' / 'include'}"]


@dataclass(frozen=True)
class Built:
    candidate: CutlassCandidate
    library: Path
    seconds: float  # nvcc wall time; 0 when the cache had it
    cached: bool


def cutlass_root() -> Path | None:
    """The nvidia-cutlass wheel's source folder (found without importing cutlass_library)."""
    found = importlib.util.find_spec("cutlass_library")
    if found is None or not found.submodule_search_locations:
        return None
    root = Path(list(found.submodule_search_locations)[0]) / "source"
    return root if (root / "include" / "cutlass" / "cutlass.h").is_file() else None


def _cutlass_version(root: Path) -> str:
    text = (root / "include" / "cutlass" / "version.h").read_text()
    parts = [line.split()[-1] for line in text.splitlines()
             if line.startswith(("#define CUTLASS_MAJOR", "#define CUTLASS_MINOR", "#define CUTLASS_PATCH"))]
    return ".".join(parts) or "unknown"


def _nvcc_path() -> Path | None:
    on_path = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK)
                                       else None)
    if on_path:
        return Path(on_path)
    from ..export.toolchain import find_nvcc

    found = find_nvcc()
    return found.path if found else None


def _nvcc_build(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    return next((w for line in out.splitlines() if "release" in line for w in line.split() if w.startswith("V")),
                "unknown")


def find_toolchain() -> Toolchain | str:
    """The toolchain, or why there is none (one line)."""
    root = cutlass_root()
    if root is None:
        return "nvidia-cutlass is not installed (pip install 'gemmtune[cutlass]')"
    nvcc = _nvcc_path()
    if nvcc is None:
        return "no nvcc (CUDA toolkit on PATH or pip install nvidia-cuda-nvcc)"
    return Toolchain(nvcc, _nvcc_build(nvcc), root, _cutlass_version(root))


def cache_dir() -> Path:
    return default_cache_dir().parent / "cutlass"


def library_path(toolchain: Toolchain, source: str, arch: str, directory: Path) -> Path:
    key = "\0".join([source, " ".join(toolchain.flags(arch)[:-2]), arch, toolchain.nvcc_build,
                     toolchain.cutlass_version])
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}-{arch}.so"


def build(toolchain: Toolchain, spec: GemmSpec, candidate: CutlassCandidate, arch: str,
          directory: Path | None = None) -> Built:
    """The candidate's library, from the cache or nvcc; CompileError or Timeout when nvcc fails."""
    source = render(spec, candidate)
    target = library_path(toolchain, source, arch, directory or cache_dir())
    if target.is_file():
        return Built(candidate, target, 0.0, True)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cutlass-", dir=target.parent) as work:
        cu, so = Path(work) / "gemm.cu", Path(work) / "gemm.so"
        cu.write_text(source)
        _nvcc(toolchain, arch, cu, so, target)
        os.replace(so, target)
    return Built(candidate, target, time.perf_counter() - started, False)


def _nvcc(toolchain: Toolchain, arch: str, cu: Path, so: Path, target: Path) -> None:
    command = [str(toolchain.nvcc), *toolchain.flags(arch), "-o", str(so), str(cu)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Timeout(f"nvcc took more than {NVCC_TIMEOUT_S:.0f} s on a CUTLASS kernel", str(target)) from None
    if done.returncode != 0:
        keep = target.with_suffix(".cu")  # kept beside the cache for reading the error
        keep.write_text(cu.read_text())
        log = done.stderr + done.stdout
        first = next((line for line in log.splitlines() if "error" in line.lower()), log.strip()[:300])
        raise CompileError(f"nvcc could not build the CUTLASS kernel: {first.strip()[:300]}", str(keep))


def parallel_jobs() -> int:
    """nvcc processes at once: one per core, as memory allows."""
    try:
        available = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemAvailable"))
    except (OSError, StopIteration, ValueError):
        available = 2 * BYTES_PER_JOB
    return max(1, min(os.cpu_count() or 1, available // BYTES_PER_JOB))


def build_all(toolchain: Toolchain, spec: GemmSpec, candidates: tuple[CutlassCandidate, ...], arch: str,
              directory: Path | None = None, jobs: int | None = None) -> list[Built | GemmtuneError]:
    """Every candidate's library (in order), or the failure of its build."""
    def one(candidate: CutlassCandidate) -> Built | GemmtuneError:
        try:
            return build(toolchain, spec, candidate, arch, directory)
        except GemmtuneError as err:
            return err

    with ThreadPoolExecutor(max_workers=jobs or parallel_jobs()) as pool:
        return list(pool.map(one, candidates))
