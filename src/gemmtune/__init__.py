"""gemmtune: generate, auto-tune, verify, benchmark and export CUDA GEMM kernels."""
from __future__ import annotations

from .build import Kernel, build
from .epilogue import Epilogue
from .errors import GemmtuneError
from .kernel_source import KernelSource
from .spec import GemmSpec

__version__ = "0.1.0"
__all__ = ["GemmSpec", "Epilogue", "KernelSource", "Kernel", "build", "load", "GemmtuneError", "__version__"]


def load(path):
    """Load an exported kernel folder (see `gemmtune export`) as a callable on CUDA arrays."""
    from .export.loader import load as _load

    return _load(path)
