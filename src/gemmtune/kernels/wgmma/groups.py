"""The wgmma config in three groups (mainloop, schedule, epilogue), and the C path as one value.

WgmmaConfig keeps its flat fields: they are the JSON and the tuning database's keys, and records
written before these groups existed must still load. The groups are views of those fields
(`config.mainloop`, `config.schedule`, `config.epilogue`), and `WgmmaConfig.from_groups` builds a
config from them; the generator reads the C path from `config.c_path(spec)` instead of combining
tma_store, c_ring, d_over_c and c_first_buffer itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class CPath(Enum):
    """How the epilogue gets C (for a spec whose epilogue reads it)."""

    NONE = "none"            # the epilogue reads no C
    GLOBAL = "global"        # each thread reads its C elements from global memory at write-back
    TILE = "tile"            # the producer TMA-loads the whole C tile into the store buffer under the main loop
    RING = "ring"            # after a tile's k-blocks, one C slice per ring slot; the slot goes back once read
    D_OVER_C = "d_over_c"    # RING, and D is written over C in its slot and stored from there
    D_OVER_C_FIRST_BUFFER = "d_over_c_first_buffer"  # D_OVER_C, the first slice in a buffer of its own

    @property
    def through_ring(self) -> bool:
        return self in (CPath.RING, CPath.D_OVER_C, CPath.D_OVER_C_FIRST_BUFFER)

    @property
    def d_over_c(self) -> bool:
        return self in (CPath.D_OVER_C, CPath.D_OVER_C_FIRST_BUFFER)

    @property
    def first_in_buffer(self) -> bool:
        return self is CPath.D_OVER_C_FIRST_BUFFER

    @property
    def waits_on_buffer(self) -> bool:
        """C (or its first slice) lands in the store buffer: the kernel keeps C's full/empty barriers
        per buffer turn and counts the pieces that wrote D (their phases)."""
        return self in (CPath.TILE, CPath.D_OVER_C_FIRST_BUFFER)

    def flags(self) -> dict[str, bool]:
        """The flat config fields that select this path (TMA store on for every path through shared memory)."""
        return {"c_ring": self.through_ring, "d_over_c": self.d_over_c, "c_first_buffer": self.first_in_buffer}


@dataclass(frozen=True)
class MainloopGroup:
    """The block tile and the TMA → wgmma ring feeding it."""

    bm: int
    bn: int
    stages: int
    consumers: int
    specialized: bool
    pingpong: bool


@dataclass(frozen=True)
class ScheduleGroup:
    """Which tiles (and k-ranges) each block runs, in which order."""

    persistent: bool
    group_m: int
    cluster_m: int
    split_tail: bool
    serpentine: bool


@dataclass(frozen=True)
class EpilogueGroup:
    """How D is written and C read: `c_path` for epilogues that read C (CPath.NONE for a config that
    loads none), the rest for every epilogue."""

    tma_store: bool
    store_slices: int
    stmatrix: bool
    overlap_epilogue: bool
    c_path: CPath
    c_spread: bool
    c_l2_prefetch: bool
