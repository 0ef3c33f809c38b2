"""The memory-bound family: GEMV-shaped GEMMs (M = 1 or N = 1), every dtype, layout and epilogue.

``config`` holds GemvConfig and its constraints; ``render`` writes the CUDA (the tensor-core kernels in
``tensor_cores`` and ``columns_tensor_cores``, the TMA-fed columns kernel in ``columns_ring``); ``space`` is
the tuner's search space. Registered first in FAMILY_MODULES: for a single row or column of output it is the
family to use (a tile-based GEMM would waste all but one row of every tile).
"""
from __future__ import annotations

from .. import Family
from .config import NAME, VERSION, GemvConfig, default_config, ladder, rejections, supports, yields
from .render import render


def _space():
    from .space import gemv_space

    return gemv_space()


FAMILY = Family(name=NAME, version=VERSION, config_type=GemvConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space, yields=yields,
                description="M = 1 or N = 1: a stream over the matrix at HBM bandwidth (16-byte loads)")
