"""Finding nvcc and building an exported folder's harness with it (no GPU needed to build).

The pip wheel ``nvidia-cuda-nvcc`` (13.x) installs a complete nvcc under
``site-packages/nvidia/cu13/bin``; its ``nvcc.profile`` points at the headers and libraries of
the sibling wheels (``nvidia-cuda-crt``, ``nvidia-nvvm``, ``nvidia-cuda-runtime``: cudart and
``cuda_runtime.h``), so ``nvcc -arch=sm_90 main.cu`` links on a machine with no CUDA toolkit.
The wheel is preferred (its version is pinned by the test extra); nvcc on PATH is the fallback.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError, GemmtuneError, Timeout
from .cmake import nvcc_arch_flag, nvcc_options
from .manifest import KERNEL_SOURCE, read_manifest

WHEEL_LAYOUTS = ("cu13", "cu12", "cuda_nvcc")  # nvidia/<layout>/bin/nvcc across wheel generations
BUILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Nvcc:
    path: Path
    origin: str  # "pip wheel" or "PATH"

    def version(self) -> str:
        """'13.0' from `nvcc --version`."""
        out = subprocess.run([str(self.path), "--version"], capture_output=True, text=True, timeout=60).stdout
        release = next((line for line in out.splitlines() if "release" in line), "")
        return release.split("release", 1)[1].split(",", 1)[0].strip() if release else "unknown"


def wheel_tool_candidates(tool: str) -> list[Path]:
    """Where an nvidia-cuda-* wheel (nvcc, cuobjdump, ...) would have put `tool`, for each `nvidia`
    package path."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return [Path(root) / layout / "bin" / tool for root in roots for layout in WHEEL_LAYOUTS]


def wheel_nvcc_candidates() -> list[Path]:
    """Where the nvidia-cuda-nvcc wheel would have put nvcc."""
    return wheel_tool_candidates("nvcc")


def find_nvcc() -> Nvcc | None:
    """The pip wheel's nvcc, else nvcc on PATH, else None."""
    for candidate in wheel_nvcc_candidates():
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Nvcc(candidate, "pip wheel")
    on_path = shutil.which("nvcc")
    return Nvcc(Path(on_path), "PATH") if on_path else None


def require_nvcc() -> Nvcc:
    found = find_nvcc()
    if found is None:
        raise GemmtuneError("no nvcc found: pip install 'nvidia-cuda-nvcc>=13.0,<14' 'nvidia-cuda-runtime>=13.0,<14' "
                            "or put a CUDA toolkit's nvcc on PATH")
    return found


def harness_command(folder: Path, nvcc: Nvcc, link: bool = True) -> list[str]:
    """The nvcc command line that builds (or, link=False, only compiles) main.cu in `folder`."""
    manifest = read_manifest(folder)
    saved = saved_source(folder)
    options = tuple(saved.get("options", ()))
    # The launcher of a kernel with TMA descriptors calls the driver API (cuTensorMapEncodeTiled).
    driver = ["-lcuda"] if link and saved.get("tensor_maps") else []
    output = ["-c", "-o", f"{manifest.name}_check.o"] if not link else ["-o", f"{manifest.name}_check"]
    return [str(nvcc.path), "-O3", "-std=c++17", nvcc_arch_flag(manifest.arch), "-lineinfo", *nvcc_options(options),
            "main.cu", *driver, *output]


def saved_source(folder: Path) -> dict:
    """kernel_source.json of an exported folder, as saved."""
    return json.loads((Path(folder) / KERNEL_SOURCE).read_text())


def build_harness(folder: Path, nvcc: Nvcc | None = None, link: bool = True,
                  timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Build the harness of an exported folder with nvcc; returns the executable (or object) path."""
    folder = Path(folder)
    command = harness_command(folder, nvcc or require_nvcc(), link)
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise Timeout(f"nvcc took more than {timeout_s:.0f} s", str(folder / "main.cu")) from None
    if done.returncode != 0:
        log = done.stderr + done.stdout
        first = next((line for line in log.splitlines() if "error" in line.lower()), log.strip()[:300])
        raise CompileError(f"nvcc could not build the harness: {first.strip()}", str(folder / "main.cu"))
    return folder / command[-1]
