"""The gemv family's search space: a few hundred configs per spec, all cheap to compile (the
tensor-core options are valid only for 2-64 rows of bf16, fp16 or tf32 A in layout nt on sm_80+; the TMA
ring only for the columns kernel on CUDA cores, sm_90+). K splits over a cluster are out of the space while
synccheck's report on them stands (chooser.candidates.CLUSTER_SPLIT_UNTUNED)."""
from __future__ import annotations

from ..space_base import Rule, SearchSpace, fixed_defaults
from ...spec import GemmSpec
from .config import CONSTRAINTS, NAME, RING_STAGES, VERSION, GemvConfig, stream_kind

GEMV_DOMAINS: tuple[tuple[str, tuple], ...] = (
    ("threads", (64, 128, 256, 512, 1024)), ("warps_per_output", (1, 2, 4, 8)),
    ("threads_x", (2, 4, 8, 16, 32)), ("unroll", (1, 2, 4, 8)), ("outputs_per_warp", (1, 2, 4, 8)),
    ("tensor_cores", (False, True)), ("mma_tiles", (1, 2, 4)), ("k_splits", (1,)),  # (1, 2, 4, 8, 16) until 2026-11-29
    ("ring_stages", RING_STAGES),
)

GEMV_READS: dict[str, tuple[str, ...]] = {
    "dtype": (), "threads": ("threads",), "rows": ("threads", "warps_per_output"),
    "columns": ("threads_x",), "unroll": ("unroll",), "group": ("outputs_per_warp", "unroll"),
    "tensor_cores": ("tensor_cores", "mma_tiles", "outputs_per_warp", "unroll", "threads", "warps_per_output"),
    "registers": ("threads", "outputs_per_warp", "unroll", "tensor_cores", "mma_tiles", "ring_stages"),
    "k_splits": ("k_splits", "tensor_cores", "threads_x", "threads", "ring_stages"),
    "ring_stages": ("ring_stages", "threads", "threads_x", "unroll", "tensor_cores", "k_splits"),
}


# Each kernel reads only some of the config's fields; the others would make twins of one kernel, which a
# tuner measures again under another name (a 60 s tune of 16x4096x4096 fp32 nn, 2026-11-27: 4,680 candidates,
# mostly the same columns kernels with other warps_per_output / outputs_per_warp). One value stands for all.
DEFAULT = GemvConfig()


def _unused_threads_x(c: GemvConfig, spec: GemmSpec, arch: str) -> str | None:
    # The rows kernels (and every tensor-core kernel) size their blocks by warps, not threads across outputs.
    if (c.tensor_cores or stream_kind(spec) == "rows") and c.threads_x != DEFAULT.threads_x:
        return f"threads_x={c.threads_x} has no effect on this kernel (the columns kernels on CUDA cores read it)"
    return None


def _unused_groups(c: GemvConfig, spec: GemmSpec, arch: str) -> str | None:
    # The columns kernels on CUDA cores (register-fed or TMA-fed) split a block by threads_x alone.
    if not c.tensor_cores and stream_kind(spec) == "columns" and (c.warps_per_output, c.outputs_per_warp) != (1, 1):
        return "warps_per_output and outputs_per_warp have no effect on the CUDA-core columns kernels"
    return None


def gemv_space() -> SearchSpace:
    structural = (Rule("unused_threads_x", ("tensor_cores", "threads_x"), _unused_threads_x, True),
                  Rule("unused_groups", ("tensor_cores", "warps_per_output", "outputs_per_warp"), _unused_groups, True))
    params = fixed_defaults(GemvConfig, GEMV_DOMAINS)
    names = tuple(p.name for p in params)
    rules = tuple(Rule(name, tuple(r for r in GEMV_READS.get(name, names) if r in names), check)
                  for name, check in CONSTRAINTS.items())
    return SearchSpace(NAME, VERSION, GemvConfig, params, structural + rules)
