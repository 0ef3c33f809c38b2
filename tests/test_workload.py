"""Workload files (gemmtune/workload.py): what a good one holds, how shares split a budget, and a
one-line refusal (exit 2) for every way a file can be wrong."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.input_files import InputFileError
from gemmtune.spec import GemmSpec
from gemmtune.workload import (BANDWIDTH, PEAK_FLOPS, Workload, WorkloadShape, estimated_seconds,
                               load_workload, save_workload)

GOOD = {"shapes": [{"m": 16, "n": 4096, "k": 4096, "layout": "nt", "dtype": "bf16", "count": 32},
                   {"m": 2048, "n": 11008, "k": 4096, "layout": "nt", "dtype": "bf16", "epilogue": "relu",
                    "count": 2}]}


def test_json_and_csv_hold_the_same_workload(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps(GOOD))
    (tmp_path / "w.csv").write_text("m,n,k,layout,dtype,epilogue,count,share\n16,4096,4096,nt,bf16,,32,\n"
                                    "2048,11008,4096,nt,bf16,relu,2,\n")
    from_json, from_csv = load_workload(tmp_path / "w.json"), load_workload(tmp_path / "w.csv")
    assert from_json == from_csv
    assert from_json.shapes[1].spec == GemmSpec(2048, 11008, 4096, "nt", "bf16", "relu")
    save_workload(from_json, tmp_path / "again.json")
    assert load_workload(tmp_path / "again.json") == from_json


def test_shares_default_to_a_roofline_estimate_times_count():
    """A decode GEMM (M = 16) streams its weights: its time is bytes over bandwidth, not FLOPs over
    the tensor cores' rate, so 32 of them weigh more than their FLOPs say."""
    small, big = GemmSpec(16, 4096, 4096, "nt", "bf16"), GemmSpec(2048, 4096, 4096, "nt", "bf16")
    shares = Workload((WorkloadShape(small, count=32), WorkloadShape(big, count=1))).shares()
    by_flops = 32 * 16 / (32 * 16 + 2048)
    assert shares[0] > 2 * by_flops and sum(shares) == pytest.approx(1)
    assert estimated_seconds(small) == pytest.approx(small.min_bytes / BANDWIDTH)
    assert estimated_seconds(big) == pytest.approx(big.flops / PEAK_FLOPS["bf16"])
    given = Workload((WorkloadShape(small, share=1.0), WorkloadShape(big, share=3.0)))
    assert given.shares() == [0.25, 0.75] and given.split(8.0) == [2.0, 6.0]


BAD = {
    "no shapes key": ({"entries": []}, "'shapes' is missing"),
    "shapes not a list": ({"shapes": {"m": 1}}, "not a list"),
    "no shapes": ({"shapes": []}, "no shapes"),
    "shape not an object": ({"shapes": [3]}, "not an object"),
    "negative m": ({"shapes": [{"m": -4, "n": 8, "k": 8}]}, "below 1"),
    "fractional k": ({"shapes": [{"m": 4, "n": 8, "k": 8.5}]}, "not a whole number"),
    "text n": ({"shapes": [{"m": 4, "n": "many", "k": 8}]}, "not a whole number"),
    "missing k": ({"shapes": [{"m": 4, "n": 8}]}, "'k' is missing"),
    "unknown dtype": ({"shapes": [{"m": 4, "n": 8, "k": 8, "dtype": "fp8"}]}, "fp8"),
    "unknown field": ({"shapes": [{"m": 4, "n": 8, "k": 8, "batch_size": 2}]}, "unknown field"),
    "repeated shape": ({"shapes": [{"m": 4, "n": 8, "k": 8}, {"m": 4, "n": 8, "k": 8}]}, "repeats shape 1"),
    "some shares": ({"shapes": [{"m": 4, "n": 8, "k": 8, "share": 0.5}, {"m": 8, "n": 8, "k": 8}]}, "some shapes have a share"),
    "zero shares": ({"shapes": [{"m": 4, "n": 8, "k": 8, "share": 0}]}, "add up to 0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_workload_is_one_line_and_exit_2(case, tmp_path, capsys):
    content, expected = BAD[case]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputFileError, match=expected):
        load_workload(path)
    assert main(["shapes", "show", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "Traceback" not in err


def test_a_csv_without_the_size_columns_is_refused(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("rows,cols\n1,2\n")
    with pytest.raises(InputFileError, match="no column 'm'"):
        load_workload(path)
    path.write_text("m,n,k\n4,x,8\n")
    with pytest.raises(InputFileError, match="line 2"):
        load_workload(path)


def test_shapes_show_prints_every_shape_and_its_share(tmp_path, capsys):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(GOOD))
    assert main(["shapes", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "16x4096x4096 nt bf16" in out and "2048x11008x4096 nt bf16 relu" in out and "%" in out


def test_merge_adds_counts_of_shapes_in_several_workloads(tmp_path, capsys):
    a = Workload((WorkloadShape(GemmSpec(16, 64, 64), count=2), WorkloadShape(GemmSpec(32, 64, 64))))
    b = Workload((WorkloadShape(GemmSpec(16, 64, 64), count=3),))
    save_workload(a, tmp_path / "a.json")
    save_workload(b, tmp_path / "b.json")
    assert main(["shapes", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "c.json")]) == 0
    merged = load_workload(tmp_path / "c.json")
    assert merged == Workload((WorkloadShape(GemmSpec(16, 64, 64), count=5), WorkloadShape(GemmSpec(32, 64, 64))))


def test_a_gated_shape_round_trips_through_json_and_csv(tmp_path):
    """optimize()'s fused SwiGLU sites are gated specs: a workload carries them (gated true, N the output width)."""
    gated = GemmSpec(512, 1024, 2048, "nt", "bf16", gated=True)
    workload = Workload((WorkloadShape(gated, count=4), WorkloadShape(gated.ungated(), count=1)))
    save_workload(workload, tmp_path / "w.json")
    assert json.loads((tmp_path / "w.json").read_text())["shapes"][0]["gated"] is True
    assert load_workload(tmp_path / "w.json") == workload
    (tmp_path / "w.csv").write_text("m,n,k,layout,dtype,count,gated\n512,1024,2048,nt,bf16,4,1\n"
                                    "512,2048,2048,nt,bf16,1,\n")
    assert load_workload(tmp_path / "w.csv") == workload
    assert estimated_seconds(gated) == pytest.approx(gated.flops / PEAK_FLOPS["bf16"])  # 2N columns of work


@pytest.mark.parametrize("fields, words", [
    ({"gated": "maybe"}, "'gated' is 'maybe', not true or false"),
    ({"gated": 2}, "not true or false"),
    ({"gated": True, "n": 12}, "N a multiple of 8"),
    ({"gated": True, "layout": "nn"}, "layout nt only"),
])
def test_a_bad_gated_shape_is_one_line(tmp_path, fields, words):
    shape = {"m": 4, "n": 16, "k": 8, "layout": "nt", "dtype": "bf16", **fields}
    (tmp_path / "w.json").write_text(json.dumps({"shapes": [shape]}))
    with pytest.raises(InputFileError, match=words) as info:
        load_workload(tmp_path / "w.json")
    assert "\n" not in str(info.value)
