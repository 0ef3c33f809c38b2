"""The mma.sync tensor-core family: every tensor-core GPU from sm_75 (fp16) and sm_80 (bf16, fp16,
tf32), all four layouts, any M, N, K and any alignment.

``config`` holds MmaConfig, its constraints and the ladder; ``ptx`` the named inline-PTX helpers;
``render`` turns a config and a spec into CUDA; ``space`` is the tuner's search space.
"""
from __future__ import annotations

from .. import Family
from .config import NAME, VERSION, MmaConfig, default_config, ladder, rejections, shape_class, supports
from .render import render


def _space():
    from .space import mma_space

    return mma_space()


FAMILY = Family(name=NAME, version=VERSION, config_type=MmaConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space,
                shape_class=shape_class,
                description="mma.sync tensor cores (sm_75+): ldmatrix, cp.async ring, swizzled smem, any shape")
