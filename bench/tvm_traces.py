"""MetaSchedule answers kept as traces, so one benchmark run can time every shape's tuned kernels.

A MetaSchedule search to 512 trials at 4096³ takes longer than one 600 s command on the lent GPU,
so searches run (and resume) in their own commands, each into a work dir. This file turns those
work dirs into one small JSON file: per shape, the `apply_trace(sch)` text of the best schedule
among the first N records of the search for each N (bench_tvm.py's "MetaSchedule after N trials"
rows). `bench_tvm.py --replay-traces FILE` then rebuilds, verifies and times those schedules in
the same run as every other row: the search is earlier, the measurement is not.

    python bench/tvm_traces.py --db 4096=.tvm-db/4096 --db 1024=.tvm-db/1024 --trials 64,512 \
        --out bench/results/2026-11-22-h200-tvm-traces.json

Needs TVM (no GPU): the best record is picked by the times the search measured.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gemmtune.errors import GemmtuneError

FORMAT = "gemmtune-tvm-traces-1"


def load(path: Path) -> dict:
    """{shape key: {"trials": {"64": trace text, ...}, "records": n, "database": dir}} from `path`."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise GemmtuneError(f"cannot read the traces file {path}: {err}") from err
    if data.get("format") != FORMAT:
        raise GemmtuneError(f"{path} is not a gemmtune traces file (format {data.get('format')!r})")
    return data["shapes"]


def extract(key: str, work_dir: Path, trials: tuple[int, ...], arch: str) -> dict:
    """The traces of one shape's search: the best of the first N records for each N."""
    from bench_tvm import SHAPES

    from gemmtune.tvm.tuning import best_of_first, trace_function, trial_count

    spec = SHAPES[key]
    return {"spec": spec.to_json(), "label": spec.short(), "database": str(work_dir), "records": trial_count(work_dir),
            "trials": {str(n): trace_function(best_of_first(work_dir, spec, n, arch), spec) for n in trials}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", action="append", required=True, metavar="SHAPE=DIR",
                        help="a bench_tvm.py shape key and the MetaSchedule work dir of its search (repeatable)")
    parser.add_argument("--trials", default="64,512", help="trial counts to keep the best schedule after")
    parser.add_argument("--arch", default="sm_90", help="target the searches measured on")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write (shapes already in it are kept)")
    args = parser.parse_args(argv)
    from bench_tvm import SHAPES

    trials = tuple(sorted(int(t) for t in args.trials.split(",") if t))
    shapes = load(args.out) if args.out.exists() else {}
    for item in args.db:
        key, _, directory = item.partition("=")
        if key not in SHAPES or not directory:
            parser.error(f"--db wants SHAPE=DIR with SHAPE one of {', '.join(SHAPES)}; got {item!r}")
        shapes[key] = extract(key, Path(directory), trials, args.arch)
        print(f"{key}: {shapes[key]['records']} records in {directory}; kept the best of the first "
              f"{', '.join(map(str, trials))}", file=sys.stderr)
    args.out.write_text(json.dumps({"format": FORMAT, "arch": args.arch, "shapes": shapes}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GemmtuneError as err:
        print(f"tvm_traces: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
