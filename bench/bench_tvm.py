"""TVM against gemmtune and cuBLAS on the GPU: one markdown table per shape.

Rows per shape: TVM naive and each manual schedule step (the ladder), dlight's default schedule,
MetaSchedule after each trial count in --trials (cumulative, one work dir per shape and space),
gemmtune's own best SIMT kernel, and cuBLAS (torch, TF32 off). Every kernel row goes through
gemmtune.evaluate: verified on fresh random inputs against a float64 reference before it is
timed, and all rows of a shape are timed in this one process with the same protocol, so the
"% of cuBLAS" column compares like with like.

    PYTHONPATH=/tmp/tvmsite:src python bench/bench_tvm.py --trials 64,512 --out bench/tvm.md

MetaSchedule uses cost_model="random" unless xgboost imports (the GPU bundle has none).

Searches longer than one command: a MetaSchedule search to 512 trials at 4096³ takes longer than one
600 s command on a lent GPU, so searches run (and resume, --resume-dir) in their own commands, each
into a work dir. --save-traces turns those work dirs into one small JSON file (TVM, no GPU): per
shape, the `apply_trace(sch)` text of the best schedule among the first N records of the search for
each N in --trials, picked by the times the search measured. --replay-traces FILE then rebuilds,
verifies and times those schedules in the same run as every other row: the search is earlier, the
measurement is not.

    python bench/bench_tvm.py --save-traces bench/results/2026-11-22-h200-tvm-traces.json.gz \
        --db 4096=.tvm-db/4096 --db 1024=.tvm-db/1024 --trials 64,512
    python bench/bench_tvm.py --trials 64,512 --replay-traces bench/results/2026-11-22-h200-tvm-traces.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gemmtune.bench import BenchRow
from gemmtune.errors import GemmtuneError
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

SHAPES = {
    "1024": GemmSpec(1024, 1024, 1024),
    "2048": GemmSpec(2048, 2048, 2048),
    "2048-relu-add": GemmSpec(2048, 2048, 2048, epilogue="relu+add"),
    "4096": GemmSpec(4096, 4096, 4096),
}


TRACES_FORMAT = "gemmtune-tvm-traces-1"


def load_traces(path: Path) -> dict:
    """{shape key: {"trials": {"64": trace text, ...}, "records": n, "database": dir}} from `path`."""
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (OSError, ValueError) as err:
        raise GemmtuneError(f"cannot read the traces file {path}: {err}") from err
    if data.get("format") != TRACES_FORMAT:
        raise GemmtuneError(f"{path} is not a gemmtune traces file (format {data.get('format')!r})")
    return data["shapes"]


def extract_traces(key: str, work_dir: Path, trials: tuple[int, ...], arch: str) -> dict:
    """The traces of one shape's search: the best of the first N records for each N."""
    from gemmtune.tvm.tuning import best_of_first, trace_function, trial_count

    spec = SHAPES[key]
    return {"spec": spec.to_json(), "label": spec.short(), "database": str(work_dir), "records": trial_count(work_dir),
            "trials": {str(n): trace_function(best_of_first(work_dir, spec, n, arch), spec) for n in trials}}


def save_traces(out: Path, databases: list[str], trials: tuple[int, ...], arch: str) -> None:
    """Add the traces of each SHAPE=DIR search to `out` (shapes already in it are kept)."""
    shapes = load_traces(out) if out.exists() else {}
    for item in databases:
        key, _, directory = item.partition("=")
        if key not in SHAPES or not directory:
            raise GemmtuneError(f"--db wants SHAPE=DIR with SHAPE one of {', '.join(SHAPES)}; got {item!r}")
        shapes[key] = extract_traces(key, Path(directory), trials, arch)
        _log(f"{key}: {shapes[key]['records']} records in {directory}; kept the best of the first "
             f"{', '.join(map(str, trials))}")
    text = json.dumps({"format": TRACES_FORMAT, "arch": arch, "shapes": shapes}, indent=1) + "\n"
    out.write_bytes(gzip.compress(text.encode(), 9) if out.suffix == ".gz" else text.encode())  # .gz: compressed


@dataclass(frozen=True)
class Options:
    shapes: tuple[str, ...]
    trials: tuple[int, ...]
    spaces: tuple[str, ...]
    work_root: Path
    protocol: TimingProtocol
    arch: str
    run_id: str
    skip_fixed: bool
    resume_dir: Path | None = None
    replay_traces: Path | None = None


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def tvm_rows(spec: GemmSpec, opts: Options) -> list[BenchRow]:
    """The ladder rows and dlight, each verified and timed (or a row saying why not). A prefix that
    TVM lowers to two kernels (GEMM, then the epilogue) is timed as that launch sequence."""
    from gemmtune.tvm import ladder
    from gemmtune.tvm.rows import schedule_row

    rows = []
    for name in (*ladder.RUNG_NAMES, "dlight"):
        rows.append(schedule_row(spec, name, opts.arch, opts.protocol, True, label=f"TVM {name}"))
        _log(f"  TVM {name}: {rows[-1].status}")
    return rows


