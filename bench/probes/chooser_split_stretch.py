"""Probe: the chooser's wgmma picks with and without `split_stretch`, timed side by side.

    PYTHONPATH=src python bench/probes/chooser_split_stretch.py [--dtypes tf32,fp32] [--holdout] [--out rows.json]

The chooser's model was trained without split-tail rows and describes a split-tail candidate's tiles
unsplit; `chooser.split_stretch` scales its time by how much the split schedule shortens the unsplit
one. For every shape (the evaluation set of bench_untuned, or with --holdout shapes in neither that
set nor the bench set: few tiles, long K) whose pick moves, this times in one process: cuBLAS, the old
pick (stretch 1.0), the new pick, twice each alternately, cuBLAS again (bench_untuned's protocol:
L2 emptied by a read pass, median; every kernel verified against a float64 reference). Kernels are
compiled first in a process pool. Prints one line per moved pick and the sum of log gains per dtype.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

HOLDOUT = ((768, 768, 8192), (1024, 2048, 8192), (256, 4096, 8192), (384, 1536, 12288), (2048, 1024, 4096),
           (640, 640, 20480), (1280, 1280, 5120), (256, 2048, 16384), (1536, 768, 6144), (512, 2560, 2560),
           (3000, 1000, 6000), (200, 5000, 3000), (1024, 512, 32768), (768, 3072, 3072), (2048, 1536, 2048),
           (448, 7168, 2048))


def moved_picks(dtypes: list[str], shapes, min_bytes: int | None = None) -> list[tuple]:
    """(spec, old config, new config) where the stretch moves the chooser's wgmma pick (min_bytes:
    the new pick with the stretch on for inputs of that many bytes per element and more)."""
    import gemmtune.chooser as chooser
    from ab_timing import moved_wgmma_picks

    def unstretched(spec):
        stretch, chooser.split_stretch = chooser.split_stretch, lambda *args: 1.0
        try:
            return chooser.choose(spec, "sm_90a").config
        finally:
            chooser.split_stretch = stretch

    def stretched(spec):
        keep = chooser.STRETCH_MIN_ELEMENT_BYTES
        chooser.STRETCH_MIN_ELEMENT_BYTES = min_bytes or keep
        try:
            return chooser.choose(spec, "sm_90a").config
        finally:
            chooser.STRETCH_MIN_ELEMENT_BYTES = keep

    return moved_wgmma_picks(dtypes, shapes, unstretched, stretched)


def main() -> int:
    from ab_timing import time_moved_picks, write_rows
    from bench_untuned import EVAL_SHAPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,tf32,fp32")
    parser.add_argument("--holdout", action="store_true", help="the held-out shapes instead of the eval set")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--min-bytes", type=int, help="the new arm stretches inputs of this many bytes per element "
                        "and more (default chooser.STRETCH_MIN_ELEMENT_BYTES)")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    cases = moved_picks(dtypes, HOLDOUT if args.holdout else EVAL_SHAPES, args.min_bytes)
    write_rows(args.out, time_moved_picks(cases, dtypes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
