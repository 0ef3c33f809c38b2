"""What gemmtune.torch costs over the raw kernel: CUDA graphs of many calls, replayed and timed.

For each shape, three graphs of CALLS back-to-back calls are captured on torch's stream:
  raw     the gemmtune kernel's packed launch (runtime.BoundLaunch) on the capture stream
  gt.mm   the same GEMM through gemmtune.torch.mm (the custom operator, its output allocation)
  cuBLAS  torch.mm on the same operands
and each is replayed REPLAYS times between CUDA events; the table gives the median time per call.
A graph replays only GPU work, so gt.mm - raw is what the operator adds on the GPU (extra kernels,
copies); the eager columns time the same calls launched from Python one by one.

    python bench/probes/torch_overhead.py                       # 1x4096x4096 and 4096^3 bf16
    python bench/probes/torch_overhead.py --shape 16x4096x4096 --out results.json
"""
from __future__ import annotations

import argparse
import json
import sys


def _parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def _graph_time(torch, body, calls: int, replays: int) -> float:
    """Median seconds per call of a graph of `calls` calls of body(), replayed `replays` times."""
    from gemmtune.torch.optimize_model import eager_seconds

    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            body()
    return eager_seconds(graph.replay, replays, warmup=0) / calls


def _eager_time(body, calls: int, replays: int) -> float:
    from gemmtune.torch.optimize_model import eager_seconds

    def many():
        for _ in range(calls):
            body()
    return eager_seconds(many, replays, warmup=1) / calls


def measure_shape(torch, m: int, n: int, k: int, calls: int, replays: int) -> dict:
    import gemmtune.torch as gt
    from gemmtune.invoke import bind

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)  # a weight, read as its transpose
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    gt.mm(a, w.t())
    spec, kernel = next((s, kern) for (s, _), kern in gt.cached_kernels().items() if (s.m, s.n, s.k) == (m, n, k))
    loaded = kernel.loaded(torch.cuda.current_device())
    bindings = bind(kernel.compiled.source, a, w, {}, out)
    raw = lambda: loaded.bind(bindings, torch.cuda.current_stream().cuda_stream)()  # noqa: E731
    via_op = lambda: gt.mm(a, w.t())  # noqa: E731
    cublas = lambda: torch.mm(a, w.t())  # noqa: E731
    row = {"shape": f"{m}x{n}x{k}", "family": kernel.family, "config": kernel.config.describe()}
    for name, body in (("raw", raw), ("gt_mm", via_op), ("cublas", cublas)):
        row[f"{name}_graph_us"] = _graph_time(torch, body, calls, replays) * 1e6
        row[f"{name}_eager_us"] = _eager_time(body, calls, replays) * 1e6
    row["graph_overhead_us"] = row["gt_mm_graph_us"] - row["raw_graph_us"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", action="append", help="MxNxK (bf16, B read as a transposed weight); repeatable")
    parser.add_argument("--calls", type=int, default=100, help="calls per graph (default 100)")
    parser.add_argument("--replays", type=int, default=30, help="timed replays (default 30)")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("torch_overhead: no CUDA GPU", file=sys.stderr)
        return 3
    shapes = [_parse_shape(s) for s in (args.shape or ["1x4096x4096", "4096x4096x4096"])]
    rows = [measure_shape(torch, m, n, k, args.calls, args.replays) for m, n, k in shapes]
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: µs per call (median of {args.replays} replays)")
    print("| shape | family | raw (graph) | gt.mm (graph) | overhead | cuBLAS (graph) | raw (eager) | gt.mm (eager) | cuBLAS (eager) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['family']} | {r['raw_graph_us']:.2f} | {r['gt_mm_graph_us']:.2f} | "
              f"{r['graph_overhead_us']:+.2f} | {r['cublas_graph_us']:.2f} | {r['raw_eager_us']:.2f} | "
              f"{r['gt_mm_eager_us']:.2f} | {r['cublas_eager_us']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
