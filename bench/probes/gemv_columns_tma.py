"""Probe: the fp32/tf32 `nn` columns GEMV fed by TMA through a ring of shared-memory stages
(GemvConfig.ring_stages, kernels/gemv/columns_ring.py) against the chooser's pick, streamed back to back.

    PYTHONPATH=src:bench python bench/probes/gemv_columns_tma.py [--shapes 16x4096x4096:fp32:nn,...] [--out rows.md]

For each shape: the chooser's pick, then the ring kernel in every block shape of a small grid (consumer
threads × threads across the strip × quads a thread sums a stage × stages) that the family takes, each built,
its first launch verified, and streamed back to back with the dependent-launch start over rotating operand sets
(bench_m1_stream's protocol, every set's D checked against the float64 reference). Rows sorted by stream time.
The first measurement (a hand-written kernel of the same design, commit 13b1460) is in
bench/results/2026-11-27-h100-gemv-columns-tma-probe.md.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096:fp32:nn"


def ring_shapes(spec, pick, only: str = ""):
    from gemmtune.kernels import get_family

    base = pick.with_(tensor_cores=False, mma_tiles=1, k_splits=1, warps_per_output=1, outputs_per_warp=1)
    if only:  # "threads,threads_x,unroll,stages;..."
        grid = [base.with_(threads=t, threads_x=x, unroll=u, ring_stages=s)
                for t, x, u, s in (tuple(int(v) for v in item.split(",")) for item in only.split(";"))]
    else:
        grid = [base.with_(threads=t, threads_x=x, unroll=u, ring_stages=s)
                for t, x, u, s in itertools.product((128, 256, 512), (4, 8, 16), (1, 2), (2, 3, 4, 6))]
    family = get_family("gemv")
    return [c for c in grid if not family.rejections(c, spec, "sm_90a")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--only", default="", help="these ring shapes instead of the grid: 'threads,threads_x,unroll,stages;...'")
    parser.add_argument("--top", type=int, default=0, help="keep only the pick and the fastest N rows of each shape")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import probe_context, probe_spec, stream_checked, us, write_lines

    import gemmtune
    from gemmtune.chooser import choose
    from gemmtune.evaluate import evaluate

    context = probe_context(torch)
    stream, pct = context.stream, context.pct
    lines = context.head("gemv columns kernel fed by TMA, streamed back to back", "bench/probes/gemv_columns_tma.py",
                         ["shape", "config", "stream µs (% copy)", "copy of the same bytes µs", "verified"], numeric=2)
    for item in args.shapes.split(","):
        spec = probe_spec(item)
        count, prepared, copy = context.operands(torch, spec)
        pick = choose(spec, "sm_90a").config
        rows = []
        for config in [pick] + [c for c in ring_shapes(spec, pick, args.only) if c != pick]:
            kernel = gemmtune.build(spec, config=config)
            first = evaluate(kernel.compiled, verify_only=True)
            timing, verdict = stream_checked(torch, kernel.compiled, prepared, count, stream, "stream")
            label = ("pick: " if config == pick else "") + config.describe()
            rows.append((timing.per_launch_s, config == pick,
                         f"| {spec.short()} | {label} | {pct(spec, timing.per_launch_s)} | {us(copy.per_launch_s)} "
                         f"| {'ok' if first.ok else 'WRONG'}{verdict} |"))
            print(rows[-1][2], flush=True)
        rows.sort()
        kept = [r for i, r in enumerate(rows) if not args.top or i < args.top or r[1]]
        lines += [row for _, _, row in kept]
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
