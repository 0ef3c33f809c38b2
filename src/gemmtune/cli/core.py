"""Verbs `show` (CUDA + resource report, no GPU needed) and `bench` (ladder vs cuBLAS on the GPU)."""
from __future__ import annotations

import argparse
import sys

from typing import Any

from ..bench import BenchRow, bench_many
from ..build import build, target_arch
from ..errors import ConfigError
from ..spec import refuse_fp8
from ..timing import TimingProtocol
from .common import (add_db_argument, add_family_argument, add_spec_arguments, console, db_to_read,
                     family_from_args, spec_from_args)


def register(subparsers) -> None:
    show = subparsers.add_parser("show", help="print a kernel's CUDA and its ptxas resource report (no GPU needed)",
                                 description="Generate the kernel for a GEMM, compile it with NVRTC and print "
                                             "the CUDA source followed by the resource report.")
    add_spec_arguments(show)
    add_family_argument(show)
    show.add_argument("--config", help="a ladder step name of the family (simt: naive ... double_buffer) or a JSON "
                                       "object of config fields")
    show.add_argument("--arch", help="target: sm_80, sm_86, sm_89, sm_90, sm_90a (default: the GPU's, else sm_90)")
    show.add_argument("--no-code", action="store_true", help="print only the resource report")
    add_db_argument(show, "tuning database the default config is looked up in (default "
                          "~/.cache/gemmtune/tuning.sqlite)")
    show.add_argument("--explain", action="store_true",
                      help="also print the config chooser's ranking: the pick, why, and the runners-up")
    show.set_defaults(run=run_show)

    bench = subparsers.add_parser("bench", help="verify and time every ladder step and the best config against cuBLAS",
                                  description="Runs each step of the optimization ladder and the best known config "
                                              "for the shape, verified against a float64 reference, timed against "
                                              "cuBLAS (in the spec's dtype; fp32 with tf32 off) in the same "
                                              "process.")
    add_spec_arguments(bench)
    add_family_argument(bench)
    bench.add_argument("--steps", default="all", help="'all', 'best', or comma-separated ladder steps of the family")
    add_db_argument(bench, "tuning database the best config is looked up in (default "
                           "~/.cache/gemmtune/tuning.sqlite)")
    bench.add_argument("--explain", action="store_true",
                       help="also print where the best config came from in full (which database entry, known "
                            "config or chooser pick, and why)")
    bench.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per kernel (default 0.3)")
    bench.add_argument("--baselines", default=None,
                       help="comma-separated: cublas, eager (torch unfused), cutlass, triton, inductor "
                            "(torch.compile max-autotune), tvm (dlight); 'none' for none (default: every one "
                            "installed that can run the spec; the others are skipped with one line each)")
    bench.add_argument("--accuracy", action="store_true",
                       help="instead of timing: each fp32 method's error (simt, 3xtf32, tf32) against float64 beside "
                            "cuBLAS SGEMM's, on uniform, mixed-magnitude and near-range-limit inputs")
    bench.add_argument("--json", dest="json_path", help="also write the run (rows, skipped baselines) as JSON")
    bench.add_argument("--csv", dest="csv_path", help="also write the rows as CSV, one line per row")
    bench.set_defaults(run=run_bench)


