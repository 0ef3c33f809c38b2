"""The numba-cuda family: the SGEMM ladder written in Python (numba-cuda), compiled by numba to PTX,
assembled by ptxas, and then launched, verified and timed by gemmtune like any CUDA-C kernel.

Optional extra: pip install 'gemmtune[numba]'. Importing this package does not import numba;
`compile.compile_numba` does, and says what to install when it is missing.
"""
from __future__ import annotations

FAMILY = "numba"
