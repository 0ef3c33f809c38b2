"""Probe: do fewer, longer K pieces beat a split that fills every SM on few-tile, long-K shapes?

    PYTHONPATH=src:bench python bench/probes/wgmma_split_cap.py [--out rows.json]

Prediction under test: on 96x96x65536 and 512x512x65536 a split tail that cuts each tile into 32 (or
16) K ranges is bound by the partial-sum exchange after the main loop, not by the loads: DRAM needs
far fewer than 128 blocks streaming to stay busy, so capping the pieces a tile is cut into
(`WgmmaConfig.split_cap`) shortens the exchange more than it lengthens the main loop. Each shape:
the chooser's top two, then a few tiles, each with the split capped at 2 to 24 pieces and uncapped.
Timed as the other probes (ab_timing: cuBLAS before and after, L2 emptied, every kernel verified).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = ((96, 96, 65536, "bf16"), (96, 96, 65536, "fp16"), (512, 512, 65536, "bf16"),
          (256, 256, 32768, "bf16"), (1024, 1024, 16384, "bf16"), (128, 4096, 14336, "bf16"),
          (4096, 128, 4096, "bf16"), (512, 512, 65536, "tf32"))
TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))
CAPS = (2, 3, 4, 6, 8, 12, 16, 24)


def variants(spec):
    """(label, config): the chooser's top two, then each tile uncapped and at every cap below its split."""
    from gemmtune.chooser import rank
    from gemmtune.kernels.wgmma.config import WgmmaConfig
    from gemmtune.kernels.wgmma.schedule import schedule_for

    out = [("pick" if i == 0 else f"rank{i + 1}", p.config) for i, p in enumerate(rank(spec, "sm_90a")[:2])]
    for bm, bn in TILES:
        stages = 6 if bm * bn <= 128 * 128 else 4
        plain = WgmmaConfig(bm=bm, bn=bn, consumers=1 if bm == 64 else 2, stages=stages, specialized=True,
                            persistent=True, group_m=8, split_tail=True, serpentine=True)
        splits = schedule_for(spec, plain).splits
        if splits <= 1:
            continue
        out.append((f"{bm}x{bn}", plain))
        out += [(f"{bm}x{bn} max{cap}", plain.with_(split_cap=cap)) for cap in CAPS if cap < splits]
        if bn >= 128 and spec.m >= 1024:  # tall shapes: a pair along M shares B
            out.append((f"{bm}x{bn} c2", plain.with_(cluster_m=2)))
    return out


def main() -> int:
    from ab_timing import nt_cases, variants_main

    return variants_main(__doc__.splitlines()[0], lambda: nt_cases(SHAPES, variants))


if __name__ == "__main__":
    raise SystemExit(main())
