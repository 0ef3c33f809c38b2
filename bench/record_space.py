"""Record the simulation tables on the GPU: one CSV row per config of a family at M=N=K.

    PYTHONPATH=src python bench/record_space.py --sizes 1024 --time 500 --out "$OUT"           # simt fp32 nn
    PYTHONPATH=src python bench/record_space.py --sizes 4096 --time 120 --family wgmma --dtype bf16 --layout nt

The valid simt space is ~115,000 configs per shape (wgmma's a few hundred); measuring all of them takes far longer than a
lent GPU's 600 s command. So this measures the space in one fixed seeded random order (the random strategy:
every prefix is a uniform sample) for --time seconds per size, through the tuner's own pipeline
(parallel NVRTC, watched worker, verification before timing). Trials go to --db, so a later call
with the same --db continues the same order; each call rewrites
<out>/<family>_<spec slug>.csv and its .json (device, versions, protocol, cuBLAS time).
Copy those into src/gemmtune/data/ for the strategy tests to replay.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gemmtune.cli.tune_cmds import cublas_seconds  # noqa: E402
from gemmtune.compiler import nvrtc_version  # noqa: E402
from gemmtune.device import query_device  # noqa: E402
from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402
from gemmtune.tune.db import TuningDB  # noqa: E402
from gemmtune.tune.pipeline import MeasurePipeline  # noqa: E402
from gemmtune.tune.simulation import DATA_DIR, SimulationTable, table_path  # noqa: E402
from gemmtune.tune.trial import Environment, TuneContext  # noqa: E402
from gemmtune.tune.tuner import TuneOptions, TuneProgress, tune  # noqa: E402

# Shorter than the default protocol: more configs per device minute, still a median of >= 5 runs.
QUICK = TimingProtocol(warmup=2, min_reps=5, max_reps=30, min_time_s=0.03)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096], help="M=N=K of each table")
    parser.add_argument("--time", type=float, default=240.0, help="seconds of tuning per size (default 240)")
    parser.add_argument("--trials", type=int, help="stop a size after this many trials in total")
    parser.add_argument("--db", type=Path, default=Path("build/record_space.sqlite"), help="trials, for resuming")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="where the tables go (default the package data)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling order (keep it across calls)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a measurement counts as hung")
    parser.add_argument("--family", default="simt", help="the family whose space is recorded (default simt)")
    parser.add_argument("--dtype", default="fp32", help="input type of the spec (default fp32)")
    parser.add_argument("--layout", default="nn", help="layout of the spec (default nn)")
    return parser.parse_args()


def printer(every: int) -> Callable[[TuneProgress], None]:
    started = time.monotonic()

    def show(progress: TuneProgress) -> None:
        if progress.done % every == 0:
            best = f"{progress.best.median_s * 1e6:.1f} µs" if progress.best else "—"
            print(f"  {progress.done:6d} trials, {progress.failures} failed, best {best}, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    return show


def record(spec: GemmSpec, device, db: TuningDB, args: argparse.Namespace) -> Path:
    cublas_s, note = cublas_seconds(spec)
    print(f"{spec.short()} on {device.name}: {note}", flush=True)
    environment = Environment.from_device(device, nvrtc_version())
    runner = MeasurePipeline(spec, environment, family=args.family, protocol=QUICK, timeout_s=args.timeout,
                             device=device)
    options = TuneOptions(strategy="random", trials=args.trials, time_s=args.time, seed=args.seed, batch=32,
                          remeasure_top=0, transfer=False, family=args.family)
    try:
        outcome = tune(spec, runner, db, options, on_trial=printer(50))
    finally:
        runner.close()
    print(f"  {outcome.trials} trials of {outcome.candidates} candidates ({outcome.failures} failed); "
          f"{outcome.stop_reason}", flush=True)
    return write_table(db, outcome.context, outcome.candidates, cublas_s, args)


def write_table(db: TuningDB, context: TuneContext, candidates: int, cublas_s: float | None,
                args: argparse.Namespace) -> Path:
    meta = {"recorded": datetime.date.today().isoformat(), "protocol": QUICK.to_json(), "cublas_median_s": cublas_s,
            "valid_configs": candidates, "sampling": f"random strategy order, seed {args.seed}: a uniform sample",
            "source": "bench/record_space.py"}
    table = SimulationTable.from_results(context, db.results(context), meta)
    path = table_path(context.family, context.spec, args.out)
    table.to_csv(path)
    print(f"  wrote {path} ({len(table.rows)} rows)", flush=True)
    return path


def main() -> int:
    args = parse_args()
    try:
        device = query_device(0)
        print(device.summary(), flush=True)
        with TuningDB(args.db) as db:
            for size in args.sizes:
                record(GemmSpec(size, size, size, args.layout, args.dtype), device, db, args)
    except GemmtuneError as err:
        print(f"record_space: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
