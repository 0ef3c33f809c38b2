"""Where an optimized block's eager time goes (issue 68): each block of bench_blocks.py, eager and after
gemmtune.torch.optimize() (budget 0; its end-to-end guard pinned off, so that the routing stays to be measured):
the median eager forward (CUDA events), the same forward replayed in a CUDA graph (GPU time alone), host time a
forward (20 forwards enqueued, no sync between), launches bound during 10 forwards, and the torch profiler's
tables of three routed forwards.

    PYTHONPATH=$PWD/src:$PWD/bench python bench/probes/blocks_host_time.py vit,llama-decode
"""
from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def host_seconds(torch, forward, count: int = 20) -> float:
    """Seconds of host time a forward: `count` forwards enqueued back to back, timed before the sync."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        forward()
    seconds = (time.perf_counter() - start) / count
    torch.cuda.synchronize()
    return seconds


def probe(name: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench_blocks import BF16, BLOCKS
    from gemmtune.torch import optimize_model
    from gemmtune.torch.operators import plan_stats

    optimize_model.GpuBackend.time_model = lambda self, model, inputs: 1.0  # the guard sees no difference: routing stays
    torch.manual_seed(0)
    factory, shape = BLOCKS[name]
    model, x = factory().cuda().to(BF16).eval(), torch.randn(*shape, device="cuda", dtype=BF16)
    with torch.no_grad():
        routed = copy.deepcopy(model)
        report = optimize_model.optimize(routed, (x,), budget=0, erf_gelu_atol=1e-3, plan=f"/tmp/{name}.plan")
        print(report.table())
        eager = optimize_model.eager_seconds(lambda: model(x), 30)
        opt = optimize_model.eager_seconds(lambda: routed(x), 30)
        graph_eager = optimize_model.graph_seconds(lambda: model(x))
        graph_opt = optimize_model.graph_seconds(lambda: routed(x))
        binds = plan_stats()["binds"]
        for _ in range(10):
            routed(x)
        torch.cuda.synchronize()
        binds = plan_stats()["binds"] - binds
        print(f"PROF {name} eager {eager * 1e6:.0f}us opt {opt * 1e6:.0f}us | graph eager {graph_eager * 1e6:.0f} "
              f"opt {graph_opt * 1e6:.0f} | binds in 10 fwd {binds}")
        for label, module in (("eager", model), ("opt", routed)):
            print(f"PROF {name} {label} host/fwd {host_seconds(torch, lambda: module(x)) * 1e6:.0f}us")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                routed(x)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))


if __name__ == "__main__":
    for block in sys.argv[1].split(","):
        probe(block)
