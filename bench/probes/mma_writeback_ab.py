"""Probe: the mma family's staged write-back against the register (pair) write-back it replaced, on the
same kernels, for a few tile shapes and slice depths, each timed against cuBLAS in the same process.

    PYTHONPATH=src python bench/probes/mma_writeback_ab.py

"pairs" renders with render.staged_write_back patched to False. Results:
bench/results/2026-11-26-h100-mma-deep-slices.md (call 5).
"""
import dataclasses
from gemmtune.spec import GemmSpec
from gemmtune.kernels.mma.config import MmaConfig
import importlib
R_ = importlib.import_module("gemmtune.kernels.mma.render")  # the module (the package exports its render function under the same name)
from gemmtune.kernels import get_family
from gemmtune.bench import bench_cublas
from gemmtune.timing import TimingProtocol
F = get_family("mma")
R = dataclasses.replace
B = MmaConfig()
CONFIGS = [("128x256 64Bx4", B), ("128x256 128Bx3", R(B, k_bytes=128, stages=3)), ("128x256 128Bx4", R(B, k_bytes=128, stages=4)),
           ("2/SM 128x128 128Bx3", R(B, bn=128, k_bytes=128, stages=3, blocks_per_sm=2)),
           ("256x128 128Bx3", R(B, bm=256, bn=128, k_bytes=128, stages=3)), ("256x128 128Bx4", R(B, bm=256, bn=128, k_bytes=128, stages=4))]
CASES = [(GemmSpec(4096, 4096, 4096, "nt", "bf16"), 3), (GemmSpec(4096, 4096, 4096, "nt", "fp16"), 2), (GemmSpec(8192, 8192, 8192, "nt", "bf16"), 1),
         (GemmSpec(3000, 5000, 1500, "nn", "bf16"), 1), (GemmSpec(1000, 1000, 1000, "nt", "bf16"), 1), (GemmSpec(4096, 4096, 4096, "nt", "bf16", "relu+add"), 1)]
protocol = TimingProtocol(min_time_s=0.4)
real = R_.staged_write_back
from gemmtune.compiler import compile_kernel
from gemmtune.bench import bench_compiled
print("| spec | config | write-back | us | x cuBLAS | TFLOP/s |")
for spec, rounds in CASES:
    kernels = []
    for name, cfg in CONFIGS:
        for staged in (True, False):
            R_.staged_write_back = real if staged else (lambda s, c: False)
            try:
                k = compile_kernel(F.render(spec, cfg, "sm_90"), "sm_90")
            except Exception as e:
                print("skip", name, e); continue
            kernels.append((name, "staged" if real(spec, cfg) and staged else "pairs", k))
    R_.staged_write_back = real
    c0 = bench_cublas(spec, protocol).median_s
    best = {}
    for rnd in range(rounds):
        for name, how, k in kernels:
            r = bench_compiled(name, how, k, protocol)
            if r.median_s is None:
                print("FAIL", spec.short(), name, how, r.status, r.detail); continue
            best[(name, how)] = min(best.get((name, how), 9), r.median_s)
    c1 = bench_cublas(spec, protocol).median_s
    c = (c0 + c1) / 2
    for (name, how), t in best.items():
        print(f"| {spec.short()} | {name} | {how} | {t*1e6:.1f} | {c/t:.3f} | {2*spec.m*spec.n*spec.k/t/1e12:.0f} |", flush=True)
    print(f"| {spec.short()} | cuBLAS | | {c0*1e6:.1f} / {c1*1e6:.1f} | 1 | |", flush=True)
