"""The tensor-core ladder against cuBLAS, in one run: every wgmma step verified, then timed.

For each case, cuBLAS (torch.matmul in the same dtype; tf32 allowed for tf32) is timed first, then
every ladder step of the wgmma family and the best known config (tuning database, then
known_configs.json). A fused case (an epilogue) adds torch eager (cuBLAS GEMM, then the epilogue as
torch ops) and our same config without the epilogue, so the table shows both bars: fused / eager,
and fused against the same GEMM alone. Prints markdown tables; --json keeps every row.

    PYTHONPATH=src python bench/bench_tensor.py [--cases bf16:4096 fp16:8192 fp16:4096:relu+add] [--json F]

The ladder v4 table (bench/results/2026-11-23-h100-tensor-ladder-v4.md) ran as

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
from gemmtune.build import choose_config
from gemmtune.device import query_device
from gemmtune.errors import GemmtuneError
from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

DEFAULT_CASES = ("bf16:4096", "fp16:4096", "tf32:4096", "bf16:8192", "fp16:8192", "fp16:4096:relu+add")


def parse_case(text: str) -> GemmSpec:
    dtype, size, *epilogue = text.split(":")
    return GemmSpec(int(size), int(size), int(size), "nt", dtype, epilogue[0] if epilogue else None)


def eager_row(spec: GemmSpec, protocol: TimingProtocol) -> BenchRow:
    try:
        m = torch_eager_measurement(spec, protocol)
    except GemmtuneError as err:
        return BenchRow("torch eager", "cuBLAS GEMM + epilogue ops", None, None, None, type(err).__name__, str(err))
    return BenchRow("torch eager", "cuBLAS GEMM + epilogue ops", m.median_s, spec.flops / m.median_s / 1e12,
                    None, "ok", "", None, len(m.samples_s))


def run_case(spec: GemmSpec, protocol: TimingProtocol, skip: tuple[str, ...] = ()) -> list[tuple[str, BenchRow]]:
    family, arch = get_family("wgmma"), "sm_90a"
    plain = GemmSpec(spec.m, spec.n, spec.k, spec.layout, spec.dtype)
    rows = [("cublas", bench_cublas(plain, protocol))]
    if not spec.epilogue.is_identity:
        rows.append(("eager", eager_row(spec, protocol)))
    for name, config in family.ladder(arch):
        if name not in skip and not family.rejections(config, spec, arch):
            rows.append(("step", bench_config(spec, name, config, arch, protocol)))
    best = choose_config(spec, arch, family=family.name)
    rows.append(("best", bench_config(spec, f"best ({best.source.split(';')[0]})", best.config, arch, protocol)))
    if not spec.epilogue.is_identity:
        alone = best.config.without_c_options()  # no C to load: the same kernel otherwise
        rows.append(("same_gemm", bench_config(plain, "best config, no epilogue", alone, arch, protocol)))
    # cuBLAS once more at the end: drift over the case (clocks, temperature) shows as the gap.
    rows.append(("cublas_again", replace(bench_cublas(plain, protocol), name="cuBLAS again")))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), help="dtype:size[:epilogue] (layout nt)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per kernel")
    parser.add_argument("--json", dest="json_path", help="write every row here")
    parser.add_argument("--skip", nargs="*", default=[], help="ladder steps to leave out")
    args = parser.parse_args()
    device = query_device()
    protocol = TimingProtocol(min_time_s=args.min_time)
    print(f"# {device.name}, {date.today()}: wgmma ladder vs cuBLAS (memset L2 flush, median)\n")
    results = {}
    for text in args.cases:
        spec = parse_case(text)
        rows = run_case(spec, protocol, tuple(args.skip))
        results[spec.short()] = [{"kind": kind, **row.to_json()} for kind, row in rows]
        print(table(spec, rows) + "\n", flush=True)
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump({"device": device.to_json(), "date": str(date.today()), "cases": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
