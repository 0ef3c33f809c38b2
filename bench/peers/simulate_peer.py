"""A CPU preview of the peer comparison: both search strategies replay a recorded simt table.

    python bench/peers/simulate_peer.py --seeds 5 --budget 300        # needs the peer extra (kernel_tuner)

gemmtune's recorded tables (src/gemmtune/data/simt_*.csv: a uniform sample of the simt space timed on
an H200) stand in for the GPU. Both tuners search the same set, the table's configs that gemmtune's
current rules accept: gemmtune's evolutionary strategy through tune.simulation.replay (no chooser or
transfer seeds: search alone), kernel_tuner's strategy through its own simulation mode (the table
as its cache file; the peer's restrictions plus membership in the table). Reported: unique trials
until a config within 2% of the table's best, per seed. Trials, not seconds: a replay has no clock
that means anything, and kernel_tuner's simulated clock counts only recorded kernel times.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "src")]

from gemmtune.tune.simulation import SimulationRunner, SimulationTable, recorded_tables, replay  # noqa: E402
from gemmtune.tune.space import candidate_set  # noqa: E402
from gemmtune.tune.strategies import make_strategy  # noqa: E402
from gemmtune.tune.trial import Status  # noqa: E402
from kt_space import PeerSpace, peer_space  # noqa: E402

WITHIN = 0.02


def table_set(table: SimulationTable) -> tuple[PeerSpace, dict]:
    """The peer space of the table's spec, and {config: row} for its rows gemmtune accepts."""
    peer = peer_space(table.spec, table.environment.arch)
    valid = candidate_set(peer.space, table.spec, peer.arch).subset(list(table.rows))
    rows = {c: table.rows[c] for c in valid.configs(range(len(valid)))}
    return peer, rows


def gemmtune_trials(table: SimulationTable, peer: PeerSpace, target_s: float, budget: int, seed: int) -> int | None:
    runner = SimulationRunner(table)
    candidates = runner.restrict(candidate_set(peer.space, table.spec, peer.arch))
    strategy = make_strategy("evolutionary", candidates, seed, (), table.environment.sm_count)
    results = replay(strategy, runner, budget, target_s=target_s)
    return next((i for i, r in enumerate(results, 1) if r.ok and r.median_s <= target_s), None)


def kt_cache(peer: PeerSpace, rows: dict, path: Path) -> Path:
    """The table as a kernel_tuner cache file (failures as its error strings; timings all present)."""
    names = list(peer.tune_params)
    entries = {}
    for config, row in rows.items():
        params = peer.params_of(config)
        ok = row.status is Status.OK
        time_ms = row.median_s * 1e3 if ok else "RuntimeFailedConfig"
        entries[",".join(str(params[n]) for n in names)] = {
            **params, "time": time_ms, "times": [time_ms] if ok else [], "compile_time": 0, "verification_time": 0,
            "benchmark_time": 0, "strategy_time": 0, "framework_time": 0, "timestamp": "2026-11-21 00:00:00+00:00"}
    path.write_text(json.dumps({"device_name": "simulated", "kernel_name": peer.kernel_name,
                                "problem_size": list(peer.problem_size), "tune_params_keys": names,
                                "tune_params": peer.tune_params, "objective": "time", "cache": entries}))
    return path


def kt_trials(peer: PeerSpace, rows: dict, cache: Path, target_s: float, budget: int, seed: int,
              strategy: str) -> int | None:
    import random

    import kernel_tuner
    import numpy as np

    random.seed(seed)  # tune_kernel's `seed` is unused in kernel_tuner 1.5.0; its strategies draw from these
    np.random.seed(seed)
    member = {tuple(peer.params_of(c).values()) for c in rows}
    footprint = type(peer.restrictions()[0])
    restrictions = peer.restrictions() + [footprint("in_table", tuple(peer.tune_params), lambda *v: v in member)]
    spec = peer.spec
    arguments = [np.zeros(spec.a_shape, np.float32), np.zeros(spec.b_shape, np.float32),
                 np.zeros((spec.m, spec.n), np.float32)]
    results, _ = kernel_tuner.tune_kernel(
        peer.kernel_name, peer.kernel_source, peer.problem_size, arguments, peer.tune_params, **peer.grid_div,
        restrictions=restrictions, lang="CUDA", defines={}, strategy=strategy,
        strategy_options={"max_fevals": budget}, cache=str(cache), simulation_mode=True, quiet=True, seed=seed)
    seen: set = set()
    for result in (r for r in results if r):
        key = tuple(result[n] for n in peer.tune_params)
        if key in seen:
            continue
        seen.add(key)
        value = result.get("time")
        if isinstance(value, (int, float)) and value / 1e3 <= target_s:
            return len(seen)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=300, help="unique trials per run")
    parser.add_argument("--strategy", default="genetic_algorithm", help="kernel_tuner strategy")
    args = parser.parse_args(argv)
    tables = [p for p in recorded_tables() if p.name.startswith("simt_")]
    print(f"| table | configs | best µs | gemmtune evolutionary: trials to 2% per seed | median | "
          f"kernel_tuner {args.strategy} | median |\n|---|---:|---:|---|---:|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            table = SimulationTable.from_csv(path)
            peer, rows = table_set(table)
            best = min(r.median_s for r in rows.values() if r.status is Status.OK)
            target = best * (1 + WITHIN)
            cache = kt_cache(peer, rows, Path(tmp) / f"{path.stem}.json")
            g = [gemmtune_trials(table, peer, target, args.budget, s) for s in range(args.seeds)]
            k = [kt_trials(peer, rows, cache, target, args.budget, s, args.strategy) for s in range(args.seeds)]
            print(f"| {path.stem} ({table.environment.device_name}) | {len(rows)} | {best * 1e6:.1f} | {_list(g)} | "
                  f"{_median(g, args.budget)} | {_list(k)} | {_median(k, args.budget)} |", flush=True)
    return 0


def _list(values: list[int | None]) -> str:
    return ", ".join("—" if v is None else str(v) for v in values)


def _median(values: list[int | None], budget: int) -> str:
    """Median with a miss counted as more than the budget."""
    middle = statistics.median([budget + 1 if v is None else v for v in values])
    return f">{budget}" if middle > budget else f"{middle:g}"


if __name__ == "__main__":
    sys.exit(main())
