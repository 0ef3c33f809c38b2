"""Baselines without a GPU: names, skipping with one line, the side-by-side order, JSON and CSV
output, and the CUTLASS sources (candidates, EVT epilogue, refusals)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from gemmtune.baselines import NAMES, baseline, parse_names, resolve, side_by_side
from gemmtune.baselines import cutlass_source as cs
from gemmtune.baselines.base import Skipped, gemm_only, module_missing
from gemmtune.bench import BenchRow
from gemmtune.bench_report import CSV_FIELDS, BenchReport, write_csv, write_json
from gemmtune.errors import ConfigError, SpecError
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

SPEC = GemmSpec(256, 256, 256, dtype="fp16", epilogue="relu+add")


@dataclass(frozen=True)
class FakeBaseline:
    name: str
    missing: str | None = None
    seconds: float = 1e-3

    def available(self, spec: GemmSpec) -> str | None:
        return self.missing

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        return BenchRow("cuBLAS" if self.name == "cublas" else self.name, "fake", self.seconds,
                        spec.flops / self.seconds / 1e12, 1e-4, "ok", compile_s=2.5)


def fakes(**missing: str):
    return lambda name: FakeBaseline(name, missing.get(name))


def test_names_parse_in_table_order_and_unknown_is_a_spec_error():
    assert parse_names("triton, cublas") == ("cublas", "triton")
    assert parse_names(None) is None and parse_names("none") == ()
    with pytest.raises(SpecError, match="unknown baseline.*cudnn"):
        parse_names("cublas,cudnn")


def test_missing_baselines_are_skipped_with_one_line_each():
    chosen, skipped = resolve(None, SPEC, fakes(cutlass="nvidia-cutlass is not installed", tvm="no tvm"))
    assert [b.name for b in chosen] == [n for n in NAMES if n not in ("cutlass", "tvm")]
    assert [s.line() for s in skipped] == ["skipping cutlass: nvidia-cutlass is not installed", "skipping tvm: no tvm"]
    chosen, skipped = resolve(("triton",), SPEC, fakes(triton="triton is not installed"))
    assert chosen == [] and skipped == [Skipped("triton", "triton is not installed")]


def test_side_by_side_puts_cublas_first_then_ours_then_the_others():
    chosen, _ = resolve(("cublas", "cutlass", "triton"), SPEC, fakes())
    ours = [BenchRow("best", "cfg", 2e-3, 1.0, 1e-5, "ok")]
    seen = []
    rows = side_by_side(SPEC, chosen, lambda: ours, TimingProtocol(), "sm_90a", seen.append)
    assert [r.name for r in rows] == ["cuBLAS", "best", "cutlass", "triton"]
    assert [r.name for r in seen] == ["cuBLAS", "cutlass", "triton"]


def _report() -> BenchReport:
    rows = (BenchRow("cuBLAS", "torch.matmul fp16", 2e-3, 68.7, None, "ok", samples=10),
            BenchRow("best", "tile", 1e-3, 137.4, 1e-5, "ok", samples=12),
            BenchRow("CUTLASS", "sm90 ...", None, None, None, "CompileError", "nvcc could not build, line 3"))
    return BenchReport(SPEC, {"name": "Fake GPU", "arch": "sm_90"}, TimingProtocol(), "2026-11-23T06:00:00+00:00",
                       rows, (Skipped("tvm", "the TVM backend implements fp32, not fp16"),))


def test_json_holds_rows_skipped_protocol_and_date(tmp_path):
    write_json(_report(), tmp_path / "run.json")
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["spec"] == SPEC.to_json() and data["date"].startswith("2026-11-23")
    assert [r["name"] for r in data["rows"]] == ["cuBLAS", "best", "CUTLASS"]
    assert data["rows"][2]["status"] == "CompileError" and data["rows"][1]["compile_s"] is None
    assert data["skipped"] == [{"name": "tvm", "reason": "the TVM backend implements fp32, not fp16"}]
    assert data["protocol"]["min_time_s"] == TimingProtocol().min_time_s


def test_csv_has_one_line_per_row_with_speed_relative_to_cublas(tmp_path):
    write_csv(_report(), tmp_path / "run.csv")
    with open(tmp_path / "run.csv", newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert tuple(lines[0]) == CSV_FIELDS and len(lines) == 3
    assert [line["x_cublas"] for line in lines] == ["1", "2", ""]
    assert lines[1]["median_us"] == "1000" and lines[1]["spec"] == SPEC.short() and lines[1]["device"] == "Fake GPU"
    assert lines[2]["message"] == "nvcc could not build, line 3"  # the comma survives quoting


def test_real_baselines_say_why_they_cannot_run(monkeypatch):
    assert baseline("eager").available(GemmSpec(64, 64, 64)) == "no epilogue: torch eager is the cuBLAS row"
    assert "implements fp32" in baseline("tvm").available(GemmSpec(64, 64, 64, dtype="bf16"))
    assert module_missing("surely_not_a_module_here", "x") == \
        "surely_not_a_module_here is not installed (pip install 'gemmtune[x]')"
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    for name in NAMES:
        reason = baseline(name).available(SPEC)
        assert reason is None or "not installed" in reason or "torch eager" in reason or "TVM" in reason, name
    assert "not installed" in baseline("cutlass").available(SPEC)


def test_cli_rejects_an_unknown_baseline_in_one_line():
    out = subprocess.run([sys.executable, "-m", "gemmtune.cli", "bench", "MNK=64", "--baselines", "cublas,mkl"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == ["gemmtune: unknown baseline(s) mkl; known: " + ", ".join(NAMES)]


def test_gemm_only_label_names_the_missing_epilogue():
    assert gemm_only(SPEC, "simt 128x128x8") == "simt 128x128x8 [GEMM only, no relu+add]"
    assert gemm_only(SPEC.without_epilogue(), "x") == "x"


# --- CUTLASS sources ---------------------------------------------------------------------------
def test_cutlass_candidates_per_dtype_and_refusals():
    assert all(c.kind == "simt" and c.tile[2] == 8 for c in cs.candidates(GemmSpec(64, 64, 64), "sm_90"))
    sm90 = cs.candidates(SPEC, "sm_90a")
    assert {c.schedule for c in sm90} == {"cooperative", "pingpong"} and len(set(sm90)) == len(sm90)
    with pytest.raises(ConfigError, match="sm_90 only"):
        cs.candidates(SPEC, "sm_80")
    with pytest.raises(ConfigError, match="no tf32 kernels"):
        cs.candidates(GemmSpec(64, 64, 64, dtype="tf32"), "sm_90a")
    with pytest.raises(ConfigError, match="multiples of 16 bytes"):
        cs.render(GemmSpec(64, 60, 64, dtype="bf16"), sm90[0])  # D rows of 120 bytes


def test_evt_applies_the_chain_left_to_right_and_rounds_once():
    tree, args = cs.evt(("relu", "add"), "ElementD")
    relu = tree.index("ReLu, float, float")  # inner node returns float ...
    plus = tree.index("cutlass::plus, ElementD, float")  # ... the outer one D's type
    assert plus < relu and tree.count("Sm90AccFetch") == 1 and "Sm90SrcFetch<ElementC>" in tree
    assert args == "{{{}, {}}, {}, {}}"


def test_fused_source_reads_c_and_plain_source_does_not():
    sm90 = cs.candidates(SPEC, "sm_90a")[0]
    fused = cs.render(SPEC, sm90)
    assert cs.fuses(SPEC, sm90) and "using ElementC = cutlass::half_t;" in fused and "Sm90EVT" in fused
    assert "KernelTmaWarpSpecializedCooperative" in fused and "cute::Shape<cute::_1, cute::_2, cute::_1>" in fused
    plain = cs.render(SPEC.without_epilogue(), sm90)
    assert "using ElementC = void;" in plain and "Sm90EVT" not in plain
    gelu_beta = GemmSpec(256, 256, 256, dtype="bf16", epilogue="alpha+beta")
    assert not cs.fuses(gelu_beta, sm90)  # no EVT node for alpha/beta here: the row says GEMM only


def test_simt_source_uses_the_layout_and_leading_dimensions():
    spec = GemmSpec(96, 80, 64, layout="tn")
    source = cs.render(spec, cs.SIMT_FP32[0])
    assert "float, cutlass::layout::ColumnMajor, float, cutlass::layout::RowMajor" in source
    assert "{static_cast<const float*>(A), M}" in source and "{static_cast<const float*>(B), N}" in source
    assert "GemmShape<64, 64, 8>" in source and "OpClassSimt" in source


@pytest.mark.slow
def test_one_cutlass_candidate_builds_with_nvcc(tmp_path):
    """Compiles (no GPU) when nvidia-cutlass and nvcc are here; the library exports the C interface."""
    from gemmtune.baselines.cutlass_build import build, find_toolchain

    toolchain = find_toolchain()
    if isinstance(toolchain, str):
        pytest.skip(toolchain)
    spec = GemmSpec(128, 128, 64)
    built = build(toolchain, spec, cs.SIMT_FP32[-1], "sm_90", tmp_path)
    assert built.library.is_file() and not built.cached
    again = build(toolchain, spec, cs.SIMT_FP32[-1], "sm_90", tmp_path)
    assert again.cached and again.library == built.library
    symbols = subprocess.run(["nm", "-D", str(built.library)], capture_output=True, text=True).stdout
    for name in ("gemmtune_cutlass_prepare", "gemmtune_cutlass_run", "gemmtune_cutlass_release"):
        assert name in symbols


def test_results_table_merges_runs_into_one_row_per_kernel(tmp_path):
    """bench/peers/baselines_table.py: the README's table from the JSON of bench runs."""
    from pathlib import Path

    write_json(_report(), tmp_path / "a.json")
    script = Path(__file__).resolve().parent.parent / "bench" / "peers" / "baselines_table.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "a.json")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "| kernel | fp16 256x256x256 nn relu+add |"
    assert lines[2] == "| gemmtune best | 1000.0 µs (2.000×) |" and lines[4] == "| CUTLASS | CompileError |"
    assert "- skipped tvm: the TVM backend implements fp32, not fp16" in lines
