"""The mma.sync tensor-core family: every tensor-core GPU from sm_75 (fp16) and sm_80 (bf16, fp16,
tf32), all four layouts, any M, N, K and any alignment; fp8 (e4m3, e5m2, layout nt, tensor / rowwise / block
scales) from sm_89, where the registry picks it on every arch but sm_90 (the grouped wgmma kernel's).

``config`` holds MmaConfig, its constraints and the ladder; ``ptx`` the named inline-PTX helpers;
``render`` turns a config and a spec into CUDA; ``space`` is the tuner's search space.
"""
from __future__ import annotations

from .. import Family
from .config import NAME, VERSION, MmaConfig, default_config, ladder, rejections, shape_class, supports, yields
from .render import render


def _space():
    from .space import mma_space

    return mma_space()


FAMILY = Family(name=NAME, version=VERSION, config_type=MmaConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space,
                shape_class=shape_class, yields=yields,
                description="mma.sync tensor cores (sm_75+; fp8 e4m3/e5m2 from sm_89): ldmatrix, cp.async ring, "
                            "swizzled smem, any shape")
