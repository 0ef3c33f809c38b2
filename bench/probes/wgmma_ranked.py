"""Probe: the chooser's top-ranked wgmma candidates of some shapes, timed side by side.

    PYTHONPATH=src:bench python bench/probes/wgmma_ranked.py --case 4096x128x4096:nt:bf16 --top 12 [--out rows.json]

What a tune of the top N would measure, without the tuner: each candidate verified against a float64
reference with a poisoned D and timed by bench_untuned's protocol (L2 emptied by a read pass,
median; best of two alternating runs; cuBLAS before and after in the same process). Labels are the
rank and the model's predicted µs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from ab_timing import time_variants
    from gemmtune.chooser import rank
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", required=True, help="MxNxK:layout:dtype (repeatable)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    cases = []
    for case in args.case:
        shape, layout, dtype = case.split(":")
        spec = GemmSpec(*(int(x) for x in shape.split("x")), layout, dtype)
        for i, pick in enumerate(rank(spec, "sm_90a", family="wgmma")[:args.top]):
            cases.append((spec, f"r{i} {pick.predicted_s * 1e6:.1f}", pick.config))
    time_variants(cases, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
