"""Probe: what the wgmma space holds for the eval-set shapes still under 0.85x cuBLAS, untuned.

    PYTHONPATH=src:bench python bench/probes/wgmma_space_variants.py [--out rows.json]

For each shape: the chooser's pick, then hand-made variants of it (deeper ring, other tiles, with
and without the split tail), timed in one process with cuBLAS before and after (bench_untuned's
protocol: L2 emptied by a read pass, median; best of two alternating runs). Every kernel verified
against a float64 reference with a poisoned D. Kernels that the family rejects are listed, not run.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def fitted(config, spec):
    """The config with the deepest ring (6 at most) and the store slices the family accepts, or None."""
    from gemmtune.kernels.wgmma import FAMILY

    for stages in (6, 5, 4, 3):
        for slices in dict.fromkeys((config.store_slices, 2, 1)):
            trial = config.with_(stages=stages, store_slices=slices)
            if not FAMILY.rejections(trial, spec, "sm_90a"):
                return trial
    return None


def variants(spec, pick):
    """(label, config) of the pick and its variants."""
    out = [("pick", pick)]
    if pick.stages < 8:
        out.append((f"stages{pick.stages + 2}", pick.with_(stages=min(8, pick.stages + 2))))
    for bm, bn in ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (64, 256)):
        if (bm, bn) != (pick.bm, pick.bn):
            tile = fitted(pick.with_(bm=bm, bn=bn, consumers=1 if bm == 64 else 2), spec)
            if tile is not None:
                out.append((f"{bm}x{bn}", tile))
                out.append((f"{bm}x{bn} whole", tile.with_(split_tail=False)))
    out.append(("pick whole", pick.with_(split_tail=False)))
    return out


SHAPES = ((96, 96, 65536), (512, 4096, 4096), (1000, 1000, 1000), (1536, 6144, 1536), (4096, 128, 4096))


def main() -> int:
    from ab_timing import time_variants
    from gemmtune.chooser import choose
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    cases = []
    for m, n, k in SHAPES:
        spec = GemmSpec(m, n, k, "nt", args.dtype)
        cases += [(spec, label, config) for label, config in variants(spec, choose(spec, "sm_90a").config)]
    time_variants(cases, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
