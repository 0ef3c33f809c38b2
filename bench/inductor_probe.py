"""Where inductor's time goes for one spec: its kernels per call (torch.profiler), beside the time
gemmtune's protocol measures for the same compiled function, with and without CUDA graphs.

    PYTHONPATH=src python bench/inductor_probe.py [--dtype fp16] [--epilogue relu+add] [--size 4096]

The protocol's events enclose everything enqueued between them, including any gap while the CPU
runs the compiled function's Python wrapper (guards, allocation) after the L2 flush has finished;
the profiler's kernel durations do not. The difference between the two is that gap.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from gemmtune.baseline import _operands, _torch, prepare
from gemmtune.baselines.inductor import eager_function
from gemmtune.device import query_device
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol, measure


def kernels_per_call(torch, call, calls: int = 20) -> dict[str, float]:
    """Mean device time per call of each kernel name, in µs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:90]] += event.device_time / calls
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--epilogue", default="relu+add")
    parser.add_argument("--size", type=int, default=4096)
    opts = parser.parse_args()
    spec = GemmSpec(opts.size, opts.size, opts.size, dtype=opts.dtype, epilogue=opts.epilogue)
    torch = _torch()
    prepared = prepare(spec)
    a, b = _operands(spec, prepared.gpu)
    extras = {k: v for k, v in prepared.gpu.items() if k not in ("A", "B")}
    l2 = query_device().l2_bytes
    stream = torch.cuda.current_stream().cuda_stream
    for mode in ("max-autotune-no-cudagraphs", "max-autotune", "eager"):
        torch._dynamo.reset()
        fn = eager_function(torch, spec)
        call = (lambda: fn(a, b, extras)) if mode == "eager" else \
            (lambda f=torch.compile(fn, mode=mode, dynamic=False): f(a, b, extras))
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        timed = measure(call, TimingProtocol(min_time_s=0.3), l2, stream).median_s * 1e6
        kernels = kernels_per_call(torch, call)
        print(f"{spec.short()} {mode}: protocol median {timed:.1f} us; kernels per call "
              f"{sum(kernels.values()):.1f} us:")
        for name, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
            print(f"    {us:8.1f} us  {name}")


if __name__ == "__main__":
    main()
