"""Grouped GEMMs (MoE experts in one launch): D[rows of g] = A[rows of g] · B[g], group ends on the device.

`spec.py` (GroupedSpec, the float64 reference), `config.py` (tile shapes and their limits),
`schedule.py` (the tile scheduler over all groups, as CUDA and its Python twin), `render.py` (the
persistent warp-specialized wgmma kernel), `launch.py` (compile, load, launch); torch's entry points
(`gemmtune::grouped_mm` and the others) are in gemmtune/torch/grouped_calls.py. Design: docs/families/grouped.md.
"""
from .config import GroupedConfig, candidates, default_config, rejections
from .spec import GroupedSpec, group_offsets, reference

__all__ = ["GroupedSpec", "GroupedConfig", "group_offsets", "reference", "default_config", "candidates",
           "rejections"]
