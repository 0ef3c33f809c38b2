"""`gemmtune db list` and `db best --grouped` show the grouped GEMM tunes (the grouped_trials table) beside the
single-GEMM ones: one line per grouped spec key and GPU, its trials, failures, the fastest by time per FLOP."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.cli.db_cmds import grouped_summaries
from gemmtune.grouped.config import candidates
from gemmtune.grouped.render import VERSION
from gemmtune.grouped.spec import GroupedSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.grouped_db import GroupedTuningDB
from gemmtune.tune.grouped_records import GroupedContext, GroupedTrial
from gemmtune.tune.trial import Environment, Status
from test_tune_db import SLOW, context, ok

H200 = Environment("NVIDIA H200", "9.0", 132, "sm_90a", "575.00", "12.9")
SPEC = GroupedSpec(8, 2048, 1536, 2048, swiglu=True)


@pytest.fixture
def grouped_db(tmp_path: Path) -> Path:
    """A single-GEMM tune, then two tunes of one grouped key (two routings of 2048 rows) and one of another key."""
    path = tmp_path / "tuning.sqlite"
    with TuningDB(path) as db:
        db.record(context(), ok(SLOW, 2e-4))
    configs = candidates(SPEC)
    with GroupedTuningDB(path) as db:
        balanced = GroupedContext(SPEC, (256,) * 8, H200, VERSION)
        db.record(balanced, GroupedTrial(configs[0], Status.OK, 40e-6, (40e-6,), 60e-6, (60e-6,)))
        db.record(balanced, GroupedTrial(configs[1], Status.COMPILE_ERROR, error="ptxas"))
        skewed = GroupedContext(SPEC, (1000, 500, 300, 100, 100, 48, 0, 0), H200, VERSION)
        db.record(skewed, GroupedTrial(configs[1], Status.OK, 30e-6, (30e-6,), 45e-6, (45e-6,)))
        other = GroupedSpec(8, 2048, 2048, 1536)
        db.record(GroupedContext(other, (256,) * 8, H200, VERSION),
                  GroupedTrial(candidates(other)[0], Status.OK, 50e-6, (50e-6,)))
    return path


def test_grouped_summaries_are_per_key_with_the_fastest_per_flop(grouped_db: Path) -> None:
    first, second = grouped_summaries(grouped_db)
    assert (first.key.n, first.key.swiglu, first.trials, first.failures) == (1536, True, 3, 1)
    assert first.best.config == candidates(SPEC)[1] and first.best.median_s == 30e-6  # same FLOPs, faster
    assert first.tflops == pytest.approx(2 * 2048 * 3072 * 2048 / 30e-6 / 1e12)
    assert (second.key.n, second.trials, second.best.speedup) == (2048, 1, None)


def test_db_list_shows_grouped_keys_beside_single_gemm_specs(grouped_db: Path, capsys) -> None:
    assert main(["db", "list", "--db", str(grouped_db)]) == 0
    out = capsys.readouterr().out
    grouped = [line for line in out.splitlines() if "grouped G=8" in line]
    assert len(grouped) == 2 and "N=1536 K=2048 bf16 swiglu" in grouped[0] and "1.50x torch" in out
    assert "grouped v" in out and "NVIDIA H200" in out
    assert sum("TFLOP/s" in line for line in out.splitlines()) == 3  # the single GEMM's line too


def test_db_best_grouped_prints_each_keys_best_filtered_by_sizes(grouped_db: Path, capsys) -> None:
    assert main(["db", "best", "--grouped", "--db", str(grouped_db)]) == 0
    out = capsys.readouterr().out
    assert "G=8 N=1536 K=2048 bf16 swiglu" in out and "G=8 N=2048 K=1536" in out and "1.50x torch._grouped_mm" in out
    assert main(["db", "best", "--grouped", "-n", "2048", "--json", "--db", str(grouped_db)]) == 0
    assert capsys.readouterr().out.strip().startswith("{")
    assert main(["db", "best", "--grouped", "-k", "7", "--db", str(grouped_db)]) == 1
    assert "no successful grouped trial for those sizes" in capsys.readouterr().err


def test_db_list_of_a_database_without_grouped_trials_is_as_before(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tuning.sqlite"
    with TuningDB(path) as db:
        db.record(context(), ok(SLOW, 2e-4))
    assert main(["db", "list", "--db", str(path)]) == 0
    assert "grouped" not in capsys.readouterr().out
