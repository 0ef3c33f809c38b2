"""The mma family's search space: tuned parameters, each constraint's footprint, canonical rules."""
from __future__ import annotations

from typing import Any

from ...spec import GemmSpec
from ..space_base import Rule, SearchSpace, fixed_defaults
from .config import CONSTRAINTS, NAME, VERSION, MmaConfig

MMA_DOMAINS: tuple[tuple[str, tuple], ...] = (
    ("bm", (32, 64, 128, 256)), ("bn", (32, 64, 128, 256)), ("k_bytes", (32, 64, 128)),
    ("wm", (16, 32, 64, 128)), ("wn", (16, 32, 64, 128)), ("stages", (2, 3, 4, 5)),
    ("ldmatrix", (True,)), ("async_copy", (True,)), ("swizzle", (True,)), ("group_m", (1, 4, 8, 16)),
    ("blocks_per_sm", (1, 2)),
)

# The parameters each constraint reads (directly or through MmaConfig's derived properties).
MMA_READS: dict[str, tuple[str, ...]] = {
    "dtype": (), "tile": ("bm", "bn", "wm", "wn"), "depth": ("k_bytes",), "registers": ("wm", "wn"),
    "pipeline": ("stages", "async_copy", "group_m"), "shared_memory": ("bm", "bn", "k_bytes", "stages"),
    "occupancy": ("bm", "bn", "wm", "wn", "k_bytes", "stages", "blocks_per_sm"),
    "transpose_copy": ("transpose_copy",), "fp8": ("wm", "wn"),
}


def _warp_not_wider_than_block(c: Any, spec: GemmSpec, arch: str) -> str | None:
    # A warp tile larger than the block tile never divides it; said once here, before the tile rule.
    return f"warp tile {c.wm}x{c.wn} exceeds block tile {c.bm}x{c.bn}" if c.wm > c.bm or c.wn > c.bn else None


def mma_space() -> SearchSpace:
    params = fixed_defaults(MmaConfig, MMA_DOMAINS)
    names = tuple(p.name for p in params)
    structural = (Rule("warp_in_block", ("bm", "bn", "wm", "wn"), _warp_not_wider_than_block, True),)
    family = tuple(Rule(name, tuple(r for r in MMA_READS.get(name, names) if r in names), check)
                   for name, check in CONSTRAINTS.items())
    return SearchSpace(NAME, VERSION, MmaConfig, params, structural + family)
