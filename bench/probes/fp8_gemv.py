"""Probe: the fp8 decode GEMV (issue 70; kernels/gemv/fp8_rows.py) against a copy of the weights' bytes and
torch._scaled_mm, on decode shapes of public models (Llama-3-8B: 4096->4096, 4096->14336, 4096->1024,
14336->4096; Llama-3-70B: 8192->8192, 8192->28672, 28672->8192) at M = 1, 4, 16.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/fp8_gemv.py [--scaling tensor|rowwise] [--variants] [--out x.md]

Protocol: each call runs back to back over a rotating set of weight buffers (at least 256 MB in all, so every
launch reads W from HBM, not L2), the whole pass captured in one CUDA graph and timed with CUDA events; the
per-launch time is the pass over the count, the median of `--rounds` replays, calls in a rotated order each
round. Every kernel's result is checked against torch._scaled_mm first.

The bar (issue 70: "≥ 85% of copy bandwidth"): our bytes read per second (W's N·K plus A's M·K) over the bytes
read per second of a device-to-device copy of W (dst.copy_(w): reads N·K, writes N·K) on the same rotation. A
"% of copy" of 100 means we read W as fast as a copy reads it. The table also gives TB/s read and the time
against torch._scaled_mm's (same operands, same rotation). Markdown goes to --out, or $OUT/fp8_gemv.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = (("Llama-3-8B qkv/o", 4096, 4096), ("Llama-3-8B up/gate", 4096, 14336), ("Llama-3-8B kv", 4096, 1024),
          ("Llama-3-8B down", 14336, 4096), ("Llama-3-70B o", 8192, 8192), ("Llama-3-70B up/gate", 8192, 28672),
          ("Llama-3-70B down", 28672, 8192))  # (layer, K = in features, N = out features)
ROWS = (1, 4, 16)
ROTATION_BYTES = 256 << 20


def _pass_us(torch, call, count: int, rounds: int) -> list[float]:
    """µs per launch of `call(i)` for i in 0..count-1, captured in one graph, replayed `rounds` times."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(count):  # warm-up outside the capture: builds, binds, allocator
            call(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(count):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / count)
    return samples


