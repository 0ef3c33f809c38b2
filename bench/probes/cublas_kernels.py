"""Probe: which kernel cuBLAS runs for a shape (name, grid, block), read off the torch profiler's trace.

    python bench/probes/cublas_kernels.py [--out rows.json] [MxNxK ...]

cuBLAS's Hopper kernel names carry their tile (`tilesize128x128x64`), warpgroups, cluster and whether
they split K (`splitK`, `streamk`, `segment_k`); the grid says how many blocks it launches (a
persistent grid: about the SM count). For bf16 nt (torch.mm(A, W.t())), on the model-shape regimes'
probe shapes (none a suite or evaluation shape) unless shapes are given.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

SHAPES = ((5120, 640, 2560), (7040, 896, 4096), (3072, 384, 5120), (9216, 1280, 1536), (200, 10240, 3072),
          (448, 8192, 5120), (640, 5632, 2048), (120, 12288, 6144), (704, 3584, 7168), (1280, 1280, 10240),
          (1792, 2560, 16384), (1024, 3072, 9216), (3072, 1664, 2048), (2304, 2304, 4096), (4096, 4096, 4096))


def kernels_of(m: int, n: int, k: int) -> list[dict]:
    """The GPU kernels one bf16 torch.mm(A, W.t()) launches, with their grid, block and duration."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.mm(a, w.t())
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(a, w.t())
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return [dict(name=e["name"], grid=e["args"].get("grid"), block=e["args"].get("block"), us=e.get("dur"),
                 smem=e["args"].get("shared memory"), regs=e["args"].get("registers per thread"))
            for e in events if e.get("cat") == "kernel"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", help="MxNxK (default: the regime shapes)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] or SHAPES
    rows = []
    for m, n, k in shapes:
        for kernel in kernels_of(m, n, k):
            rows.append(dict(shape=f"{m}x{n}x{k}", **kernel))
            print(f"{m}x{n}x{k:<7} grid {str(kernel['grid']):16s} block {str(kernel['block']):14s} "
                  f"{kernel['us']} us  {kernel['name'][:150]}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
