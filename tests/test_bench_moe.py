"""bench/bench_moe.py without a GPU: its cases (3 MoE configs x 3 token counts x 2 routings x 2 projections),
routings that place every routed row (balanced within one row, Zipf skewed, seeded, with empty experts
where tokens are few), and --list."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_moe  # noqa: E402


def test_every_config_token_count_routing_and_projection_is_a_case():
    cases = bench_moe.cases()
    assert len(cases) == 3 * 3 * 2 * 2
    assert {c.config.experts for c in cases} == {8, 128, 256}
    mixtral_up = next(c for c in cases if c.config.experts == 8 and c.projection == "up")
    assert (mixtral_up.n, mixtral_up.k) == (2 * 14336, 4096)  # gate and up stacked, as SwiGLU experts store them
    deepseek_down = next(c for c in cases if c.config.experts == 256 and c.projection == "down")
    assert (deepseek_down.n, deepseek_down.k) == (7168, 2048)


def test_routings_place_every_row():
    for experts, rows in ((8, 256), (128, 1024), (256, 131072), (256, 7)):
        balanced = bench_moe.group_rows(experts, rows, "balanced")
        assert sum(balanced) == rows and max(balanced) - min(balanced) <= 1
        skewed = bench_moe.group_rows(experts, rows, "zipf")
        assert sum(skewed) == rows and len(skewed) == experts and min(skewed) >= 0
        assert skewed == bench_moe.group_rows(experts, rows, "zipf")  # seeded: the same every run
    skewed = bench_moe.group_rows(256, 1024, "zipf")
    assert max(skewed) > 50 * (1024 // 256) and skewed.count(0) > 0  # one hot expert, several empty ones


def test_list_prints_every_case(capsys):
    assert bench_moe.main(["--list"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 36
    assert bench_moe.main(["--list", "--models", "qwen"]) == 0
    assert all("Qwen3" in line for line in capsys.readouterr().out.strip().splitlines())
    assert bench_moe.main(["--models", "nothing"]) == 2


def test_routings_are_the_packages_and_keep_the_published_rows():
    """bench_moe routes with gemmtune.grouped.distribution.routed_rows (one definition), seeded per case as the
    bench always was: every case's rows are those of its published tables (digest taken from the bench's own copy
    of the routing before it was replaced) and a few are pinned outright."""
    import hashlib
    import json

    from gemmtune.grouped import distribution

    every = [c.group_rows() for c in bench_moe.cases()]
    assert hashlib.sha256(json.dumps(every).encode()).hexdigest() == \
        "736814b00c6bc8f866372f8f59d46143f656120e4957704ed853f059212fb7c0"
    assert bench_moe.group_rows(8, 256, "zipf") == [12, 10, 110, 9, 48, 16, 21, 30]
    assert bench_moe.group_rows(16, 100, "zipf") == [4, 1, 2, 2, 5, 1, 4, 37, 6, 10, 7, 1, 1, 1, 2, 16]
    assert not hasattr(bench_moe, "ZIPF_EXPONENT") and distribution.ZIPF_EXPONENT == 1.2


def test_peers_flag_takes_deepgemm_and_refuses_unknown_names(capsys):
    assert bench_moe.parse_peers("grouped,loop,deepgemm") == ["grouped_mm", "loop", "deepgemm"]
    assert bench_moe.parse_peers("deepgemm") == ["grouped_mm", "loop", "deepgemm"]  # torch's two always run
    assert bench_moe.main(["--list", "--models", "qwen", "--peers", "grouped,loop,deepgemm"]) == 0
    assert bench_moe.main(["--list", "--peers", "cutlass"]) == 2
    assert "unknown peer cutlass" in capsys.readouterr().err


def test_deepgemm_peer_says_why_it_is_unavailable_and_the_table_says_so(monkeypatch, tmp_path):
    from peers import deepgemm_grouped

    if importlib.util.find_spec("deep_gemm") is None:  # no build here: one line naming the missing build
        monkeypatch.setattr(deepgemm_grouped, "BUILD", tmp_path / "none")
        deepgemm_grouped._module.cache_clear()
        reason = deepgemm_grouped.available()
        assert reason and "\n" not in reason and "build.sh" in reason
        deepgemm_grouped._module.cache_clear()
    row = {"case": "c", "experts": 2, "rows": 3, "n": 4, "k": 5, "rows_per_active": 1.5, "error": 1e-3, "tflops": 1.0,
           "us": {"ours": 1.0, "grouped_mm": 2.0, "loop": 3.0}, "ratio": {"grouped_mm": 2.0, "loop": 3.0}}
    text = bench_moe.table_text([row], {"deepgemm": "DeepGEMM unavailable: not built"})
    assert text.startswith("Not run: deepgemm: DeepGEMM unavailable") and "- DeepGEMM: not run (DeepGEMM unavailable" in text
    timed = {**row, "us": {**row["us"], "deepgemm": 1.5}, "ratio": {**row["ratio"], "deepgemm": 1.5},
             "peer_errors": {"deepgemm": 2e-3}}
    assert "| 1.5 | 1.50 | 2.0e-03 |" in bench_moe.table_text([timed, row])  # a case it failed on: dashes
    assert "| — | — | — |" in bench_moe.table_text([timed, row])


def test_deepgemm_padding_round_trips_on_the_cpu():
    torch = pytest.importorskip("torch")
    from peers import deepgemm_grouped as dg

    rows, align = [3, 0, 130, 128, 1], 128
    assert dg.padded_starts(rows, align) == ([0, 128, 128, 384, 512], 640)
    x = torch.randn(sum(rows), 8)
    padded = dg.pad_rows(torch, x, rows, align)
    assert padded.shape == (640, 8) and torch.equal(dg.unpad_rows(torch, padded, rows, align), x)
    layout = dg.m_indices(torch, rows, align)
    assert layout.dtype == torch.int32 and layout.shape == (640,)
    assert layout[:3].tolist() == [0] * 3 and set(layout[3:128].tolist()) == {-1}  # padding rows: -1, and zero
    assert (layout == 2).sum() == 130 and (layout == 3).sum() == 128 and layout[512].item() == 4
    assert not padded[3:128].any() and torch.equal(padded[layout >= 0], x)  # real rows in order, group by group
