"""Probe: 192-row wgmma tiles (3 consumer warpgroups) against the untuned pick and cuBLAS (issue 67).

    PYTHONPATH=src:bench python bench/probes/wgmma_three_consumers.py [--out rows.json]

Question: where 192-row tiles fill whole waves (6336x1024: 33x8 = 264 tiles of 192x128 on 132 SMs) or
waste fewer rows than 128/256, do they beat the pick's 128-row tiles? Shapes of the N <= 1280 / large-M
regime outside bench_models.py's suite, bf16 and fp16 nt, plus 4096^3 as a guard. Each kernel verified
against a float64 reference with a poisoned D and timed by ab_timing's protocol (cuBLAS before and after).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FIRST = [(6336, 1024, 4096, "bf16"), (4224, 768, 4096, "bf16"), (6336, 768, 2048, "bf16"), (5000, 768, 3072, "bf16"),
          (3000, 1024, 4096, "bf16"), (7040, 896, 4096, "bf16"), (9216, 1280, 1536, "bf16"), (5120, 640, 2560, "bf16"),
          (2304, 2304, 4096, "bf16"), (4096, 4096, 4096, "bf16"), (6336, 1024, 4096, "fp16"), (5000, 768, 3072, "fp16")]
# Second run (--second): shapes where a wave-fit rule fitted on FIRST says 192-row tiles fill >= 95% of
# whole waves and the pick's tile < 90%, to confirm it outside the shapes it was fitted on.
SECOND = [(12672, 1024, 2048, "bf16"), (2112, 1536, 4096, "bf16"), (8448, 768, 1024, "bf16"), (8000, 1152, 2048, "bf16"),
          (4224, 1536, 2048, "bf16"), (2112, 3072, 1024, "bf16"), (2560, 2304, 2048, "fp16"), (12672, 1024, 2048, "fp16")]


def variants(spec):
    from gemmtune.tune.many import untuned_config

    pick = untuned_config(spec, "sm_90a", "wgmma")
    out = [("pick", pick)]
    if pick.overlap_epilogue:
        out.append(("pick no overlap", pick.with_(overlap_epilogue=False)))
    for bn, stages, slices, overlap in ((128, 5, 2, False), (192, 3, 1, False)):
        out.append((f"192x{bn} s{stages}/{slices}{' ov' if overlap else ''}",
                    pick.with_(bm=192, bn=bn, consumers=3, pingpong=False, stages=stages, store_slices=slices,
                               overlap_epilogue=overlap)))
    return out


if __name__ == "__main__":
    from ab_timing import nt_cases, variants_main

    second = "--second" in sys.argv
    if second:
        sys.argv.remove("--second")
    raise SystemExit(variants_main(__doc__.splitlines()[0], lambda: nt_cases(SECOND if second else FIRST, variants)))
