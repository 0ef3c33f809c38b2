"""Probe: the gemv columns kernel (W = B stored K×N, fp32 layout nn) for 2-16 vectors, walking K a
row at a time (as before) or in quads (gemv config.quads: four rows of W per step, each vector's four
values at those k in one 16-byte load), across block shapes.

    PYTHONPATH=src:bench python bench/probes/gemv_columns_quads.py [--out rows.md]

For each shape: the chooser's pick built row by row and in quads, then every block shape of a small
grid (threads × threads_x × unroll, 128-1024 threads) in quads; each verified (float64
reference, poisoned D) and timed by bench_untuned's protocol (one flushed launch, median); the best
six (--stream) and both picks are then streamed back to back (bench_m1_stream's protocol) beside cuBLAS.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,8x4096x4096,2x4096x4096,16x14336x4096,16x4096x14336"
GRID = [(t, tx, u) for t in (128, 256, 512, 1024) for tx in (2, 4, 8, 16, 32) for u in (1, 2, 4)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--stream", type=int, default=6, help="stream this many of the fastest single launches")
    args = parser.parse_args()

    import torch
    from bench_m1_stream import probe_context, stream_rows, write_lines

    from gemmtune.build import build, compile_configs
    from gemmtune.chooser import choose
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import get_family
    from gemmtune.kernels.gemv.config import GemvConfig
    from gemmtune.spec import GemmSpec

    config_module = importlib.import_module("gemmtune.kernels.gemv.config")  # quads() reads QUAD_MIN_ROWS there
    quads_from = config_module.QUAD_MIN_ROWS
    context = probe_context(torch)
    protocol, info, stream, pct = context.protocol, context.info, context.stream, context.pct
    family = get_family("gemv")
    lines = context.kernels_head("gemv columns kernel: K row by row or in quads", "bench/probes/gemv_columns_quads.py", "K walk")

    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        spec = GemmSpec(m, n, k, "nn", "fp32")
        pick = choose(spec, info.arch).config
        timed = []  # (single s, label, config, kernel)
        config_module.QUAD_MIN_ROWS = 10 ** 6  # row by row
        try:
            old = build(spec, config=pick)
        finally:
            config_module.QUAD_MIN_ROWS = quads_from
        result = evaluate(old.compiled, protocol)
        timed.append((result.measurement.median_s if result.ok else None, "rows (pick)", pick, old.compiled,
                      "ok" if result.ok else result.verify.message))
        configs = [pick] + [c for c in (GemvConfig(threads=t, threads_x=tx, unroll=u) for t, tx, u in GRID)
                            if c != pick and not family.rejections(c, spec, info.arch)]
        for config, compiled in zip(configs, compile_configs([(spec, c, info.arch) for c in configs])):
            if isinstance(compiled, Exception):
                continue
            result = evaluate(compiled, protocol)
            timed.append((result.measurement.median_s if result.ok else None,
                          "quads (pick)" if config == pick else "quads", config, compiled,
                          "ok" if result.ok else result.verify.message))
        wrong = [t for t in timed if t[0] is None]
        ranked = sorted((t for t in timed[2:] if t[0] is not None), key=lambda t: t[0])
        lines += stream_rows(torch, spec, timed[:2] + ranked[:args.stream] + wrong, stream, info.l2_bytes, pct)
        torch.cuda.empty_cache()
    write_lines(lines, args.out, echo=False)  # each row was printed as it came
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
