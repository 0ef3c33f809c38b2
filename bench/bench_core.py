"""GPU benchmark for issue 2: the CUDA-core ladder and the best config against cuBLAS, same process.

    PYTHONPATH=src python bench/bench_core.py --sizes 4096 --out results.md [--sweep 60]

--sweep N first times N configs from the simt space at the first size (nn) to pick the "best" row;
without it the best row is what gemmtune.build would choose (tuning database, else default).
Writes a dated markdown table (and JSON beside it) and prints the table last.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gemmtune.bench import BenchRow, bench_config, bench_many  # noqa: E402
from gemmtune.build import choose_config, compile_configs  # noqa: E402
from gemmtune.device import query_device  # noqa: E402
from gemmtune.kernels.simt.config import SimtConfig, ladder, rejections  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402


def sweep_candidates(spec: GemmSpec, arch: str, count: int, seed: int = 0) -> list[SimtConfig]:
    grid = itertools.product((64, 128, 256), (64, 128, 256), (8, 16, 32), (4, 8), (4, 8), (32, 64, 128),
                             (32, 64, 128), (1, 2, 4), (True, False), (0, 4), (0, 8))
    valid = []
    for bm, bn, bk, tm, tn, wm, wn, wniter, cp, pad, unroll in grid:
        config = SimtConfig(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, wm=wm, wn=wn, wniter=wniter, vec=4, stages=2,
                            async_copy=cp, pad=pad, unroll=unroll)
        if not rejections(config, spec, arch) and config.accumulators >= 32:
            valid.append(config)
    random.Random(seed).shuffle(valid)
    return valid[:count]


def precompile(spec: GemmSpec, configs: list[SimtConfig], arch: str) -> None:
    """Fill the NVRTC disk cache in parallel; the timed loop then only loads cubins (and bench_config
    reports any config that failed to compile)."""
    compile_configs([(spec, c, arch) for c in configs])


def run_sweep(spec: GemmSpec, arch: str, count: int) -> list[BenchRow]:
    quick = TimingProtocol(warmup=2, min_reps=5, max_reps=30, min_time_s=0.03)
    rows = []
    precompile(spec, sweep_candidates(spec, arch, count), arch)
    for i, config in enumerate(sweep_candidates(spec, arch, count)):
        row = bench_config(spec, f"sweep{i}", config, arch, quick)
        rows.append((row, config))
        print(f"  sweep {i:3d} {row.status:<12} {row.tflops or 0:6.2f} TFLOP/s  {config.describe()}", flush=True)
    ok = sorted((r for r in rows if r[0].status == "ok"), key=lambda r: r[0].median_s)
    return ok


def markdown(rows: list[BenchRow], spec: GemmSpec, device, date: str) -> str:
    cublas = next((r.median_s for r in rows if r.name == "cuBLAS"), None)
    lines = [f"### {spec.short()} on {device.name} ({date})", "",
             "| kernel | config | time (µs) | TFLOP/s | % of cuBLAS | rel. error | status |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        pct = r.pct_of(cublas)
        lines.append(f"| {r.name} | {r.config} | {r.median_s * 1e6:.1f} | {r.tflops:.2f} | {pct:.1f}% | "
                     f"{r.rel_error if r.rel_error is not None else float('nan'):.1e} | ok |" if r.median_s else
                     f"| {r.name} | {r.config} | — | — | — | — | {r.status}: {r.message[:80]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4096", help="comma-separated cube edges")
    parser.add_argument("--sweep", type=int, default=0, help="configs to sweep for the best row")
    parser.add_argument("--out", default="bench-core.md")
    args = parser.parse_args()
    device = query_device()
    arch, date = device.arch, datetime.date.today().isoformat()
    sizes = [int(s) for s in args.sizes.split(",")]
    protocol = TimingProtocol(min_time_s=0.3, max_reps=100)
    best_sweep = run_sweep(GemmSpec(sizes[0], sizes[0], sizes[0]), arch, args.sweep) if args.sweep else []
    text, dump = [f"# gemmtune simt vs cuBLAS (fp32, tf32 off), {device.name}, {date}\n"], []
    for size in sizes:
        spec = GemmSpec(size, size, size)
        best = [(f"best (sweep #{i + 1})", c) for i, (_, c) in enumerate(best_sweep[:3])] or \
            [(f"best ({choose_config(spec, arch).source})", choose_config(spec, arch).config)]
        rows = bench_many(spec, [*ladder(arch), *best], arch, protocol,
                          on_row=lambda r: print(f"  {r.name:<20} {r.status}", flush=True))
        text.append(markdown(rows, spec, device, date))
        dump.append({"spec": spec.to_json(), "rows": [r.to_json() for r in rows],
                     "best_configs": [c.to_json() for _, c in best]})
    Path(args.out).write_text("\n".join(text))
    Path(args.out).with_suffix(".json").write_text(json.dumps({"device": device.to_json(), "runs": dump}, indent=1))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