def replayed_rows(spec: GemmSpec, key: str, opts: Options) -> list[BenchRow]:
    """MetaSchedule rows from --replay-traces: each saved schedule rebuilt, verified and timed here."""
    from gemmtune.tvm.convert import kernel_source
    from gemmtune.tvm.rows import source_row
    from gemmtune.tvm.tuning import apply_trace_text

    saved = load_traces(opts.replay_traces).get(key)
    if saved is None:
        return [BenchRow("MetaSchedule", "", None, None, None, "missing", f"no traces for {key} in {opts.replay_traces}")]
    rows = []
    for total in opts.trials:
        name, trace = f"MetaSchedule auto {total}", saved["trials"].get(str(total))
        if trace is None:
            rows.append(BenchRow(name, "", None, None, None, "missing", f"no trace after {total} trials"))
            continue
        detail = (f"best of the first {total} of {saved['records']} trials of a search run before this one "
                  f"({saved['database']}), rebuilt from its trace")
        rows.append(source_row(name, detail, lambda t=trace, n=total: kernel_source(
            apply_trace_text(spec, t).mod, spec, {"schedule": "tuned", "trials": n}, opts.arch),
            opts.arch, opts.protocol, True))
        _log(f"  {name} (replayed): {rows[-1].status}")
    return rows


def tuned_rows(spec: GemmSpec, key: str, space: str, opts: Options) -> list[BenchRow]:
    """MetaSchedule rows after each cumulative trial count (the search continues in one work dir)."""
    from gemmtune.tvm.convert import kernel_source
    from gemmtune.tvm.rows import source_row
    from gemmtune.tvm.tuning import (
        TuneSettings,
        best_of_first,
        default_cost_model,
        trial_count,
        tune,
    )

    # A fresh work dir per run unless --resume-dir continues an earlier search (a run cut off by the
    # device's 600 s limit). The row "after N trials" is the best of the database's first N records,
    # which MetaSchedule appends in the order it measures them.
    rows, work_dir = [], opts.resume_dir or opts.work_root / f"{key}-{space}-{opts.run_id}"
    tuned_here, seconds = 0, 0.0
    for total in opts.trials:
        have = trial_count(work_dir)
        if have < total:
            settings = TuneSettings(space=space, trials=total - have, cost_model=default_cost_model(),
                                    arch=opts.arch, seed=0)
            started = time.perf_counter()
            try:
                result = tune(spec, work_dir, settings)
            except GemmtuneError as err:
                rows.append(BenchRow(f"MetaSchedule {space} {total}", "", None, None, None, type(err).__name__,
                                     str(err)))
                break
            tuned_here, seconds = tuned_here + total - have, seconds + time.perf_counter() - started
            _log(f"  MetaSchedule {space} to {total}: {result.time_split()}")
        earlier = f", {total - tuned_here} of them in an earlier run" if tuned_here < total else ""
        detail = f"{total} trials{earlier}, {default_cost_model()} cost model, {seconds:.0f} s of tuning in this run"
        schedule = best_of_first(work_dir, spec, total, opts.arch)
        source = kernel_source(schedule.mod, spec, {"schedule": "tuned", "space": space}, opts.arch)
        rows.append(source_row(f"MetaSchedule {space} {total}", detail, lambda s=source: s, opts.arch,
                               opts.protocol, True))
        _log(f"  MetaSchedule {space} after {total}: {rows[-1].status} ({detail})")
    return rows


def own_row(spec: GemmSpec, opts: Options) -> BenchRow:
    """gemmtune's best SIMT kernel for the spec (tuning database, else the default config)."""
    try:
        from gemmtune.bench import bench_config
        from gemmtune.build import choose_config
    except ImportError as err:  # the native family is written in parallel; say so in the table
        return BenchRow("gemmtune best", "", None, None, None, "ImportError", str(err))
    chosen = choose_config(spec, opts.arch)
    return bench_config(spec, f"gemmtune best ({chosen.source})", chosen.config, opts.arch, opts.protocol)


def cublas_row(spec: GemmSpec, opts: Options) -> BenchRow:
    from gemmtune.bench import bench_cublas

    return bench_cublas(spec, opts.protocol)


