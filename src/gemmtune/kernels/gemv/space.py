"""The gemv family's search space: a few hundred configs per spec, all cheap to compile (the
tensor-core options are valid only for 2-16 rows of bf16, fp16 or tf32 A in layout nt on sm_80+; K
splits and the TMA ring only for the columns kernel on CUDA cores, sm_90+)."""
from __future__ import annotations

from ..space_base import Rule, SearchSpace, fixed_defaults
from .config import CONSTRAINTS, NAME, RING_STAGES, VERSION, GemvConfig

GEMV_DOMAINS: tuple[tuple[str, tuple], ...] = (
    ("threads", (64, 128, 256, 512, 1024)), ("warps_per_output", (1, 2, 4, 8)),
    ("threads_x", (2, 4, 8, 16, 32)), ("unroll", (1, 2, 4, 8)), ("outputs_per_warp", (1, 2, 4, 8)),
    ("tensor_cores", (False, True)), ("mma_tiles", (1, 2, 4)), ("k_splits", (1, 2, 4, 8, 16)),
    ("ring_stages", RING_STAGES),
)

GEMV_READS: dict[str, tuple[str, ...]] = {
    "dtype": (), "threads": ("threads",), "rows": ("threads", "warps_per_output"),
    "columns": ("threads_x",), "unroll": ("unroll",), "group": ("outputs_per_warp", "unroll"),
    "tensor_cores": ("tensor_cores", "mma_tiles", "outputs_per_warp", "unroll"),
    "registers": ("threads", "outputs_per_warp", "unroll", "tensor_cores", "mma_tiles", "ring_stages"),
    "k_splits": ("k_splits", "tensor_cores", "threads_x"),
    "ring_stages": ("ring_stages", "threads", "threads_x", "unroll", "tensor_cores", "k_splits"),
}


def gemv_space() -> SearchSpace:
    params = fixed_defaults(GemvConfig, GEMV_DOMAINS)
    names = tuple(p.name for p in params)
    rules = tuple(Rule(name, tuple(r for r in GEMV_READS.get(name, names) if r in names), check)
                  for name, check in CONSTRAINTS.items())
    return SearchSpace(NAME, VERSION, GemvConfig, params, rules)
