"""The TVM TensorIR backend: workloads, the five manual schedule steps, MetaSchedule and dlight.

Everything TVM produces ends as a gemmtune KernelSource (see convert.py), so NVRTC compiling,
verification, timing and export are the same as for gemmtune's own kernels.

Importing this package never imports tvm (the extra is optional, and `import tvm` costs ~1 s);
the submodules do. Call `require_tvm()` first where a missing extra must become one clear line.
"""
from __future__ import annotations

import importlib.util

from ..errors import GemmtuneError

TVM_EXTRA_HINT = "the TVM backend needs the tvm extra: pip install 'gemmtune[tvm]'"


class TvmMissingError(GemmtuneError):
    """tvm (apache-tvm) cannot be imported in this environment."""

    exit_code = 2


def tvm_available() -> bool:
    """True when apache-tvm is importable (checked without importing it)."""
    return importlib.util.find_spec("tvm") is not None


def require_tvm() -> None:
    """Raise TvmMissingError (one line) unless tvm imports."""
    if not tvm_available():
        raise TvmMissingError(TVM_EXTRA_HINT)
    try:
        import tvm  # noqa: F401  (a broken install fails here, not deep inside a schedule)
    except ImportError as exc:
        raise TvmMissingError(f"{TVM_EXTRA_HINT} ({exc})") from None
