"""SASS of a compiled kernel for the CPU tests that read it: cuobjdump from the nvidia-cuda-cuobjdump
wheel (the test extra) or the PATH; a test skips where neither is installed."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gemmtune.export.toolchain import wheel_tool_candidates


def cuobjdump() -> str | None:
    found = next((str(p) for p in wheel_tool_candidates("cuobjdump") if p.is_file()), None)
    return found or shutil.which("cuobjdump")


def sass(tmp_path: Path, cubin: bytes) -> str:
    """cuobjdump --dump-sass of `cubin`; skips the calling test without cuobjdump."""
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    return subprocess.run([tool, "--dump-sass", str(path)], capture_output=True, text=True, check=True).stdout
