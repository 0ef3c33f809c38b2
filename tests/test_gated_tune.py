"""Gated (SwiGLU) GEMMs through the tuner without a GPU: the space holds only configs the gated kernel takes,
the tuner measures and files them under the gated spec's own key, `gemmtune tune --gated` replays a table,
and the pieces around the search (fitted twins, transfer, the cuBLAS baseline, the shipped table) see 2N."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gemmtune.cli import main
from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB, best_known_trial
from gemmtune.tune.simulation import SimulationTable, TableRow, table_path
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.trial import Status
from gemmtune.tune.tuner import TuneOptions, tune
from test_tune_outside_seeds import H100, RecordingRunner

SPEC = GemmSpec(512, 1024, 2048, "nt", "bf16", gated=True)  # D 512x1024; the tensor cores run 2048 columns
WGMMA = get_family("wgmma")


def seconds(config) -> float:
    """A made-up time that favours narrow tiles and deep rings (deterministic), for the replayed table."""
    return 1e-5 * config.bn / 64 * (1.0 + 0.1 / config.stages)


@pytest.fixture(scope="module")
def candidates():
    return candidate_set(space_for("wgmma"), SPEC, "sm_90a")


def test_the_space_of_a_gated_spec_holds_only_what_the_gated_kernel_takes(candidates):
    plain = candidate_set(space_for("wgmma"), SPEC.ungated(), "sm_90a")
    assert 0 < len(candidates) < len(plain)  # the gated rule prunes (overlap_epilogue, bn % 16, store slices)
    sample = candidates.configs(range(0, len(candidates), max(1, len(candidates) // 200)))
    assert not [c for c in sample if WGMMA.rejections(c, SPEC, "sm_90a")]
    assert not any(c.overlap_epilogue for c in sample) and all(c.bn % 16 == 0 for c in sample)


def test_the_tuner_measures_gated_configs_and_files_them_under_the_gated_key(tmp_path: Path, candidates):
    db_path = tmp_path / "t.sqlite"
    runner = RecordingRunner()
    with TuningDB(db_path) as db:
        outcome = tune(SPEC, runner, db, TuneOptions(family="wgmma", strategy="random", trials=12, remeasure_top=2))
        assert outcome.trials == 12 and outcome.best is not None
        assert not [c for c in runner.measured if WGMMA.rejections(c, SPEC, "sm_90a")]
        assert len(db.contexts()) == 1
        assert db.ranked_for_spec(SPEC.ungated(), "wgmma") == []  # the plain 2N GEMM's key holds nothing
        assert db.ranked_for_spec(SPEC, "wgmma")[0].context.spec == SPEC
    found = best_known_trial(SPEC, "sm_90a", db_path)
    assert found is not None and found.result.median_s == outcome.best.median_s


def _gated_table(candidates, rows: int = 80) -> SimulationTable:
    picked = np.sort(np.random.default_rng(3).choice(len(candidates), size=min(rows, len(candidates)), replace=False))
    table = {c: TableRow(Status.OK, seconds(c)) for c in candidates.configs(picked)}
    meta = {"source": "synthetic", "cublas_median_s": 2e-5}
    return SimulationTable("wgmma", space_for("wgmma").version, SPEC, H100, table, meta)


def test_cli_tune_gated_replays_a_table(tmp_path: Path, candidates, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = table_path("wgmma", SPEC, tmp_path)
    _gated_table(candidates).to_csv(path)
    db = tmp_path / "t.sqlite"
    argv = ["tune", "M=512", "N=1024", "K=2048", "t=10", "--layout", "nt", "--dtype", "bf16", "--gated",
            "--strategy", "random", "--simulate", str(path), "--db", str(db), "--top", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "gated" in out and "10 new trials" in out and "% of cuBLAS" in out
    with TuningDB(db) as handle:
        assert [r.context.spec for r in handle.ranked_for_spec(SPEC, "wgmma", 1)] == [SPEC]
    # the gated spec's table is no table for the plain 2N GEMM
    assert main(["tune", "M=512", "N=2048", "K=2048", "--layout", "nt", "--dtype", "bf16", "--simulate", str(path),
                 "--db", str(db)]) == 2
    assert "recorded for" in capsys.readouterr().err


def test_fitted_twins_of_a_gated_spec_fit_2n_in_pairs_of_8_columns():
    from gemmtune.chooser.candidates import fitted_twin
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    spec = GemmSpec(4096, 600, 4096, "nt", "bf16", gated=True)  # 1200 columns of gate and up
    parent = WgmmaConfig(bm=128, bn=256, stages=4, consumers=2)
    assert not WGMMA.rejections(parent, spec, "sm_90a")
    twin = fitted_twin(spec, parent)
    assert twin is not None and twin.bn % 16 == 0 and twin.bn < parent.bn
    assert math.ceil(spec.gemm_n / twin.bn) == math.ceil(spec.gemm_n / parent.bn)  # the same tiles across 2N
    assert not WGMMA.rejections(twin, spec, "sm_90a")


def test_transfer_counts_gating_as_a_mismatch():
    from gemmtune.tune.transfer import MISMATCH_STEP, shape_distance

    assert shape_distance(SPEC, SPEC.ungated()) == pytest.approx(1.0 + MISMATCH_STEP)  # N differs 2x, and gating
    assert shape_distance(SPEC, GemmSpec(512, 1024, 2048, "nt", "bf16")) == pytest.approx(MISMATCH_STEP)


def test_the_cublas_baseline_of_a_gated_spec_is_its_2n_gemm(monkeypatch):
    import gemmtune.baseline as baseline

    timed = []
    monkeypatch.setattr(baseline, "_timed", lambda spec, protocol, make, what, roundings=1: timed.append(spec))
    baseline.cublas_measurement(SPEC)
    assert timed == [SPEC.ungated()] and timed[0].flops == SPEC.flops
    assert "2048-column GEMM without SwiGLU" in baseline.matmul_label(SPEC)


def test_the_shipped_table_is_no_answer_for_a_gated_spec():
    from gemmtune.export.config_source import choose_config, from_known_configs
    from gemmtune.tune.many import untuned_config

    spec = GemmSpec(4096, 2048, 4096, "nt", "bf16", gated=True)
    assert from_known_configs(spec, "sm_90a", None, family="wgmma") is None
    choice = choose_config(spec, "sm_90a", None, db_path=Path("/nonexistent/t.sqlite"))
    assert choice.provenance.source == "chooser"
    assert untuned_config(spec, "sm_90a", "wgmma") == choice.config  # tune-many's untuned pick is build's
