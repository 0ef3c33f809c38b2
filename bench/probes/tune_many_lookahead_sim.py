"""Probe (CPU only): how a cluster's wall time for a whole workload depends on per-shape priority
and on lookahead, with the GPU replaced by a fixed sleep per trial.

    PYTHONPATH=src python bench/probes/tune_many_lookahead_sim.py [--delay 0.25] [--trials 160] [--workers 4]

The workload is the Llama-3-8B layer of issue 36 (q/o 4096×4096, k/v 1024×4096, gate/up 14336×4096,
down 4096×14336, each at M = 1, 16, 128, 2048, 8192) as fp32 simt shapes, with the shares a
roofline estimate gives. Each shape replays a synthetic simt table (tests/test_tune_simulation.py)
whose every trial sleeps `--delay` seconds on a worker. The probe runs the four combinations of
priority (DaskRunner(priority=share)) and lookahead (TuneOptions.lookahead) on one local cluster
and prints each one's wall time, the largest shape's own span, and the ideal (trials × delay /
workers). There is no GPU lock here, so this shows the schedule alone.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

LAYER = ((4096, 4096, 2), (1024, 4096, 2), (14336, 4096, 2), (4096, 14336, 1))  # (N, K, count) per M


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay", type=float, default=0.25, help="seconds each trial sleeps on its worker")
    parser.add_argument("--trials", type=int, default=160, help="tune-many's total budget")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--shapes-at-once", type=int, nargs="+", default=None, metavar="N",
                        help="shapes tuned at once, one row each (default: one per worker)")
    args = parser.parse_args()

    import distributed

    from gemmtune.spec import GemmSpec
    from gemmtune.tune.db import TuningDB
    from gemmtune.tune.distributed import DaskRunner, TableRecipe
    from gemmtune.tune.many import tune_many
    from gemmtune.tune.simulation import table_path
    from gemmtune.tune.tuner import TuneOptions
    from gemmtune.workload import Workload, WorkloadShape
    from test_tune_simulation import synthetic_table

    workload = Workload(tuple(WorkloadShape(GemmSpec(m, n, k), count=count)
                              for m in (1, 16, 128, 2048, 8192) for n, k, count in LAYER))
    share_of = dict(zip((s.spec for s in workload.shapes), workload.shares()))
    scratch = Path(tempfile.mkdtemp(prefix="lookahead-sim-"))
    for i, shape in enumerate(workload.shapes):
        synthetic_table(shape.spec, rows=400, seed=i).to_csv(table_path("simt", shape.spec, scratch))
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        print("| lookahead | priority | shapes at once | wall s | largest shape s | trials | ideal s |\n"
              "|---|---|---|---|---|---|---|")
        combos = ([(True, True, n) for n in args.shapes_at_once] if args.shapes_at_once else
                  [(lookahead, by_share, args.workers) for lookahead in (True, False) for by_share in (True, False)])
        for lookahead, by_share, at_once in combos:
            def runner_for(spec, family, by_share=by_share):
                recipe = TableRecipe(str(table_path(family, spec, scratch)), args.delay)
                return DaskRunner(client, recipe, priority=round(1e6 * share_of[spec]) if by_share else 0)

            options = TuneOptions(family="simt", seed=0, batch=4, remeasure_top=1, chooser_seeds=2,
                                  lookahead=lookahead)
            started = time.monotonic()
            with TuningDB(scratch / f"{lookahead}-{by_share}-{at_once}.sqlite") as db:
                outcomes = tune_many(workload, runner_for, db, "sm_90", options, total_trials=args.trials,
                                     family="simt", shapes_at_once=at_once)
            wall = time.monotonic() - started
            largest = max(outcomes, key=lambda o: o.budget.share)
            trials = sum(o.outcome.trials for o in outcomes if o.outcome)
            print(f"| {'on' if lookahead else 'off'} | {'share' if by_share else 'none'} | {at_once} | {wall:.1f} | "
                  f"{largest.wall_s:.1f} | {trials} | {trials * args.delay / args.workers:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
