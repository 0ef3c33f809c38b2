"""Issue 13, fp32 and M = 1: one device call that diagnoses and collects (bench/i13_probe.sh runs it).

    python bench/i13_probe.py --out DIR --budget 400

Sections, in order, each skipped once the budget is spent (rows are written as they come):
1. diagnosis (`diag-*.csv`, NEVER training data): every chooser candidate on the worst untuned fp32
   shapes and the M = 1 shapes of bench_untuned, with cuBLAS in the same process (`cublas.csv`), to
   see whether a shape loses for want of a candidate or because the model ranks badly;
2. training rows (`train-*.csv`) on shapes near those regimes but not among bench_untuned's shapes,
   candidates thinned evenly to --most per shape.
Everything is timed with bench_untuned's flush ("read": L2 emptied by a clean read pass), so the
rows match the protocol the untuned table is measured with.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_untuned import BENCH_SHAPES  # noqa: E402
from collect_chooser_data import FIELDS, time_shape  # noqa: E402

from gemmtune.build import compile_configs  # noqa: E402
from gemmtune.chooser.candidates import candidates  # noqa: E402
from gemmtune.device import query_device  # noqa: E402
from gemmtune.kernels import family_for, get_family  # noqa: E402
from gemmtune.kernels.gemv.config import stream_kind, vectors  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402

PROTOCOL = TimingProtocol(warmup=2, min_reps=5, max_reps=30, min_time_s=0.015, flush_mode="read")

DIAG_FP32 = [(200, 300, 504), (257, 1023, 4104), (128, 4096, 14336), (777, 3333, 1536), (64, 8192, 8192),
             (3001, 2999, 776), (4096, 128, 4096), (8192, 1024, 8192), (1024, 1024, 16384), (2048, 5120, 5120),
             (1000, 1000, 1000)]
DIAG_GEMV = [(1, 4096, 4096), (4096, 1, 4096)]

# Near the weak regimes, none of them a bench shape (checked below): skinny M with long K, few tiles
# with long K, tiny, skinny N, long K, mid-size odd, large.
TRAIN_FP32 = [
    (128, 3072, 12288), (96, 4096, 8192), (64, 6144, 6144), (80, 8192, 4096), (48, 7000, 7000), (112, 5120, 10240),
    (300, 1100, 4000), (256, 768, 6144), (200, 1500, 3000), (512, 512, 8192), (384, 896, 5120), (320, 1280, 3584),
    (160, 280, 512), (240, 320, 448), (192, 256, 640), (300, 260, 560), (128, 384, 768), (350, 200, 384),
    (4000, 128, 3000), (3072, 96, 6144), (6000, 160, 4096), (4096, 192, 2048), (2560, 128, 5120),
    (1024, 768, 12288), (768, 1280, 16384), (1200, 1100, 9000), (1536, 1536, 6144),
    (800, 3000, 1200), (700, 2800, 2000), (1200, 1200, 1200), (900, 1100, 800), (2800, 3200, 700),
    (3300, 2700, 900), (640, 2560, 1792),
    (7000, 1200, 7000), (1800, 4800, 4800), (2500, 5500, 4500), (10000, 900, 6000), (6000, 1500, 6000),
    (3000, 6000, 3000),
]
TRAIN_GEMV = [(1, 3584, 4096), (1, 4096, 3584), (1, 5120, 4096), (1, 3072, 4096), (1, 4096, 5120),
              (3584, 1, 4096), (4096, 1, 3584), (5120, 1, 4096), (3072, 1, 3072)]
GEMV_LAYOUT = {"fp32": "nn", "bf16": "nt"}


def gemv_configs(spec: GemmSpec, arch: str) -> list:
    """The chooser's gemv candidates, plus (rows kind, one vector) warps that take 2 or 4 outputs."""
    found = candidates("gemv", spec, arch, 132)
    if stream_kind(spec) == "rows" and vectors(spec) == 1:
        found += [c.with_(outputs_per_warp=g) for c in found if c.outputs_per_warp == 1 for g in (2, 4)]
    rejections = get_family("gemv").rejections
    return list(dict.fromkeys(c for c in found if not rejections(c, spec, arch)))


def thinned(configs: list, most: int) -> list:
    step = max(1, -(-len(configs) // most))
    return configs[::step]


def run_section(name: str, specs_configs: list, out: Path, deadline: float, info) -> None:
    """Compile the section's kernels in one pool, then time shape after shape until the deadline."""
    if time.time() > deadline:
        print(f"{name}: skipped (budget spent)", flush=True)
        return
    flat = [(spec, c, info.arch) for spec, configs in specs_configs for c in configs]
    started = time.time()
    compiled = compile_configs(flat)
    print(f"{name}: compiled {len(flat)} kernels in {time.time() - started:.0f}s", flush=True)
    at = 0
    with open(out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        for spec, configs in specs_configs:
            if time.time() > deadline:
                print(f"{name}: budget spent before {spec.short()}", flush=True)
                break
            jobs = [(spec, c, info.arch) for c in configs]
            time_shape(spec, jobs, compiled[at:at + len(jobs)], info.sm_count, info.name, writer, PROTOCOL)
            at += len(jobs)
            handle.flush()
            print(f"{name}: {time.time() - started:5.0f}s {spec.short()} {len(jobs)} configs", flush=True)


def cublas_rows(specs: list, out: Path) -> None:
    from bench_untuned import copy_bandwidth

    from gemmtune.baseline import cublas_measurement

    bench_protocol = TimingProtocol(warmup=3, min_reps=10, max_reps=100, min_time_s=0.05, flush_mode="read")
    with open(out, "w") as handle:
        handle.write("spec,cublas_s\n")
        handle.write(f"copy_bytes_per_s,{copy_bandwidth(bench_protocol):.6g}\n")
        for spec in specs:
            handle.write(f"{spec.short()},{cublas_measurement(spec, bench_protocol).median_s:.6g}\n")
            handle.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=400.0, help="seconds for everything")
    parser.add_argument("--most", type=int, default=48, help="training candidates per shape at most")
    args = parser.parse_args()
    deadline = time.time() + args.budget
    bench = set(BENCH_SHAPES)
    assert not bench & (set(TRAIN_FP32) | set(TRAIN_GEMV)), "training shapes must not be bench shapes"
    info = query_device()
    fp32 = lambda shapes: [GemmSpec(m, n, k) for m, n, k in shapes]  # noqa: E731
    gemv = lambda shapes: [GemmSpec(m, n, k, GEMV_LAYOUT[d], d) for m, n, k in shapes for d in ("fp32", "bf16")]  # noqa: E731
    simt_configs = lambda spec: candidates(family_for(spec, info.arch).name, spec, info.arch, info.sm_count)  # noqa: E731

    cublas_rows(fp32(DIAG_FP32) + gemv(DIAG_GEMV), args.out / "cublas.csv")
    run_section("diag-fp32", [(s, simt_configs(s)) for s in fp32(DIAG_FP32)], args.out / "diag-fp32.csv",
                deadline - 200, info)
    run_section("diag-gemv", [(s, gemv_configs(s, info.arch)) for s in gemv(DIAG_GEMV)], args.out / "diag-gemv.csv",
                deadline - 170, info)
    run_section("train-gemv", [(s, thinned(gemv_configs(s, info.arch), 40)) for s in gemv(TRAIN_GEMV)],
                args.out / "train-gemv.csv", deadline - 140, info)
    run_section("train-fp32", [(s, thinned(simt_configs(s), args.most)) for s in fp32(TRAIN_FP32)],
                args.out / "train-fp32.csv", deadline, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
