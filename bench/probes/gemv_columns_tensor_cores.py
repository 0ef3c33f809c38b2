"""Probe: the gemv columns kernel on tensor cores (W = B stored K×N, layout nn; fp32 as 3xtf32, tf32
as one product) against the CUDA-core columns kernel the chooser gives 2-16 rows today.

    PYTHONPATH=src:bench python bench/probes/gemv_columns_tensor_cores.py [--out rows.md] [--stream 6]

For each shape and dtype: the chooser's pick (the CUDA-core kernel, or the tensor-core one once the
chooser hands it out), then every tensor-core block shape of a small grid (threads × warps per group
× mma tiles × unroll); each verified (float64 reference, poisoned D) and timed by bench_untuned's
protocol (one flushed launch, median); the fastest --stream of them and the pick are then streamed
back to back (bench_m1_stream's protocol) beside cuBLAS and a same-size copy.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,12x4096x4096,8x4096x4096,5x4096x4096,4x4096x4096,2x4096x4096,16x14336x4096,16x4096x14336"
GRID = [(t, w, q, u) for t in (128, 256, 512) for w in (1, 2, 4, 8) for q in (1, 2, 4) for u in (1, 2, 4)]
SMALL_GRID = [(t, w, q, u) for t, w, q, u in GRID if w > 1 and q > 1]  # --small-grid: the corner that won in tf32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--dtypes", default="fp32,tf32")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--stream", type=int, default=6, help="stream this many of the fastest single launches")
    parser.add_argument("--small-grid", action="store_true", help="only groups of 2-8 warps and 2-4 tiles")
    args = parser.parse_args()

    import torch
    from bench_m1_stream import probe_context, stream_rows, write_lines

    from gemmtune.build import compile_configs
    from gemmtune.chooser import choose
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import get_family
    from gemmtune.kernels.gemv.config import GemvConfig
    from gemmtune.spec import GemmSpec

    context = probe_context(torch)
    protocol, info, stream, pct = context.protocol, context.info, context.stream, context.pct
    family = get_family("gemv")
    lines = context.kernels_head("gemv columns kernel on tensor cores", "bench/probes/gemv_columns_tensor_cores.py", "kernel")

    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            spec = GemmSpec(m, n, k, "nn", dtype)
            pick = choose(spec, info.arch).config
            configs = [pick] + [c for c in (GemvConfig(threads=t, warps_per_output=w, unroll=u, tensor_cores=True,
                                                       mma_tiles=q) for t, w, q, u in (SMALL_GRID if args.small_grid else GRID))
                                if c != pick and not family.rejections(c, spec, info.arch)]
            timed = []  # (single s, label, config, compiled, verdict)
            for config, compiled in zip(configs, compile_configs([(spec, c, info.arch) for c in configs])):
                if isinstance(compiled, Exception):
                    timed.append((None, "compile", config, None, str(compiled).splitlines()[0]))
                    continue
                result = evaluate(compiled, protocol)
                label = "pick" if config == pick else "tensor cores"
                timed.append((result.measurement.median_s if result.ok else None, label, config, compiled,
                              "ok" if result.ok else result.verify.message))
            wrong = [t for t in timed if t[0] is None]
            ranked = sorted((t for t in timed[1:] if t[0] is not None), key=lambda t: t[0])
            lines += stream_rows(torch, spec, timed[:1] + ranked[:args.stream] + wrong, stream, info.l2_bytes, pct)
            print(f"{spec.short()}: {len(timed)} configs, {len(wrong)} wrong", flush=True)
            torch.cuda.empty_cache()
    write_lines(lines, args.out, echo=False)  # each row was printed as it came
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
