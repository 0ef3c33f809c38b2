"""How cold does each L2 flush leave a buffer? Times one read of 8-40 MB warm and after each flush mode.

    PYTHONPATH=src python bench/flush_probe.py

Uses the read kernel of tests/test_gpu_runtime.py (32 KB per block, all loads in flight). Results
and what they mean for the timing protocol: bench/NOTES.md, "L2 flush".
"""
import sys; sys.path.insert(0, "tests")
from test_gpu_runtime import SUM
from gemmtune.kernel_source import KernelSource
from gemmtune.spec import GemmSpec
from gemmtune.compiler import compile_kernel
from gemmtune.runtime import DeviceBuffer, LoadedKernel
from gemmtune.timing import TimingProtocol, measure
from gemmtune.device import query_device
info = query_device(); l2 = info.l2_bytes
print("l2", l2)
for mb in (8, 16, 24, 30, 40):
    nbytes = mb << 20
    src = KernelSource(SUM, "read_sum", (nbytes // (32 << 10), 1, 1), (256, 1, 1), ("A", "D"), GemmSpec(64, 64, 64), "h", "1")
    with DeviceBuffer.alloc(nbytes) as da, DeviceBuffer.alloc(4) as dd, LoadedKernel(compile_kernel(src, info.arch)) as k:
        da.fill_u32(0); launch = k.bind({"A": da, "D": dd})
        row = []
        for mode in ("write", "read"):
            for flush in (False, True):
                m = measure(launch, TimingProtocol(warmup=3, min_reps=50, max_reps=500, min_time_s=0.02, flush_l2=flush, flush_mode=mode), l2)
                row.append(f"{mode}{'-flush' if flush else '-warm'} {m.median_s*1e6:.2f}")
        print(mb, "MB:", "; ".join(row))