def run_show(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    kern = build(spec, config=args.config, arch=args.arch, family=args.family, db_path=db_to_read(args.db))
    src = kern.compiled.source
    if not args.no_code:
        print(kern.source)
    print(f"// kernel   {src.entry}  ({spec.short()})")
    print(f"// config   {src.family}: {kern.config.describe()}  [{kern.config_source}]")
    cluster = f"  clusters of {src.cluster_blocks} blocks" if src.cluster_blocks > 1 else ""
    early = "  dependent launch (starts as the kernel before it ends)" if src.dependent_launch else ""
    print(f"// launch   grid {src.grid}  block {src.block}  dynamic smem {src.dynamic_smem} B{cluster}{early}")
    print(f"// ptxas    {kern.arch}: {kern.resources.summary()}")
    note = decode_note(spec)
    if note:
        print(note)
    if args.explain:
        print(explain_text(spec, kern))
    return 0


def decode_note(spec) -> str:
    """For an fp8 spec that gemmtune.torch.scaled_mm runs on the fp8 decode GEMV (M <= 16, per-tensor or
    rowwise scales), a line saying so: show, bench, tune and export build the grouped kernel above."""
    if not spec.fp8 or tuple(spec.epilogue.ops) not in ((), ("bias_col",)):  # scaled_mm's epilogues: none, a bias
        return ""
    from ..grouped.fp8_gemv import decode_spec

    if decode_spec(spec.m, spec.n, spec.k, spec.dtype, spec.scaling, spec.out_dtype, False) is None:
        return ""
    return ("// note     gemmtune.torch.scaled_mm runs this shape on the fp8 decode GEMV (M <= 16: "
            "kernels/gemv/fp8_rows.py), not on the kernel above")


def explain_text(spec, kern) -> str:
    """The chooser's ranking for the spec (what it would pick, and why), whatever built the kernel."""
    from ..arch import geometry
    from ..chooser import explain, rank
    from ..device import present_device

    gpu = geometry(present_device(), kern.arch)
    picks = rank(spec, kern.arch, gpu.sm_count, kern.family)
    used = "" if kern.config_source.startswith("chooser") else f"\n  (the kernel above came from {kern.config_source})"
    return explain(picks) + f"\n  GPU model: {gpu.sm_count} SMs ({gpu.source})" + used


def best_choice(spec, arch: str, family, db: Any = None):
    """The best known config of `family` for `spec` (export.config_source.ConfigChoice: config and
    provenance), looked up in the tuning database `db` (default: the tuner's) first."""
    from ..device import present_device
    from ..export.config_source import choose_config

    return choose_config(spec, arch, present_device(), db, family=family.name)


def best_row_name(choice) -> str:
    """The bench row of the best config: 'best' and its source in a few words."""
    return f"best ({choice.provenance.short()})"


def bench_candidates(spec, steps: str, arch: str, family, db: Any = None) -> tuple[list, Any]:
    """(row name, config) pairs to bench, and the best config's ConfigChoice (None when not benched)."""
    ladder_steps = family.ladder(arch)
    if steps not in ("all", "best"):
        named = dict(ladder_steps)
        wanted = [s.strip() for s in steps.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in named]
        if unknown:
            raise ConfigError(f"unknown {family.name} ladder step(s) {', '.join(unknown)}; "
                              f"known: {', '.join(named)}")
        return [(s, named[s]) for s in wanted], None
    choice = best_choice(spec, arch, family, db)
    best = [(best_row_name(choice), choice.config)]
    return (best if steps == "best" else [*ladder_steps, *best]), choice


def explain_best(choice) -> str:
    """The full provenance of the best config, for bench --explain."""
    return f"{best_row_name(choice)}: {choice.provenance.describe()}"


def _fmt(value, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def print_bench_table(rows: list[BenchRow], title: str) -> None:
    from rich.table import Table

    cublas = next((r.median_s for r in rows if r.name == "cuBLAS"), None)
    table = Table(title=title)
    for col in ("kernel", "config", "time", "TFLOP/s", "% of cuBLAS", "rel. error", "compile", "status"):
        table.add_column(col, justify="left" if col in ("kernel", "config", "status") else "right")
    for r in rows:
        status = r.status if r.status == "ok" else f"{r.status}: {r.message[:60]}"
        table.add_row(r.name, r.config, _fmt(r.median_s and r.median_s * 1e6, "{:.1f} µs"),
                      _fmt(r.tflops, "{:.2f}"), _fmt(r.pct_of(cublas), "{:.1f}%"), _fmt(r.rel_error, "{:.1e}"),
                      _fmt(r.compile_s, "{:.0f} s"), status)
    console().print(table)


def _failed(rows: list[BenchRow], ours: set[str]) -> list[BenchRow]:
    """Rows that make the exit code 1: a gemmtune kernel that failed, or any baseline that computed a
    wrong result (a baseline that cannot build or run the spec is a row, not a failure)."""
    return [r for r in rows if r.status != "ok" and (r.name in ours or r.status == "VerifyError")]


def run_bench(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    if args.accuracy:
        refuse_fp8(spec, "bench --accuracy")
        return run_accuracy(spec, db_to_read(args.db), args.json_path)
    from ..baselines import parse_names, resolve, side_by_side
    from ..bench_report import BenchReport, write_csv, write_json
    from ..device import free_memory, query_device

    wanted = parse_names(args.baselines)  # an unknown name is exit 2 even without a GPU
    arch = target_arch(None)
    family = family_from_args(args, spec, arch)  # a bad --family is exit 2 even without a GPU
    db = db_to_read(args.db)  # and so is a bad --db
    device = query_device()
    spec.check_fits(free_memory())
    protocol = TimingProtocol(min_time_s=args.min_time)
    candidates, choice = bench_candidates(spec, args.steps, arch, family, db)
    chosen, skipped = resolve(wanted, spec)
    print(f"{device.name} ({arch}, {device.sm_count} SMs): {spec.short()}, {len(candidates)} {family.name} kernels "
          f"+ {', '.join(b.name for b in chosen) or 'no baselines'}", file=sys.stderr)
    for item in skipped:
        print(f"  {item.line()}", file=sys.stderr)

    def progress(row: BenchRow) -> None:
        print(f"  {row.name:<24} {row.status}", file=sys.stderr)

    rows = side_by_side(spec, chosen, lambda: bench_many(spec, candidates, arch, protocol, on_row=progress,
                                                         family=family, cublas=False), protocol, arch, progress)
    print_bench_table(rows, f"{spec.short()} on {device.name}")
    if args.explain and choice is not None:
        print(explain_best(choice))
    report = BenchReport(spec, device.to_json(), protocol, _now(), tuple(rows), tuple(skipped))
    if args.json_path:
        write_json(report, args.json_path)
    if args.csv_path:
        write_csv(report, args.csv_path)
    return 1 if _failed(rows, {name for name, _ in candidates}) else 0


def run_accuracy(spec, db, json_path: str | None) -> int:
    """bench --accuracy: the accuracy report (gemmtune.accuracy) for the spec's shape."""
    import json

    from ..accuracy import format_report, method_kernels, run_report
    from ..device import free_memory, query_device

    device = query_device()
    spec.check_fits(free_memory() // 4)  # float64 copies of every operand beside the fp32 ones
    arch = target_arch(None)
    kernels, skipped = method_kernels(spec, arch, db)
    for line in skipped:
        print(f"  skipped {line}", file=sys.stderr)
    rows = run_report(spec, kernels)
    print(format_report(spec, rows) + f"\n\n{device.name}, {_now()}")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump({"spec": spec.to_json(), "device": device.to_json(), "date": _now(),
                       "rows": [r.to_json() for r in rows], "skipped": skipped}, handle, indent=1)
    return 0


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")
