"""The numba-cuda family: the SGEMM ladder written in Python (numba-cuda), compiled by numba to PTX,
assembled by ptxas, and then launched, verified and timed by gemmtune like any CUDA-C kernel.

Optional extra: pip install 'gemmtune[numba]'. Importing this package does not import numba;
`compile.compile_numba` does, and says what to install when it is missing.
"""
from __future__ import annotations

FAMILY = "numba"

# NumPy functions deprecated in 2.0 and since removed, with their replacements. numba-cuda 0.30.0
# registers overloads for them when its array support first loads, so on a newer NumPy that import
# fails ("module 'numpy' has no attribute 'row_stack'", seen on the GPU machine). The kernels here
# use none of them; the alias only lets numba-cuda load. An existing attribute is never replaced.
_REMOVED_NUMPY = {"row_stack": "vstack", "trapz": "trapezoid", "in1d": "isin"}


def numpy_compat() -> None:
    import numpy as np

    for old, new in _REMOVED_NUMPY.items():
        if not hasattr(np, old) and hasattr(np, new):
            setattr(np, old, getattr(np, new))


numpy_compat()
