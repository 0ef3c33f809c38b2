"""The gemv family's kernel variants, named, and a shape where export's own choice on sm_90 lands on each:
what the sanitizer GPU test and the barrier test (test_aligned_barriers.py) walk so that no variant is
left out. test_gpu_sanitizer.py's CPU test checks, without a GPU, that each shape still lands there."""
from __future__ import annotations

from typing import Any

from gemmtune.kernels.gemv.config import GemvConfig, quads, stream_kind
from gemmtune.kernels.gemv.render import depends_on_launch
from gemmtune.spec import GemmSpec

# Every kernel the gemv family renders on sm_90, as variant() names it: which body (render.py's rows and
# columns kernels, the columns kernel in quads or with K split over a cluster, columns_ring.py,
# tensor_cores.py, columns_tensor_cores.py) and "+early" where it starts with the dependent-launch prologue.
# (The columns kernel with K split over a cluster, "cluster_split+early", is no pick since 2026-11-29:
# chooser.candidates.CLUSTER_SPLIT_UNTUNED says why; issue 66's shape now lands on "columns".)
VARIANTS = ("rows+early", "columns", "columns+early", "columns_quads", "ring+early",
            "tensor_cores_rows+early", "tensor_cores_columns")

# (variant, dtype, layout, M, N, K): M and N multiples of no tile size (N of 4 where the kernel needs it);
# dtype "3xtf32" is fp32 data multiplied as 3xtf32. The cluster split's shape is issue 66's synccheck report.
VARIANT_SHAPES = (
    ("rows+early", "bf16", "nt", 7, 301, 77),
    ("columns", "bf16", "nn", 3, 301, 77),
    ("columns+early", "fp32", "nn", 1, 4097, 77),  # one vector of at least 4096 outputs
    ("columns_quads", "fp32", "nn", 8, 300, 76),
    ("ring+early", "fp32", "nn", 9, 1700, 1076),
    ("tensor_cores_rows+early", "tf32", "nt", 3, 301, 1076),
    ("tensor_cores_columns", "3xtf32", "nn", 5, 300, 76),  # (no gemv candidate yet where N is not a multiple of 4)
)


def variant(spec: GemmSpec, config: GemvConfig, arch: str = "sm_90") -> str:
    """The VARIANTS name of the kernel `config` renders for `spec` on `arch`."""
    if config.ring_stages:
        body = "ring"
    elif config.k_splits > 1:
        body = "cluster_split"
    elif config.tensor_cores:
        body = f"tensor_cores_{stream_kind(spec)}"
    elif stream_kind(spec) == "rows":
        body = "rows"
    else:
        body = "columns_quads" if quads(spec) else "columns"
    return body + ("+early" if depends_on_launch(spec, arch, config) else "")


def spec_of(dtype: str, layout: str, m: int, n: int, k: int, epilogue: str = "none") -> GemmSpec:
    """The GemmSpec of a table row (dtype "3xtf32": fp32 data, math 3xtf32)."""
    if dtype == "3xtf32":
        return GemmSpec(m, n, k, layout=layout, dtype="fp32", epilogue=epilogue, math="3xtf32")
    return GemmSpec(m, n, k, layout=layout, dtype=dtype, epilogue=epilogue)


def chosen_config(spec: GemmSpec, arch: str = "sm_90") -> Any:
    """The gemv config export picks for `spec` on `arch` without a GPU (tuning database, known configs,
    chooser, default: gemmtune.export.config_source)."""
    from gemmtune.export.config_source import choose_config

    return choose_config(spec, arch, family="gemv").config