def _cell(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def markdown(spec: GemmSpec, rows: list[BenchRow], device: str) -> str:
    cublas = next((r.median_s for r in rows if r.name == "cuBLAS"), None)
    lines = [f"### {spec.short()} on {device}", "",
             "| kernel | config | time (ms) | TFLOP/s | % of cuBLAS | rel. error | regs | status |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        status = r.status if r.status == "ok" else f"{r.status}: {r.message[:90]}".replace("|", "/")
        lines.append(f"| {r.name} | {r.config} | {_cell(r.median_s and r.median_s * 1e3, '{:.3f}')} | "
                     f"{_cell(r.tflops, '{:.2f}')} | {_cell(r.pct_of(cublas), '{:.1f}%')} | "
                     f"{_cell(r.rel_error, '{:.1e}')} | {_cell(r.registers, '{}')} | {status} |")
    return "\n".join(lines) + "\n"


def bench_shape(key: str, opts: Options, save: Callable[[list[BenchRow]], None]) -> list[BenchRow]:
    """All rows of one shape; `save` sees the rows so far after each group (a cut-off run keeps them)."""
    spec = SHAPES[key]
    _log(f"{spec.short()}")
    rows = [cublas_row(spec, opts)]
    if not opts.skip_fixed:
        rows += [own_row(spec, opts), *tvm_rows(spec, opts)]
    save(rows)
    if opts.replay_traces:
        rows.extend(replayed_rows(spec, key, opts))
        save(rows)
        return rows
    for space in opts.spaces:
        rows.extend(tuned_rows(spec, key, space, opts))
        save(rows)
    return rows


def _options(argv: list[str] | None) -> tuple[Options, Path, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated from {', '.join(SHAPES)}")
    parser.add_argument("--trials", default="64,512", help="cumulative MetaSchedule trial counts ('' = no tuning)")
    parser.add_argument("--spaces", default="auto", help="MetaSchedule spaces: auto, manual or auto,manual")
    parser.add_argument("--work-root", type=Path, default=Path("tvm-bench-work"), help="tuning work dirs")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per kernel")
    parser.add_argument("--skip-fixed", action="store_true",
                        help="only cuBLAS and the MetaSchedule rows (no ladder, dlight, gemmtune rows)")
    parser.add_argument("--resume-dir", type=Path,
                        help="continue the MetaSchedule search in this work dir (one shape, one space)")
    parser.add_argument("--replay-traces", type=Path,
                        help="no search: time the MetaSchedule schedules saved by --save-traces (auto space)")
    parser.add_argument("--save-traces", type=Path, metavar="FILE",
                        help="no GPU, no timing: write the best traces of the --db searches after each --trials count "
                             "to FILE (shapes already in it are kept), then stop")
    parser.add_argument("--db", action="append", default=[], metavar="SHAPE=DIR",
                        help="with --save-traces: a shape key and the MetaSchedule work dir of its search (repeatable)")
    parser.add_argument("--arch", default="sm_90", help="with --save-traces: the target the searches measured on")
    parser.add_argument("--out", type=Path, default=Path("tvm-bench.md"), help="markdown output")
    parser.add_argument("--json", type=Path, help="also write every row as JSON")
    args = parser.parse_args(argv)
    if args.save_traces:
        if not args.db:
            parser.error("--save-traces needs at least one --db SHAPE=DIR")
        save_traces(args.save_traces, args.db, tuple(sorted(int(t) for t in args.trials.split(",") if t)), args.arch)
        raise SystemExit(0)
    shapes = tuple(s for s in args.shapes.split(",") if s)
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    if args.resume_dir and (len(shapes) != 1 or "," in args.spaces):
        parser.error("--resume-dir continues one search: give one shape and one space")
    if args.replay_traces and args.resume_dir:
        parser.error("--replay-traces times saved schedules; --resume-dir searches: give one of them")
    if args.replay_traces and not args.replay_traces.exists():
        parser.error(f"no traces file {args.replay_traces}")
    from gemmtune.device import query_device

    opts = Options(shapes, tuple(sorted(int(t) for t in args.trials.split(",") if t)),
                   tuple(s for s in args.spaces.split(",") if s), args.work_root,
                   TimingProtocol(min_time_s=args.min_time), query_device().arch, time.strftime("%Y%m%d-%H%M%S"),
                   args.skip_fixed, args.resume_dir, args.replay_traces)
    return opts, args.out, args.json


def main(argv: list[str] | None = None) -> int:
    from gemmtune.device import query_device
    from gemmtune.tvm import require_tvm

    require_tvm()
    opts, out, json_path = _options(argv)
    device = query_device()
    report, everything = [f"# TVM vs gemmtune vs cuBLAS ({device.name}, {opts.arch})\n"], {}

    def save(key: str, rows: list[BenchRow]) -> None:
        everything[key] = [r.to_json() for r in rows]
        out.write_text("\n".join([*report, markdown(SHAPES[key], rows, device.name)]))
        if json_path:
            json_path.write_text(json.dumps({"device": device.to_json(), "rows": everything}, indent=1))

    for key in opts.shapes:
        rows = bench_shape(key, opts, lambda rows, key=key: save(key, rows))
        report.append(markdown(SHAPES[key], rows, device.name))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GemmtuneError as err:  # one line, like the gemmtune command
        print(f"bench_tvm: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
