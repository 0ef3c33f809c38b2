"""Probe: the chooser's wgmma picks with and without one tile among its candidates, timed side by side.

    PYTHONPATH=src:bench python bench/probes/chooser_tile_ab.py --drop 128x192 [--dtypes bf16,fp16] [--holdout]
        [--out rows.json]

For every eval-set shape (bench_untuned --set eval; with --holdout HOLDOUT and MORE_HOLDOUT, in neither that set nor the bench set) whose wgmma pick moves when the tile is taken out
of `chooser.candidates.wgmma_tiles` for 2-byte inputs, this times in one process: cuBLAS, the old
pick, the new pick, twice each alternately, cuBLAS again (bench_untuned's protocol: L2 emptied by a
read pass, median; every kernel verified against a float64 reference). Prints one line per moved
pick and the sum of log gains per dtype.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Held-out shapes (few tiles, long K; in neither the evaluation set nor the bench set), first used by
# the split-stretch probe (removed with the stretch; `git show cd9632f:bench/probes/chooser_split_stretch.py`).
HOLDOUT = ((768, 768, 8192), (1024, 2048, 8192), (256, 4096, 8192), (384, 1536, 12288), (2048, 1024, 4096),
           (640, 640, 20480), (1280, 1280, 5120), (256, 2048, 16384), (1536, 768, 6144), (512, 2560, 2560),
           (3000, 1000, 6000), (200, 5000, 3000), (1024, 512, 32768), (768, 3072, 3072), (2048, 1536, 2048),
           (448, 7168, 2048))
# More held-out shapes (mid-sized, one to a few waves), chosen 2026-11-26 before their first run.
MORE_HOLDOUT = ((768, 2304, 1536), (1280, 3840, 2048), (2560, 2560, 3072), (384, 6144, 2048), (3584, 1792, 1024),
                (640, 5120, 4096), (1792, 1792, 7168), (896, 2688, 896), (1152, 4608, 2304), (2304, 3072, 1536))


def moved_picks(dtypes: list[str], shapes, tile: tuple[int, int]) -> list[tuple]:
    """(spec, old config, new config) where dropping `tile` moves the chooser's wgmma pick."""
    import gemmtune.chooser as chooser
    from ab_timing import moved_wgmma_picks

    candidates = sys.modules["gemmtune.chooser.candidates"]
    keep = candidates.wgmma_tiles

    def without(spec):
        candidates.wgmma_tiles = lambda s: tuple(t for t in keep(s) if t != tile)
        try:
            return chooser.choose(spec, "sm_90a").config
        finally:
            candidates.wgmma_tiles = keep

    return moved_wgmma_picks(dtypes, shapes, lambda spec: chooser.choose(spec, "sm_90a").config, without)


def main() -> int:
    from ab_timing import time_moved_picks, write_rows
    from bench_untuned import EVAL_SHAPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", default="128x192", help="the tile taken out, BMxBN")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--holdout", action="store_true", help="the held-out shapes instead of the eval set")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    tile = tuple(int(x) for x in args.drop.split("x"))
    dtypes = args.dtypes.split(",")
    cases = moved_picks(dtypes, HOLDOUT + MORE_HOLDOUT if args.holdout else EVAL_SHAPES, tile)
    write_rows(args.out, time_moved_picks(cases, dtypes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
