"""The wgmma family's search space: tuned parameters, each constraint's footprint, canonical rules."""
from __future__ import annotations

from typing import Any

from ...spec import GemmSpec
from ..space_base import Rule, SearchSpace, fixed_defaults
from .config import CONSTRAINTS, FAMILY, MEASURED_BN, VERSION, WgmmaConfig

WGMMA_DOMAINS: tuple[tuple[str, tuple], ...] = (
    ("bm", (64, 128, 192, 256)), ("bn", MEASURED_BN), ("stages", (2, 3, 4, 5, 6, 7)),
    ("consumers", (1, 2, 3)), ("specialized", (True,)), ("persistent", (False, True)),
    ("group_m", (1, 4, 8, 16)), ("cluster_m", (1, 2, 4)), ("tma_store", (False, True)), ("store_slices", (1, 2, 4)),
    ("pingpong", (False, True)), ("split_tail", (False, True)), ("c_spread", (False, True)),
    ("c_ring", (False, True)), ("c_l2_prefetch", (False, True)), ("stmatrix", (False, True)),
    ("serpentine", (False, True)), ("overlap_epilogue", (False, True)), ("d_over_c", (False, True)),
    ("c_first_buffer", (False, True)), ("stage_operands", (False, True)),
)

# The parameters each constraint reads (directly or through WgmmaConfig's derived properties).
WGMMA_READS: dict[str, tuple[str, ...]] = {
    "dtype": (), "staging": ("stage_operands",), "tile": ("bm", "bn", "consumers", "pingpong", "specialized", "persistent"),
    "registers": ("bm", "bn", "consumers", "pingpong"),
    "shared_memory": ("bm", "bn", "stages", "tma_store", "store_slices", "consumers", "pingpong", "d_over_c",
                      "c_first_buffer"), "pipeline": ("stages", "specialized"),
    "schedule": ("group_m", "cluster_m", "specialized", "persistent", "bn", "split_tail", "pingpong", "serpentine"),
    "store": ("tma_store", "store_slices", "bm", "bn", "specialized", "pingpong", "c_spread", "c_ring",
              "c_l2_prefetch", "stmatrix", "overlap_epilogue", "persistent", "stages", "d_over_c",
              "c_first_buffer"),
    "split": ("specialized", "pingpong", "overlap_epilogue"),
    "gated": ("bn", "overlap_epilogue", "tma_store", "store_slices"),
}


def _unused_group(c: Any, spec: GemmSpec, arch: str) -> str | None:
    # Without a persistent grid the tile order still follows group_m, but the tuner explores it
    # only where blocks run many tiles; one value for the rest avoids measuring near-twins.
    return "group_m only matters with a persistent grid" if not c.persistent and c.group_m != 1 else None


def wgmma_space() -> SearchSpace:
    params = fixed_defaults(WgmmaConfig, WGMMA_DOMAINS)
    names = tuple(p.name for p in params)
    structural = (Rule("unused_group", ("persistent", "group_m"), _unused_group, True),)
    family = tuple(Rule(name, tuple(r for r in WGMMA_READS.get(name, names) if r in names), check)
                   for name, check in CONSTRAINTS.items())
    return SearchSpace(FAMILY, VERSION, WgmmaConfig, params, structural + family)
