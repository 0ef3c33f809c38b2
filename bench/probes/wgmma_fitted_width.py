"""Probe: tiles whose width is fitted to N (a multiple of 8 other than 64/128/192/256, for B stored
K-major) against the chooser's pick, on shapes whose N the measured widths cut badly.

    PYTHONPATH=src:bench python bench/probes/wgmma_fitted_width.py [--out rows.json]

5000x300x2048 (the eval row under 0.85x in tf32) in 128x128 tiles computes 384 columns for 300, 22%
padding, on 120 tiles (0.91 waves of 132 SMs); in 128x104 tiles it computes 312 on the same 120 tiles,
so each tile is 19% less work. For each shape: the chooser's pick, then for each fitted width
bn = 8·ceil(N / 8t) (t tiles across N) that pads less than the measured widths do, the pick with
that width (direct stores, no cluster: the pieces that need whole 64-column or 128-byte chunks),
whole tiles and with the split tail. Timed by ab_timing.time_alternately (bench_untuned's protocol,
every kernel verified against a float64 reference with a poisoned D). Written 2026-11-26, not yet run.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_timing import nt_cases, variants_main  # noqa: E402

SHAPES = ((5000, 300, 2048, "tf32"), (5000, 300, 2048, "bf16"), (4096, 300, 4096, "bf16"),
          (8192, 200, 2048, "bf16"), (2048, 600, 4096, "tf32"), (3000, 1000, 1000, "bf16"),
          (1024, 1000, 8192, "tf32"))


def fitted_widths(n: int) -> list[int]:
    """Widths 8·ceil(N / 8t) for t tiles across N, within 64..256, that pad N less than the best
    measured width does."""
    from gemmtune.kernels.config_base import ceil_div
    from gemmtune.kernels.wgmma.config import MEASURED_BN

    def padding(bn: int) -> float:
        return ceil_div(n, bn) * bn / n - 1

    best = min(padding(bn) for bn in MEASURED_BN)
    widths = {8 * ceil_div(n, 8 * t) for t in range(1, 9)}
    return sorted(bn for bn in widths if 64 <= bn <= 256 and bn not in MEASURED_BN and padding(bn) < best)


def deepest(spec, config):
    """`config` with the most ring stages (at most its own) that the family accepts, else itself."""
    from gemmtune.kernels.wgmma import FAMILY

    return next((config.with_(stages=s) for s in range(config.stages, 1, -1)
                 if not FAMILY.rejections(config.with_(stages=s), spec, "sm_90a")), config)


def variants(spec):
    from gemmtune.chooser import choose

    pick = choose(spec, "sm_90a").config
    out = [("pick", pick)]
    for bn in fitted_widths(spec.n):
        # 128-row tiles of two consumers where the pick's taller tile would hold too many accumulators.
        rows = dict(bm=128, consumers=2) if pick.bm * bn // pick.consumers // 128 > 128 else {}
        fitted = pick.with_(bn=bn, tma_store=False, store_slices=1, stmatrix=False, overlap_epilogue=False,
                            cluster_m=1, c_ring=False, c_spread=False, c_l2_prefetch=False, d_over_c=False,
                            c_first_buffer=False, **rows)
        out.append((f"bn{bn}", deepest(spec, fitted.with_(persistent=False, split_tail=False, serpentine=False,
                                                          group_m=1))))
        out.append((f"bn{bn} split", deepest(spec, fitted.with_(persistent=True, split_tail=True, group_m=8))))
    return out


if __name__ == "__main__":
    raise SystemExit(variants_main(__doc__.splitlines()[0], lambda: nt_cases(SHAPES, variants)))
