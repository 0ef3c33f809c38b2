"""Peer: the Triton baseline (gemmtune.baselines.triton_matmul: autotuned over its 16-bit configs,
verified, timed by gemmtune's protocol) against cuBLAS in the same process, on mma.sync or wgmma.

    DISABLE_MMA_V3=1 python bench/peers/triton_mma_sync.py bf16:4096   # nt, tl.dot on mma.sync (sm_90)
    python bench/peers/triton_mma_sync.py bf16:4096                    # nt, tl.dot on wgmma

Triton reads DISABLE_MMA_V3 when it compiles; the script compiles into a fresh cache directory and
says which tensor-core instruction the PTX there holds. Results:
bench/results/2026-11-26-h100-mma-deep-slices.md.
"""
import glob
import os
import sys
import tempfile

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-peer-")

from gemmtune.baselines.triton_matmul import BASELINE  # noqa: E402
from gemmtune.bench import bench_cublas  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402


def instructions() -> str:
    found = set()
    for path in glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "**", "*.ptx"), recursive=True):
        text = open(path).read()
        found |= {name for name in ("wgmma", "mma.sync") if name in text}
    return ", ".join(sorted(found)) or "none found"


if __name__ == "__main__":
    protocol = TimingProtocol(min_time_s=0.4)
    for case in sys.argv[1:] or ["bf16:4096"]:  # dtype:size (nt), e.g. bf16:4096 or fp16:8192
        dtype, size = case.split(":")
        spec = GemmSpec(int(size), int(size), int(size), "nt", dtype)
        before = bench_cublas(spec, protocol).median_s
        result = BASELINE.run(spec, protocol)
        after = bench_cublas(spec, protocol).median_s
        t = result.measurement.median_s
        print(f"{spec.short()} DISABLE_MMA_V3={os.environ.get('DISABLE_MMA_V3', '')}: {result.label}, "
              f"{t * 1e6:.1f} us, {spec.flops / t / 1e12:.0f} TFLOP/s, x{(before + after) / 2 / t:.3f} cuBLAS "
              f"({before * 1e6:.1f} / {after * 1e6:.1f} us); PTX holds {instructions()}", flush=True)
