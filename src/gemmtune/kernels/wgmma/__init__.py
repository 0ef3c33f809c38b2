"""The Hopper tensor-core family: TMA loads, an mbarrier pipeline and wgmma (sm_90a).

``config`` holds WgmmaConfig, its constraints and the ladder; ``ptx`` the named inline-PTX helpers;
``render`` turns a config and a spec into CUDA; ``space`` is the tuner's search space.
"""
from __future__ import annotations

from .. import Family
from .config import FAMILY as NAME
from .config import VERSION, WgmmaConfig, default_config, ladder, rejections, supports, yields_to_mma
from .render import render


def _space():
    from .space import wgmma_space

    return wgmma_space()


FAMILY = Family(name=NAME, version=VERSION, config_type=WgmmaConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space, yields=yields_to_mma,
                description="Hopper tensor cores: TMA + mbarrier ring, wgmma, warp specialization, clusters")
