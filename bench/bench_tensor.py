"""The tensor-core ladders against cuBLAS, in one run: every step of a family verified, then timed.

For each case, cuBLAS (torch.matmul in the same dtype; tf32 allowed for tf32) is timed first, then
every ladder step of the family (wgmma on sm_90a, or mma: mma.sync on any tensor-core GPU), the
best known config (tuning database, then known_configs.json, then the family's default) and, with
--candidates, the family's named candidate configs. A fused case (an epilogue) adds torch eager
(cuBLAS GEMM, then the epilogue as torch ops) and our same config without the epilogue, so the
table shows both bars: fused / eager, and fused against the same GEMM alone. Prints markdown
tables; --json keeps every row. --peak first measures the GPU's mma.sync rate with a
microbenchmark (registers only, no memory traffic): the ceiling of the mma family.

    PYTHONPATH=src python bench/bench_tensor.py [--family wgmma|mma] [--cases bf16:4096 fp16:8192:nt:relu+add]

A case is dtype:SIZE[:layout][:epilogue] (dtype 3xtf32: fp32 data as three tf32 products, timed
against cuBLAS SGEMM with tf32 off), SIZE an edge (4096) or MxNxK (4093x4091x4097); layout nt
unless named. The wgmma ladder v4 table (`git show 73f05e3:bench/results/2026-11-23-h100-tensor-ladder-v4.md`) ran as

    bench/bench_tensor.py --cases fp16:4096:relu+add bf16:4096 fp16:4096 tf32:4096 --min-time 0.2 --skip pingpong

Single runs at 4096^3 drift by a few per cent; for ratios near 1 use bench_paired.py.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from datetime import date

from gemmtune.baseline import torch_eager_measurement
from gemmtune.bench import BenchRow, bench_config, bench_cublas
from gemmtune.build import choose_config, compile_configs
from gemmtune.device import query_device
from gemmtune.errors import GemmtuneError
from gemmtune.kernels import get_family
from gemmtune.spec import LAYOUTS, GemmSpec
from gemmtune.timing import TimingProtocol

DEFAULT_CASES = ("bf16:4096", "fp16:4096", "tf32:4096", "bf16:8192", "fp16:8192", "fp16:4096:relu+add")


def parse_case(text: str) -> GemmSpec:
    dtype, size, *rest = text.split(":")
    m, n, k = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    layout = next((r for r in rest if r in LAYOUTS), "nt")
    epilogue = next((r for r in rest if r not in LAYOUTS), None)
    if dtype == "3xtf32":  # fp32 data, multiplied as three tf32 products (GemmSpec.math)
        return GemmSpec(m, n, k, layout, "fp32", epilogue, math="3xtf32")
    return GemmSpec(m, n, k, layout, dtype, epilogue)


def eager_row(spec: GemmSpec, protocol: TimingProtocol) -> BenchRow:
    try:
        m = torch_eager_measurement(spec, protocol)
    except GemmtuneError as err:
        return BenchRow("torch eager", "cuBLAS GEMM + epilogue ops", None, None, None, type(err).__name__, str(err))
    return BenchRow("torch eager", "cuBLAS GEMM + epilogue ops", m.median_s, spec.flops / m.median_s / 1e12,
                    None, "ok", "", None, len(m.samples_s))


def family_arch(family: str) -> str:
    arch = query_device().arch
    return "sm_90a" if family == "wgmma" else arch


def kernels_of(spec: GemmSpec, family_name: str, arch: str, skip: tuple[str, ...],
               with_candidates: bool) -> list[tuple[str, str, object]]:
    """(kind, name, config) of every kernel the case times: ladder steps, best, candidates."""
    family = get_family(family_name)
    out = [("step", name, config) for name, config in family.ladder(arch)
           if name not in skip and not family.rejections(config, spec, arch)]
    best = choose_config(spec, arch, family=family.name)
    out.append(("best", f"best ({best.source.split(';')[0]})", best.config))
    if with_candidates and family_name == "mma":
        from gemmtune.kernels.mma.config import candidates

        out += [("candidate", name, config) for name, config in candidates(spec, arch)]
    elif with_candidates and spec.dtype == "fp32":  # wgmma's 3xtf32 configs
        from gemmtune.kernels.wgmma.config import split_candidates

        out += [("candidate", name, config) for name, config in split_candidates(spec, arch)]
    elif with_candidates and spec.dtype == "tf32":  # wgmma's tf32 tile shapes
        from gemmtune.kernels.wgmma.config import tf32_candidates

        out += [("candidate", name, config) for name, config in tf32_candidates(spec, arch)]
    return out


def run_case(spec: GemmSpec, protocol: TimingProtocol, family_name: str = "wgmma", skip: tuple[str, ...] = (),
             with_candidates: bool = False) -> list[tuple[str, BenchRow]]:
    arch = family_arch(family_name)
    plain = spec.without_epilogue()
    kernels = kernels_of(spec, family_name, arch, skip, with_candidates)
    compile_configs([(spec, config, arch) for _, _, config in kernels])  # NVRTC in parallel, into the disk cache
    rows = [("cublas", bench_cublas(plain, protocol))]
    if not spec.epilogue.is_identity:
        rows.append(("eager", eager_row(spec, protocol)))
    rows += [(kind, bench_config(spec, name, config, arch, protocol)) for kind, name, config in kernels]
    if not spec.epilogue.is_identity and family_name == "wgmma":
        alone = kernels[-1][2].without_c_options()  # no C to load: the same kernel otherwise
        rows.append(("same_gemm", bench_config(plain, "best config, no epilogue", alone, arch, protocol)))
    # cuBLAS once more at the end: drift over the case (clocks, temperature) shows as the gap.
    rows.append(("cublas_again", replace(bench_cublas(plain, protocol), name="cuBLAS again")))
    return rows


def run_methods(spec: GemmSpec, protocol: TimingProtocol) -> list[tuple[str, BenchRow]]:
    """fp32 by every method against cuBLAS SGEMM: each method's best known config (simt on CUDA
    cores, 3xtf32 on mma.sync), for where `auto` should switch (gemmtune.precision)."""
    from gemmtune.kernels import family_for

    arch = query_device().arch
    jobs = []
    for math in ("simt", "3xtf32"):
        method = replace(spec, math=math)
        family = family_for(method, arch)
        jobs.append((method, f"{math} ({family.name})", choose_config(method, arch, family=family.name).config))
    compile_configs([(method, config, arch) for method, _, config in jobs])
    rows = [("cublas", bench_cublas(spec.without_epilogue(), protocol))]
    rows += [("method", bench_config(method, name, config, arch, protocol)) for method, name, config in jobs]
    return rows


def table(spec: GemmSpec, rows: list[tuple[str, BenchRow]]) -> str:
    cublas = next(r.median_s for kind, r in rows if kind == "cublas")
    eager = next((r.median_s for kind, r in rows if kind == "eager"), None)
    head = "| kernel | config | time (µs) | TFLOP/s | × cuBLAS GEMM |" + (" × torch eager |" if eager else "") + " status |"
    lines = [f"**{spec.short()}**", "", head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in rows:
        ratio = lambda base: f"{base / r.median_s:.3f}" if base and r.median_s else "—"  # noqa: E731
        time = f"{r.median_s * 1e6:.1f}" if r.median_s else "—"
        tflops = f"{r.tflops:.0f}" if r.tflops else "—"
        status = r.status if r.status == "ok" else f"{r.status}: {r.message[:80]}"
        lines.append(f"| {r.name} | {r.config} | {time} | {tflops} | {ratio(cublas)} |"
                     + (f" {ratio(eager)} |" if eager else "") + f" {status} |")
    return "\n".join(lines)


# --- the mma.sync ceiling ---------------------------------------------------------------------
# Each warp issues INDEPENDENT chains of mma.sync on register operands, so the tensor pipe never
# waits on a dependency or on memory: the rate it reaches is what any mma.sync GEMM could reach.
PEAK_SOURCE = r"""
extern "C" __global__ void mma_peak(float* out, int iters) {
    unsigned a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x & 7u);  // small, finite values
    for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x & 3u);
    float acc[INDEPENDENT][4] = {};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < INDEPENDENT; ++j)
            asm volatile(MMA_INSTRUCTION
                         : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float sum = 0.f;
    for (int j = 0; j < INDEPENDENT; ++j) sum += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
"""
PEAK_SHAPES = {  # dtype: (instruction, flops of one mma per warp)
    "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 2 * 16 * 8 * 16),
    "fp16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 2 * 16 * 8 * 16),
    "tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 2 * 16 * 8 * 8),
}


# (warps an SM, independent accumulators a warp): 32 warps of 8 chains is the ceiling; 8 warps of 32
# chains and 16 of 16 are the mma family's 128x256 tiles of 8 warps (64x64) and 16 warps (64x32).
PEAK_OCCUPANCY = ((32, 8), (16, 16), (8, 32))


def mma_peak(dtype: str, warps_per_sm: int = 32, independent: int = 8, iters: int = 2048) -> float:
    """TFLOP/s of back-to-back mma.sync instructions on every SM: warps_per_sm warps (blocks of 8),
    each with `independent` accumulator chains."""
    import cupy as cp

    instruction, flops = PEAK_SHAPES[dtype]
    asm = f'"{instruction} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"'
    source = f"#define INDEPENDENT {independent}\n" + PEAK_SOURCE.replace("MMA_INSTRUCTION", asm)
    kernel = cp.RawKernel(source, "mma_peak")
    blocks, threads = warps_per_sm // 8 * query_device().sm_count, 256
    out = cp.empty(blocks * threads, dtype=cp.float32)
    kernel((blocks,), (threads,), (out, cp.int32(iters)))  # compile and warm up
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(7):
        start.record()
        kernel((blocks,), (threads,), (out, cp.int32(iters)))
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    total = blocks * threads // 32 * iters * independent * flops
    return total / sorted(times)[len(times) // 2] / 1e12


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", default=list(DEFAULT_CASES), help="dtype:SIZE[:layout][:epilogue]")
    parser.add_argument("--family", default="wgmma", choices=("wgmma", "mma"), help="whose ladder (default wgmma)")
    parser.add_argument("--candidates", action="store_true", help="also time the family's named candidates (mma; wgmma for 3xtf32 and tf32)")
    parser.add_argument("--peak", action="store_true", help="first measure mma.sync's rate (bf16, fp16, tf32)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per kernel")
    parser.add_argument("--json", dest="json_path", help="write every row here")
    parser.add_argument("--skip", nargs="*", default=[], help="ladder steps to leave out")
    parser.add_argument("--methods", action="store_true",
                        help="fp32 cases: time each method's best config (simt, 3xtf32) instead of a ladder")
    args = parser.parse_args()
    device = query_device()
    protocol = TimingProtocol(min_time_s=args.min_time)
    print(f"# {device.name}, {date.today()}: {args.family} ladder vs cuBLAS (memset L2 flush, median)\n")
    results: dict = {}
    if args.peak:
        peaks = {f"{dtype} {w} warps/SM x {c} chains": mma_peak(dtype, w, c) for dtype in PEAK_SHAPES
                 for w, c in PEAK_OCCUPANCY}
        results["mma_peak_tflops"] = peaks
        print("mma.sync rate (TFLOP/s):\n" + "\n".join(f"  {name}: {v:.0f}" for name, v in peaks.items()))
    for text in args.cases:
        spec = parse_case(text)
        rows = (run_methods(spec, protocol) if args.methods
                else run_case(spec, protocol, args.family, tuple(args.skip), args.candidates))
        results[spec.short()] = [{"kind": kind, **row.to_json()} for kind, row in rows]
        print(table(spec, rows) + "\n", flush=True)
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump({"device": device.to_json(), "date": str(date.today()), "family": args.family,
                       "cases": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
