"""--db on every verb that reads the tuning database, and bench's short source for the best config
(the full provenance only with --explain). No GPU needed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemmtune.cli import build_parser, main
from gemmtune.cli.core import bench_candidates, best_row_name, explain_best
from gemmtune.device import gpu_available
from gemmtune.export.manifest import Provenance
from gemmtune.kernels import get_family
from gemmtune.profile import Target, compiled_for
from gemmtune.tune.db import TuningDB
from test_tune_db import SLOW, SPEC, context, ok

# Every verb that chooses a config or reads (or writes) the tuning database, with what it needs besides.
DB_VERBS = {
    "show": ["show", "MNK=64"], "bench": ["bench", "MNK=64"], "export": ["export", "MNK=64", "--out", "x"],
    "profile": ["profile", "MNK=64"], "tune": ["tune", "MNK=64"], "db list": ["db", "list"],
    "db best": ["db", "best", "MNK=64"], "db export": ["db", "export", "-"], "db import": ["db", "import", "-"],
    "db train": ["db", "train"], "db check": ["db", "check"], "plot convergence": ["plot", "convergence"],
}


@pytest.fixture
def tuned_db(tmp_path: Path) -> Path:
    """A database whose only trial for SPEC (1024^3 fp32, simt) is SLOW, a config nothing else picks."""
    with TuningDB(tmp_path / "tuned.sqlite") as db:
        db.record(context(), ok(SLOW, 1e-3))
    return tmp_path / "tuned.sqlite"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Choose as on a machine without a GPU (the database's entry is for any sm_90 device then)."""
    monkeypatch.setattr("gemmtune.device.present_device", lambda: None)


@pytest.mark.parametrize("verb", sorted(DB_VERBS))
def test_every_database_verb_takes_db(verb: str) -> None:
    args = build_parser().parse_args([*DB_VERBS[verb], "--db", "some.sqlite"])
    assert args.db == Path("some.sqlite")


def test_show_looks_the_config_up_in_the_given_db(tuned_db: Path, no_gpu: None, capsys) -> None:
    assert main(["show", "MNK=1024", "--math", "simt", "--no-code", "--arch", "sm_90", "--db", str(tuned_db)]) == 0
    out = capsys.readouterr().out
    assert SLOW.describe() in out and "[tuning-db (best tuned config" in out


def test_export_looks_the_config_up_in_the_given_db(tuned_db: Path, no_gpu: None, tmp_path: Path, capsys) -> None:
    assert main(["export", "MNK=1024", "--math", "simt", "--arch", "sm_90", "--db", str(tuned_db), "--out", str(tmp_path / "k")]) == 0
    assert "config source: tuning-db" in capsys.readouterr().out
    assert json.loads((tmp_path / "k" / "kernel.json").read_text())["config"] == SLOW.to_json()


def test_profile_looks_the_config_up_in_the_given_db(tuned_db: Path, no_gpu: None) -> None:
    target = Target(SPEC, "simt", None, "sm_90", str(tuned_db))
    assert Target.from_json(json.loads(json.dumps(target.to_json()))) == target  # what the ncu child gets
    assert compiled_for(target).source.config == SLOW.to_json()


def test_bench_best_row_is_short_and_explain_gives_the_provenance(tuned_db: Path, no_gpu: None) -> None:
    family = get_family("simt")
    rows, choice = bench_candidates(SPEC, "best", "sm_90", family, tuned_db)
    assert rows == [("best (tuning database)", SLOW)]
    assert explain_best(choice).startswith("best (tuning database): tuning-db (best tuned config for 1024x1024x1024")
    rows, choice = bench_candidates(SPEC, "all", "sm_90", family, tuned_db.parent / "none.sqlite")
    assert [name for name, _ in rows[:-1]] == [name for name, _ in family.ladder("sm_90")]
    assert rows[-1][0] in ("best (config chooser)", "best (default)") or rows[-1][0].startswith("best (known config, ")
    assert bench_candidates(SPEC, "naive", "sm_90", family)[1] is None  # no best row: nothing chosen


@pytest.mark.parametrize("provenance, label", [
    (Provenance("tuning-db", "best tuned config for 4096x4096x4096 nn fp32 on NVIDIA H100"), "tuning database"),
    (Provenance("known-configs", "H100 entry for 4096x4096x4096 nn in known_configs.json", gpu="H100"),
     "known config, H100"),
    (Provenance("chooser", "predicted 1.0 µs"), "config chooser"),
    (Provenance("default", "no tuned or known config"), "default"),
    (Provenance("given", "--config (ladder step naive)"), "given"),
])
def test_short_sources(provenance: Provenance, label: str) -> None:
    assert provenance.short() == label
    assert best_row_name(type("Choice", (), {"provenance": provenance})()) == f"best ({label})"


def test_known_config_rows_name_their_gpu(no_gpu: None) -> None:
    from gemmtune.export.config_source import from_known_configs
    from gemmtune.spec import GemmSpec

    found = from_known_configs(GemmSpec(4096, 4096, 4096, "nt", "fp16"), "sm_90a", None, family="wgmma")
    assert found is not None and found.provenance.short().startswith("known config, H")


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU answer")
def test_bench_takes_db_and_explain_before_saying_there_is_no_gpu(tuned_db: Path, capsys) -> None:
    assert main(["bench", "MNK=1024", "--math", "simt", "--db", str(tuned_db), "--explain"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
