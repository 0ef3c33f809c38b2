"""Probe: does asking L1 for W a few quad steps ahead (gemv render.QUAD_L1_AHEAD: prefetch.global.L1, which
holds no registers; W's loads then allocate in L1) lift the fp32 `nn` columns kernel at many vectors, where
its sums leave one 64-byte step of W in flight a thread?

    PYTHONPATH=src:bench python bench/probes/gemv_l1_prefetch.py [--shapes 16x4096x4096,...] [--ahead 0,1,2,3]
        [--out rows.md]

For each shape (fp32, layout nn) the chooser's pick built with each QUAD_L1_AHEAD, verified, timed alone
(bench_untuned's protocol) and streamed back to back (bench_m1_stream's; every set's D checked).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,12x4096x4096,8x4096x4096,4x4096x4096,16x14336x4096,16x4096x14336,16x11008x4096"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--ahead", default="0,1,2,3")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import probe_context, stream_checked, time_copy, us, write_lines

    import gemmtune
    from gemmtune.baseline import prepare
    from gemmtune.chooser import choose
    from gemmtune.evaluate import evaluate
    from gemmtune.spec import GemmSpec
    from gemmtune.stream_timing import set_count

    render = importlib.import_module("gemmtune.kernels.gemv.render")
    context = probe_context(torch)
    info, stream, copy_bw, pct, protocol = context.info, context.stream, context.copy_bw, context.pct, context.protocol
    lines = [f"# gemv columns kernel in quads: W asked of L1 ahead ({info.name})", "",
             f"`bench/probes/gemv_l1_prefetch.py`; % of the 1 GiB copy ({copy_bw / 1e9:.0f} GB/s).", "",
             "| shape | config | L1 ahead | single µs (% copy) | stream µs (% copy) | copy of the same bytes µs | verified |",
             "|---|---|---:|---:|---:|---:|---|"]
    for shape in args.shapes.split(","):
        spec = GemmSpec(*(int(v) for v in shape.split("x")), "nn", "fp32")
        count = set_count(spec.min_bytes, info.l2_bytes)
        prepared = prepare(spec)
        copy, _ = time_copy(torch, spec.min_bytes, info.l2_bytes, stream)
        pick = choose(spec, "sm_90a").config
        for ahead in (int(a) for a in args.ahead.split(",")):
            render.QUAD_L1_AHEAD = ahead
            try:
                kernel = gemmtune.build(spec, config=pick)
            finally:
                render.QUAD_L1_AHEAD = 0
            result = evaluate(kernel.compiled, protocol)
            timing, verdict = stream_checked(torch, kernel.compiled, prepared, count, stream, "stream")
            single = result.measurement.median_s if result.ok else None
            row = (f"| {spec.short()} | {pick.describe()} | {ahead} | {pct(spec, single)} | {pct(spec, timing.per_launch_s)} "
                   f"| {us(copy.per_launch_s)} | {'ok' if result.ok else 'WRONG'}{verdict} |")
            print(row, flush=True)
            lines.append(row)
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
