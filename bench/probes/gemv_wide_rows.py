"""Probe: the gemv tensor-core rows kernel past 16 rows (17-64: blocks of 16 vectors) against the tile
family the chooser picks today and cuBLAS, to set gemv.config.CHOSEN_TENSOR_CORE_ROWS and the block
shape untuned shapes get there.

    PYTHONPATH=src:bench python bench/probes/gemv_wide_rows.py [--out rows.json]

Shapes: decode batches of 24-64 sequences (or MoE experts with that many tokens) against weights of
public configs not in the model-shape suite (Llama-2-7B 4096/11008, Mistral-7B kv 1024, Qwen2-1.5B
1536/8960, Phi-3-mini 3072/8192), bf16 and fp16, layout nt.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = [(m, n, k) for m in (24, 32, 48, 64)
          for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (8960, 1536), (3072, 8192))]
BLOCKS = [(256, 8, 4, 2), (256, 8, 2, 2), (256, 8, 2, 4), (256, 4, 2, 4), (128, 4, 2, 2), (256, 8, 1, 4),
          (512, 8, 2, 2), (256, 2, 2, 4)]


def cases():
    from gemmtune.build import choose_config
    from gemmtune.kernels.gemv.config import GemvConfig
    from gemmtune.spec import GemmSpec

    found = []
    for dtype in ("bf16", "fp16"):
        for m, n, k in SHAPES:
            spec = GemmSpec(m, n, k, "nt", dtype)
            found.append((spec, "today", choose_config(spec, "sm_90a").config))
            for t, w, u, tiles in BLOCKS:
                found.append((spec, f"tc{t}/{w}/u{u}/t{tiles}", GemvConfig(threads=t, warps_per_output=w, unroll=u,
                                                                            tensor_cores=True, mma_tiles=tiles)))
    return found


if __name__ == "__main__":
    from ab_timing import variants_main

    raise SystemExit(variants_main(__doc__.splitlines()[0], cases))
