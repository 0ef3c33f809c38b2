"""Probe: the gemv columns kernel in quads (fp32, layout nn, 2-16 vectors) with its W rows prefetched
into L2 some loop iterations ahead (gemv config.prefetch), at the chooser's block shape and at unroll 2.

    PYTHONPATH=src:bench python bench/probes/gemv_columns_prefetch.py [--out rows.md]

Prediction under test: at 16 vectors a thread keeps one quad of W loads in flight (its registers hold
64 sums), so every step waits on an HBM round trip and the 64 MB 16x4096x4096 streams at ~56% of
copy bandwidth; an L2 prefetch 2-8 iterations ahead costs no register and lets those loads hit L2.
Each config verified (float64 reference, poisoned D), timed once flushed (bench_untuned's protocol)
and streamed back to back (bench_m1_stream's protocol) beside cuBLAS.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096,8x4096x4096,4x4096x4096,2x4096x4096,16x14336x4096,16x4096x14336"
DISTANCES = (0, 1, 2, 4, 8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import poisoned_sets, stream_checked, time_cublas, us, write_lines
    from bench_untuned import copy_bandwidth, untuned_protocol

    from gemmtune.baseline import prepare
    from gemmtune.build import compile_configs
    from gemmtune.chooser import choose
    from gemmtune.device import query_device
    from gemmtune.evaluate import evaluate
    from gemmtune.kernels import get_family
    from gemmtune.spec import GemmSpec
    from gemmtune.stream_timing import set_count

    protocol, info = untuned_protocol(), query_device()
    stream = torch.cuda.current_stream().cuda_stream
    copy_bw = copy_bandwidth(protocol)
    family = get_family("gemv")
    lines = [f"# gemv columns kernel in quads with an L2 prefetch ({info.name})", "",
             f"`bench/probes/gemv_columns_prefetch.py`; % of the 1 GiB copy ({copy_bw / 1e9:.0f} GB/s), "
             "A + B + D once.", "",
             "| shape | config | single µs (% copy) | stream µs (% copy) | cuBLAS stream µs | verified |",
             "|---|---|---:|---:|---:|---|"]

    def pct(spec, seconds):
        return f"{us(seconds)} ({spec.min_bytes / seconds / copy_bw:.0%})" if seconds else "-"

    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        spec = GemmSpec(m, n, k, "nn", "fp32")
        pick = choose(spec, info.arch).config
        bases = [pick] + ([pick.with_(unroll=2)] if pick.unroll != 2 else [])
        configs = [b.with_(prefetch=d) for b in bases for d in DISTANCES
                   if not family.rejections(b.with_(prefetch=d), spec, info.arch)]
        count = set_count(spec.min_bytes, info.l2_bytes)
        prepared = prepare(spec)
        sets = poisoned_sets(torch, prepared, count)
        cublas = time_cublas(torch, spec, sets, stream).per_launch_s
        del sets
        for config, compiled in zip(configs, compile_configs([(spec, c, info.arch) for c in configs])):
            single, streamed, verified = None, None, "compile failed"
            if not isinstance(compiled, Exception):
                result = evaluate(compiled, protocol)
                verified = "ok" if result.ok else result.verify.message
                if result.ok:
                    single = result.measurement.median_s
                    timing, verdict = stream_checked(torch, compiled, prepared, count, stream, "stream")
                    streamed, verified = timing.per_launch_s, verified + verdict
            label = "pick" if config == pick else ""
            row = (f"| {spec.short()} | {config.describe()} {label} | {pct(spec, single)} | {pct(spec, streamed)} "
                   f"| {us(cublas)} | {verified} |")
            print(row, flush=True)
            lines.append(row)
        torch.cuda.empty_cache()
    write_lines(lines, args.out, echo=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