def _variants(spec, sm_count: int, all_variants: bool):
    from gemmtune.kernels.gemv.fp8_config import default_config

    base = default_config(spec, sm_count)
    found = {"ours": base}
    if all_variants:
        for name, change in (("W alu", dict(w_convert="alu")), ("W+A alu", dict(w_convert="alu", a_convert="alu")),
                             ("tiles 2", dict(tiles=2, unroll=2)), ("unroll 2", dict(unroll=2)),
                             ("unroll 8", dict(unroll=8, warps_per_output=max(1, base.warps_per_output // 2)))):
            config = base.with_(**change)
            if config != base:
                found[name] = config
    return found


def shape_rows(torch, layer: str, m: int, k: int, n: int, scaling: str, rounds: int, all_variants: bool) -> list[dict]:
    from gemmtune.grouped.fp8_gemv import build
    from gemmtune.kernels.gemv.fp8_config import Fp8GemvSpec, rejections

    count = max(2, -(-ROTATION_BYTES // (n * k)))
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    weights = [torch.randn(n, k, generator=gen, device="cuda").div_(4).to(torch.float8_e4m3fn) for _ in range(count)]
    copies = [torch.empty_like(w) for w in weights]
    a = torch.randn(m, k, generator=gen, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = ((torch.ones(1, 1, device="cuda"), torch.ones(1, 1, device="cuda")) if scaling == "tensor" else
              (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5))
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
    spec = Fp8GemvSpec(m, n, k, "e4m3", scaling, "bf16")
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    want = torch._scaled_mm(a, weights[0].t(), sa, sb, out_dtype=torch.bfloat16).float()
    calls = {"copy": lambda i: copies[i].copy_(weights[i]),
             "torch._scaled_mm": lambda i: torch._scaled_mm(a, weights[i].t(), sa, sb, out_dtype=torch.bfloat16)}
    configs = {}
    for name, config in _variants(spec, sm_count, all_variants).items():
        if rejections(config, spec, arch):
            continue
        kernel = build(spec, config)

        def call(i, kernel=kernel):
            kernel(a.data_ptr(), weights[i].data_ptr(), sa.data_ptr(), sb.data_ptr(), outs[i].data_ptr(), None,
                   torch.cuda.current_stream().cuda_stream)
        call(0)
        torch.cuda.synchronize()
        error = float((outs[0].float() - want).abs().max() / want.abs().max())
        if error > 2e-2:
            print(f"probe: {name} ({config.describe()}) at {m}x{n}x{k}: max error {error:.1e} of torch's; not timed", flush=True)
            continue
        calls[name], configs[name] = call, config
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(3):  # three sets of rounds, the calls in a rotated order each time
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name] += _pass_us(torch, calls[name], count, max(1, rounds // 3))
    median = {name: statistics.median(t) for name, t in times.items()}
    copy_read = n * k / median["copy"] / 1e6  # TB/s a copy reads
    rows = []
    for name in configs:
        read = (n * k + m * k) / median[name] / 1e6
        rows.append({"layer": layer, "shape": f"{m}x{n}x{k}", "kernel": name, "config": configs[name].describe(),
                     "us": median[name], "read_tbs": read, "copy_us": median["copy"], "copy_read_tbs": copy_read,
                     "of_copy": read / copy_read, "torch_us": median["torch._scaled_mm"],
                     "vs_torch": median["torch._scaled_mm"] / median[name]})
    del weights, copies
    torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], scaling: str, device: str) -> str:
    lines = [f"fp8 decode GEMV (e4m3, {scaling} scales, bf16 out) on {device}: back to back over rotating weights "
             "(>= 256 MB), one CUDA graph a pass, medians. % of copy = our read TB/s (W + A) / a D2D copy's read TB/s "
             "of W; x torch = torch._scaled_mm's time / ours.", "",
             "| layer | M×N×K | kernel | µs | read TB/s | copy µs | copy read TB/s | % of copy | torch µs | × torch |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['shape']} | {r['kernel']} | {r['us']:.2f} | {r['read_tbs']:.2f} | "
                     f"{r['copy_us']:.2f} | {r['copy_read_tbs']:.2f} | {100 * r['of_copy']:.0f}% | {r['torch_us']:.2f} | "
                     f"{r['vs_torch']:.2f} |")
    ours = [r for r in rows if r["kernel"] == "ours"]
    if ours:
        worst = min(ours, key=lambda r: r["of_copy"])
        lines += ["", f"Default config: {sum(r['of_copy'] >= 0.85 for r in ours)} of {len(ours)} shapes at >= 85% of copy; "
                      f"lowest {100 * worst['of_copy']:.0f}% ({worst['layer']}, {worst['shape']})."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scaling", choices=("tensor", "rowwise"), default="tensor")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="values of M")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--variants", action="store_true", help="also time other conversions and block shapes")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        print("probe: needs an sm_89+ GPU")
        return 1
    rows: list[dict] = []
    for layer, k, n in SHAPES:
        for m in (int(v) for v in args.rows.split(",")):
            new = shape_rows(torch, layer, m, k, n, args.scaling, args.rounds, args.variants)
            rows += new
            print(f"probe: {layer} {m}x{n}x{k}: " + ", ".join(f"{r['kernel']} {r['us']:.2f} µs "
                                                               f"({100 * r['of_copy']:.0f}% of copy)" for r in new), flush=True)
    text = table(rows, args.scaling, torch.cuda.get_device_name())
    out = args.out or (Path(os.environ["OUT"]) / "fp8_gemv.md" if os.environ.get("OUT") else None)
    if out:
        out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
