"""The CUDA-core fp32 family: classic tiled SGEMM templates (after Simon Boehm's ladder).

``config`` holds SimtConfig, its constraints and the ladder; ``render`` turns a config and a spec
into CUDA; ``space`` is the tuner's search space. FAMILY is what the registry sees.
"""
from __future__ import annotations

from ...spec import GemmSpec
from .. import Family
from .config import NAME, VERSION, SimtConfig, default_config, ladder, rejections
from .render import render


def supports(spec: GemmSpec, arch: str) -> str | None:
    """simt multiplies fp32 on CUDA cores: every other dtype needs a tensor-core family."""
    if spec.dtype != "fp32":
        return f"simt computes fp32 only, not {spec.dtype}"
    if spec.math == "3xtf32":
        return "math 3xtf32 runs on tensor cores (the mma family); simt multiplies fp32 on CUDA cores"
    return None


def _space():
    from .space import simt_space

    return simt_space()


FAMILY = Family(name=NAME, version=VERSION, config_type=SimtConfig, supports=supports, render=render,
                ladder=ladder, default_config=default_config, rejections=rejections, space=_space,
                description="CUDA-core fp32 tiles: shared memory, register and warp tiling, cp.async")
