"""Probe: which gemv block shapes stream a small GEMV fastest back to back? (The read-only ceiling probe,
stream_read_ceiling.py, streamed 8-16 MB fastest with many blocks and few loads in flight a thread.)

    PYTHONPATH=src:bench python bench/probes/gemv_block_shapes_stream.py [--shapes 1x1024x4096:bf16,...] [--out rows.md]

For each shape: the chooser's pick, then every CUDA-core block shape of a small grid (rows kind: threads ×
warps per output × unroll; columns kind: threads × threads across outputs × unroll) that the family takes,
each built, its first launch verified, and streamed back to back over rotating operand sets
(bench_m1_stream's protocol, every set's D checked). Prints the rows sorted by stream time.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "1x1024x4096:bf16,1x1024x4096:tf32,1x1024x4096:fp32"


def block_shapes(spec, pick, only: str = "", tensor_cores: bool = False):
    from gemmtune.kernels import get_family
    from gemmtune.kernels.gemv.config import stream_kind

    family = get_family("gemv")
    if only:  # "threads,warps_per_output (rows) or threads_x (columns),unroll[,k_splits];..."
        key = "warps_per_output" if stream_kind(spec) == "rows" else "threads_x"
        shapes = [tuple(int(v) for v in item.split(",")) for item in only.split(";")]
        grid = [pick.with_(threads=t, unroll=u, tensor_cores=False, mma_tiles=1, k_splits=rest[0] if rest else 1,
                           **{key: w}) for t, w, u, *rest in shapes]
    elif tensor_cores:  # the tensor-core kernel's block shapes (rows or columns kind)
        grid = [pick.with_(threads=t, warps_per_output=w, unroll=u, tensor_cores=True, mma_tiles=g, outputs_per_warp=1)
                for t, w, u, g in itertools.product((128, 256, 512), (2, 4, 8), (1, 2, 4, 8), (1, 2, 4))]
    elif stream_kind(spec) == "rows":
        grid = [pick.with_(threads=t, warps_per_output=w, unroll=u, tensor_cores=False, mma_tiles=1, outputs_per_warp=1)
                for t, w, u in itertools.product((128, 256, 512, 1024), (1, 2, 4, 8), (1, 2, 4, 8))]
    else:
        grid = [pick.with_(threads=t, threads_x=x, unroll=u, tensor_cores=False, mma_tiles=1)
                for t, x, u in itertools.product((256, 512, 1024), (2, 4, 8, 16), (1, 2, 4, 8))]
    return [pick] + [c for c in grid if c != pick and not family.rejections(c, spec, "sm_90a")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--only", default="", help="these block shapes instead of the grid: "
                                                    "'threads,warps_per_output|threads_x,unroll[,k_splits];...'")
    parser.add_argument("--tensor-cores", action="store_true", help="the grid over the tensor-core kernel's block shapes")
    parser.add_argument("--single", action="store_true", help="also time each launched alone (bench_untuned's protocol)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import probe_context, probe_spec, stream_checked, us, write_lines

    import gemmtune
    from gemmtune.chooser import choose
    from gemmtune.evaluate import evaluate

    context = probe_context(torch)
    stream, pct, protocol = context.stream, context.pct, context.protocol
    lines = context.head("gemv block shapes streamed back to back", "bench/probes/gemv_block_shapes_stream.py",
                         ["shape", "config", "single µs (% copy)", "stream µs (% copy)", "copy of the same bytes µs",
                          "verified"], numeric=3)
    for item in args.shapes.split(","):
        spec = probe_spec(item)
        count, prepared, copy = context.operands(torch, spec)
        pick = choose(spec, "sm_90a").config
        rows = []
        for config in block_shapes(spec, pick, args.only, args.tensor_cores):
            kernel = gemmtune.build(spec, config=config)
            result = evaluate(kernel.compiled, protocol) if args.single else evaluate(kernel.compiled, verify_only=True)
            single = result.measurement.median_s if args.single and result.ok else None
            timing, verdict = stream_checked(torch, kernel.compiled, prepared, count, stream, "stream")
            label = ("pick: " if config == pick else "") + config.describe()
            rows.append((timing.per_launch_s, f"| {spec.short()} | {label} | {pct(spec, single)} | {pct(spec, timing.per_launch_s)} "
                                              f"| {us(copy.per_launch_s)} | {'ok' if result.ok else 'WRONG'}{verdict} |"))
        for _, row in sorted(rows):
            print(row, flush=True)
            lines.append(row)
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
