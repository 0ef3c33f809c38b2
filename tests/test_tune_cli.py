"""`gemmtune space`, `gemmtune tune` and `gemmtune db`, without a GPU."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.cli.tune_cmds import split_trial_word, trial_budget
from gemmtune.errors import NoDeviceError, SpecError
from gemmtune.spec import GemmSpec
from gemmtune.tune.db import TuningDB
from gemmtune.tune.simulation import table_path
from test_tune_simulation import synthetic_table

SRC = str(Path(__file__).parents[1] / "src")


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = table_path("simt", GemmSpec(1024, 1024, 1024, math="simt"), tmp_path_factory.mktemp("tables"))
    table = synthetic_table(GemmSpec(1024, 1024, 1024, math="simt"), rows=300, seed=11)
    table.meta["cublas_median_s"] = table.best_s * 0.8
    table.to_csv(path)
    return path


def test_space_prints_size_and_rejections(capsys: pytest.CaptureFixture) -> None:
    assert main(["space", "MNK=2048", "--math", "simt", "--arch", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "3,840,000 combinations" in out and "valid" in out
    for rule in ("warp_pair", "threads", "shared_memory", "registers"):
        assert rule in out
    assert "first" in out and "any" in out


def test_tune_without_a_gpu_is_one_line_and_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    import gemmtune.device

    def no_gpu(ordinal: int = 0):
        raise NoDeviceError("no NVIDIA driver found (libcuda.so is missing); a CUDA GPU is needed")

    monkeypatch.setattr(gemmtune.device, "query_device", no_gpu)
    assert main(["tune", "MNK=256", "--db", str(tmp_path / "t.sqlite")]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "GPU" in captured.err and not (tmp_path / "t.sqlite").exists()


def test_tune_without_a_gpu_from_the_shell(tmp_path: Path) -> None:
    from gemmtune.device import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-m", "gemmtune.cli", "tune", "MNK=256", "--db", str(tmp_path / "t")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("gemmtune: ")


def test_trial_words() -> None:
    assert split_trial_word(["MNK=1024", "t=64"]) == (["MNK=1024"], 64)
    assert split_trial_word(["M=1", "N=2", "K=3"]) == (["M=1", "N=2", "K=3"], None)
    with pytest.raises(SpecError):
        split_trial_word(["t=0"])
    with pytest.raises(SpecError):
        split_trial_word(["t=4", "T=5"])
    assert trial_budget(None, None, None) == 100 and trial_budget(None, None, 30.0) is None
    with pytest.raises(SpecError, match="both"):
        trial_budget(5, 6, None)


def test_simulated_tune_then_db_verbs(table_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps tables to the terminal; keep rows whole here
    db = tmp_path / "t.sqlite"
    assert main(["tune", "MNK=1024", "t=24", "--math", "simt", "--simulate", str(table_csv), "--db", str(db), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "re-measured" in out and "% of cuBLAS" in out and "24 new trials" in out
    assert re.search(r"search: 24 trials in [0-9.]+ s \([0-9.]+/s\); best found after [0-9.]+ s", out), out
    with TuningDB(db) as handle:
        assert [s.trials for s in handle.contexts()] == [24]

    assert main(["db", "list", "--db", str(db)]) == 0
    assert "1024x1024x1024" in capsys.readouterr().out
    assert main(["db", "best", "MNK=1024", "--math", "simt", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "tiled"

    exported, copy = tmp_path / "trials.jsonl", tmp_path / "copy.sqlite"
    assert main(["db", "export", str(exported), "--db", str(db)]) == 0
    assert main(["db", "import", str(exported), "--db", str(copy)]) == 0
    assert "imported 27 trials" in capsys.readouterr().err  # 24 searched + 3 re-measured


def test_db_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["db", "list", "--db", str(tmp_path / "missing.sqlite")]) == 2  # a path that is not there
    assert "no tuning database" in capsys.readouterr().err
    with TuningDB(tmp_path / "empty.sqlite"):
        pass
    assert main(["db", "best", "MNK=64", "--db", str(tmp_path / "empty.sqlite")]) == 1
    assert "no successful trial" in capsys.readouterr().err


def test_simulate_rejects_a_table_for_another_shape(table_csv: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    assert main(["tune", "MNK=2048", "--math", "simt", "--simulate", str(table_csv), "--db", str(tmp_path / "t")]) == 2
    assert "recorded for 1024x1024x1024" in capsys.readouterr().err
