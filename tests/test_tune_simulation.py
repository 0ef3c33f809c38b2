"""The simulation runner, and the tables the strategy tests replay.

`strategy_tables()` returns the GPU-recorded tables under src/gemmtune/data/ when the package has
them, else one synthetic table built here from a deterministic formula (a rough roofline: tile
reuse, occupancy, wave quantization, a spill cliff, ±4% noise from the config hash, 2.5% launch
failures). Other tune tests import it from this module.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gemmtune.spec import GemmSpec
from gemmtune.tune.simulation import (SimulationRunner, SimulationTable, TableRow, recorded_tables, replay,
                                      replays, table_path, trials_to_reach)
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.strategies import make_strategy
from gemmtune.tune.trial import SIMULATED, Environment, Status

SYNTHETIC_ENV = Environment("Synthetic H100", "9.0", 132, "sm_90", "12.8", "13.0")


def synthetic_seconds(c, spec: GemmSpec) -> float:
    threads, acc = c.threads, c.accumulators
    per_sm = max(1, min(2048 // threads, (228 * 1024) // max(c.smem_bytes(), 1), 65536 // (threads * (acc + 40))))
    occupancy = min(1.0, per_sm * threads / 2048 / 0.25) ** 0.5
    blocks = math.ceil(spec.m / c.bm) * math.ceil(spec.n / c.bn)
    slots = 132 * per_sm
    waves = blocks / (math.ceil(blocks / slots) * slots)
    block_reuse = min(1.0, (c.bm * c.bn / (c.bm + c.bn)) / 64) ** 0.7
    thread_reuse = min(1.0, (c.tm * c.tn / (c.tm + c.tn)) / 2.6) ** 0.8
    bonus = (1.15 if c.vec == 4 else 1.0) * (1.1 if c.stages == 2 else 1.0) * (1.05 if c.async_copy else 1.0)
    bonus *= {8: 0.9, 16: 1.0, 32: 0.95}[c.bk] * (1.1 if c.wm else 1.0) * (1.03 if c.pad else 1.0)
    spill = 0.5 if acc > 96 else 1.0
    noise = 1.0 + 0.04 * ((int(c.key(), 16) % 1000) / 500.0 - 1.0)
    return spec.flops / (40e12 * block_reuse * thread_reuse * occupancy * waves * bonus * spill) * noise


def synthetic_table(spec: GemmSpec = GemmSpec(4096, 4096, 4096), rows: int = 2000, seed: int = 0) -> SimulationTable:
    """A uniform sample of the valid simt space with formula times (deterministic for a seed)."""
    space = space_for("simt")
    candidates = candidate_set(space, spec, SYNTHETIC_ENV.arch)
    picked = np.sort(np.random.default_rng(seed).choice(len(candidates), size=min(rows, len(candidates)),
                                                        replace=False))
    table = {}
    for config in candidates.configs(picked):
        if int(config.key(), 16) % 40 == 0:
            table[config] = TableRow(Status.LAUNCH_ERROR, None)
        else:
            table[config] = TableRow(Status.OK, synthetic_seconds(config, spec))
    return SimulationTable("simt", space.version, spec, SYNTHETIC_ENV, table, {"source": "synthetic"})


def strategy_tables() -> list[tuple[str, object]]:
    """(name, loader) pairs: the recorded tables when present, else the synthetic one."""
    recorded = [(p.stem, lambda p=p: SimulationTable.from_csv(p)) for p in recorded_tables()]
    return recorded or [("synthetic", synthetic_table)]


@pytest.fixture(scope="module")
def small_table() -> SimulationTable:
    return synthetic_table(GemmSpec(1024, 1024, 1024), rows=300, seed=1)


def test_csv_round_trip(tmp_path: Path, small_table: SimulationTable) -> None:
    path = table_path("simt", small_table.spec, tmp_path)
    small_table.to_csv(path)
    again = SimulationTable.from_csv(path)
    assert again.spec == small_table.spec and again.environment == small_table.environment
    assert set(again.rows) == set(small_table.rows)
    for config, row in small_table.rows.items():
        assert again.rows[config].status is row.status
        if row.median_s is not None:
            assert again.rows[config].median_s == pytest.approx(row.median_s, rel=1e-5)
    assert recorded_tables(tmp_path) == [path]
    assert path.stat().st_size < 70 * len(small_table.rows)  # one compact line per config (simt: 18 fields)


def test_a_gzipped_table_reads_as_the_plain_one_and_table_path_finds_it(tmp_path: Path, small_table: SimulationTable) -> None:
    plain = table_path("simt", small_table.spec, tmp_path)
    packed = plain.with_name(plain.name + ".gz")
    small_table.to_csv(packed)
    assert table_path("simt", small_table.spec, tmp_path) == packed  # only the .gz exists
    assert recorded_tables(tmp_path) == [packed] and packed.read_bytes()[:2] == b"\x1f\x8b"
    again = SimulationTable.from_csv(packed)
    assert set(again.rows) == set(small_table.rows) and again.spec == small_table.spec
    small_table.to_csv(plain)
    assert table_path("simt", small_table.spec, tmp_path) == plain  # the plain CSV wins where both exist


def test_a_gz_table_that_is_not_gzip_is_refused_in_one_line(tmp_path: Path, small_table: SimulationTable) -> None:
    from gemmtune.input_files import InputFileError

    plain = table_path("simt", small_table.spec, tmp_path)
    small_table.to_csv(plain)
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(plain.read_bytes())  # CSV text under a .gz name
    with pytest.raises(InputFileError, match="not gzip data"):
        SimulationTable.from_csv(packed)


def test_a_simt_table_of_math_auto_serves_math_simt(small_table: SimulationTable) -> None:
    """simt tables of fp32 specs were recorded with math auto, when auto meant simt everywhere: the
    same problem under math simt finds and replays them; no other spec or family does."""
    simt = GemmSpec(1024, 1024, 1024, math="simt")
    assert small_table.spec.math == "auto" and small_table.family == "simt"
    assert replays(small_table, simt) and replays(small_table, small_table.spec)
    assert table_path("simt", simt) == table_path("simt", small_table.spec)
    assert not replays(small_table, GemmSpec(1024, 1024, 1024, math="3xtf32"))
    assert not replays(small_table, GemmSpec(1024, 1024, 2048, math="simt"))
    assert table_path("wgmma", simt) != table_path("wgmma", small_table.spec)


def test_runner_replays_times_and_failures(small_table: SimulationTable) -> None:
    runner = SimulationRunner(small_table)
    failed = next(c for c, r in small_table.rows.items() if r.status is not Status.OK)
    fine = next(c for c, r in small_table.rows.items() if r.status is Status.OK)
    first, second = runner.run([failed, fine])
    assert first.status is Status.LAUNCH_ERROR and not first.ok and first.error
    assert second.ok and second.median_s == small_table.rows[fine].median_s
    # Replayed numbers must never be filed under the real device's key.
    assert runner.environment.driver_version == SIMULATED
    assert runner.environment.device_name.startswith("simulated")


def test_runner_restricts_the_space_to_the_table(small_table: SimulationTable) -> None:
    runner = SimulationRunner(small_table)
    candidates = runner.restrict(candidate_set(space_for("simt"), small_table.spec, "sm_90"))
    assert len(candidates) == len(small_table.rows)
    assert set(candidates.configs(range(len(candidates)))) == set(small_table.rows)


def test_replay_stops_at_target_and_budget(small_table: SimulationTable) -> None:
    runner = SimulationRunner(small_table)
    candidates = runner.restrict(candidate_set(space_for("simt"), small_table.spec, "sm_90"))
    everything = replay(make_strategy("exhaustive", candidates), runner, budget=10_000)
    assert len(everything) == len(small_table.rows)
    assert min(r.median_s for r in everything if r.ok) == small_table.best_s
    capped = replay(make_strategy("random", candidates, seed=3), runner, budget=25, batch=7)
    assert len(capped) == 25
    target = small_table.best_s
    found = replay(make_strategy("random", candidates, seed=3), runner, budget=10_000, target_s=target)
    reached = trials_to_reach(found, target)
    assert reached is not None and len(found) - reached < 8  # stops at the end of the batch that hit it


def test_recorded_tables_are_replayable() -> None:
    """Whatever tables the package ships load, match the space, and have successes."""
    for path in recorded_tables():
        table = SimulationTable.from_csv(path)
        candidates = SimulationRunner(table).restrict(candidate_set(space_for(table.family), table.spec,
                                                                    table.environment.arch))
        assert len(candidates) == len(table.rows), f"{path.name} holds configs outside the space"
        assert table.best_s > 0


def test_lookahead_keeps_a_seeded_search_deterministic_and_within_budget(tmp_path: Path) -> None:
    """Asking a round ahead changes when the strategy learns, not the rules: a seeded run repeats
    exactly, spends the trial budget exactly and measures no config twice."""
    from gemmtune.tune.db import TuningDB
    from gemmtune.tune.tuner import TuneOptions, tune

    table = synthetic_table(rows=400, seed=4)
    runs = []
    for n in range(2):
        with TuningDB(tmp_path / f"{n}.sqlite") as db:
            outcome = tune(table.spec, SimulationRunner(table), db,
                           TuneOptions(trials=45, batch=8, seed=2, remeasure_top=0, lookahead=True))
            runs.append([r.config for r in db.results(outcome.context)])
    assert runs[0] == runs[1] and len(runs[0]) == 45 == len(set(runs[0]))
