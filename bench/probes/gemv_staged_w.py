"""Probe: does staging W through shared memory by cp.async (GemvConfig.stage_depth) let the fp32 `nn`
columns kernel keep enough bytes in flight at 12-16 vectors, where its sums leave one 512-thread block
an SM and one 64-byte step in flight a thread?

    PYTHONPATH=src:bench python bench/probes/gemv_staged_w.py [--shapes 16x4096x4096,...] [--depths 2,4]
        [--out rows.md]

For each shape (fp32, layout nn): the chooser's pick, then the pick with W staged `depth` quad steps
ahead (unroll 1). Each is verified, timed alone (bench_untuned's protocol) and streamed back to back over
rotating operand sets (bench_m1_stream's protocol; every launch's D checked); cuBLAS and a copy of the
same bytes streamed the same way.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,12x4096x4096,8x4096x4096,4x4096x4096,16x14336x4096,16x4096x14336,16x11008x4096"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--depths", default="2,3,4")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import poisoned_sets, probe_context, stream_checked, time_copy, time_cublas, us, write_lines

    import gemmtune
    from gemmtune.baseline import prepare
    from gemmtune.chooser import choose
    from gemmtune.errors import GemmtuneError
    from gemmtune.evaluate import evaluate
    from gemmtune.spec import GemmSpec
    from gemmtune.stream_timing import set_count

    context = probe_context(torch)
    protocol, info, stream, copy_bw, pct = context.protocol, context.info, context.stream, context.copy_bw, context.pct
    lines = [f"# gemv columns kernel, W staged through shared memory ({info.name})", "",
             "`bench/probes/gemv_staged_w.py`; % of the 1 GiB copy "
             f"({copy_bw / 1e9:.0f} GB/s); stream: back to back over rotating operand sets.", "",
             "| shape | config | single µs (% copy) | stream µs (% copy) | cuBLAS stream µs | copy stream µs | verified |",
             "|---|---|---:|---:|---:|---:|---|"]
    for shape in args.shapes.split(","):
        spec = GemmSpec(*(int(v) for v in shape.split("x")), "nn", "fp32")
        count = set_count(spec.min_bytes, info.l2_bytes)
        prepared = prepare(spec)
        sets = poisoned_sets(torch, prepared, count)
        cublas = time_cublas(torch, spec, sets, stream).per_launch_s
        del sets
        copy, _ = time_copy(torch, spec.min_bytes, info.l2_bytes, stream)
        pick = choose(spec, "sm_90a").config
        configs = [pick] + [pick.with_(unroll=1, stage_depth=int(d)) for d in args.depths.split(",")]
        for config in configs:
            try:
                kernel = gemmtune.build(spec, config=config)
            except GemmtuneError as err:
                lines.append(f"| {spec.short()} | {config.describe()} | not built: {err} |")
                print(lines[-1], flush=True)
                continue
            result = evaluate(kernel.compiled, protocol)
            verified = "ok" if result.ok else f"WRONG: {result.verify.message}"
            timing, verdict = stream_checked(torch, kernel.compiled, prepared, count, stream, "stream")
            single = result.measurement.median_s if result.ok else None
            row = (f"| {spec.short()} | {config.describe()} | {pct(spec, single)} | {pct(spec, timing.per_launch_s)} "
                   f"| {us(cublas)} | {us(copy.per_launch_s)} | {verified}{verdict} |")
            print(row, flush=True)
            lines.append(row)
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
