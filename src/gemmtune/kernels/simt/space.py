"""The simt family's search space: the tuned parameters' domains, each constraint's footprint
(the parameters it reads, so tune.space can broadcast verdicts) and the canonical-form rules."""
from __future__ import annotations

from typing import Any

from ...spec import GemmSpec
from ..space_base import Rule, SearchSpace, fixed_defaults
from .config import CONSTRAINTS, NAME, VERSION, SimtConfig

SIMT_DOMAINS: tuple[tuple[str, tuple], ...] = (
    ("kind", ("tiled",)), ("bm", (32, 64, 128, 256)), ("bn", (32, 64, 128, 256)), ("bk", (8, 16, 32)),
    ("tm", (1, 2, 4, 8, 16)), ("tn", (1, 2, 4, 8, 16)), ("wm", (0, 16, 32, 64, 128)),
    ("wn", (0, 16, 32, 64, 128)), ("wniter", (1, 2, 4, 8)), ("vec", (1, 4)), ("stages", (1, 2)),
    ("async_copy", (False, True)), ("pad", (0, 4)), ("stage_c", (False, True)),
)

# The parameters each simt constraint reads (directly or through SimtConfig's derived properties).
_TILE = ("kind", "bm", "bn", "tm", "tn", "wm", "wn")
SIMT_READS: dict[str, tuple[str, ...]] = {
    "kind": ("kind",), "dtype": (), "threads": _TILE, "thread_tile": ("kind", "bm", "bn", "tm", "tn"),
    "warp_tile": _TILE + ("wniter",), "vector": ("kind", "vec", "tm", "tn", "bk"),
    "loads_divide": _TILE + ("bk", "vec"), "shared_memory": ("kind", "bm", "bn", "bk", "stages", "pad"),
    "pipeline": ("stages", "async_copy", "pad", "unroll"), "registers": ("kind", "tm", "tn", "wm", "wn", "wniter"),
    "c_stage": ("kind", "bm", "bn", "bk", "stages", "pad", "stage_c"),
    "split_k": ("kind", "bk", "stage_c", "split_k"),
    "split_reduce": ("bm", "bn", "split_k", "split_reduce"),
}


def _warp_pair(c: Any, spec: GemmSpec, arch: str) -> str | None:
    if (c.wm == 0) != (c.wn == 0):
        return f"warp tile {c.wm}x{c.wn}: wm and wn are both 0 (no warp tiling) or both positive"
    return None


def _unused_wniter(c: Any, spec: GemmSpec, arch: str) -> str | None:
    # Without warp tiling wniter changes nothing; keeping one value avoids measuring twins.
    return f"wniter={c.wniter} has no effect without warp tiles" if c.wm == 0 and c.wniter != 1 else None


def _unused_stage_c(c: Any, spec: GemmSpec, arch: str) -> str | None:
    # Staging C only changes kernels whose epilogue reads C; elsewhere stage_c=True is a twin.
    return "stage_c has no effect: the epilogue does not read C" if c.stage_c and not spec.epilogue.reads_c else None


def simt_space() -> SearchSpace:
    structural = (Rule("warp_pair", ("wm", "wn"), _warp_pair, True),
                  Rule("unused_wniter", ("wm", "wniter"), _unused_wniter, True),
                  Rule("unused_stage_c", ("stage_c",), _unused_stage_c, True))
    params = fixed_defaults(SimtConfig, SIMT_DOMAINS)
    names = tuple(p.name for p in params)
    # A constraint without a declared footprint reads everything: slow (~10 s) but never wrong.
    family = tuple(Rule(name, tuple(r for r in SIMT_READS.get(name, names) if r in names), check)
                   for name, check in CONSTRAINTS.items())
    return SearchSpace(NAME, VERSION, SimtConfig, params, structural + family)
