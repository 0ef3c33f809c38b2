"""`gemmtune profile` and `gemmtune plot` without a GPU: ncu's raw CSV parsed from a recorded file, the
one-line hint without ncu, and every plot drawn from recorded data."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.profile import NCU_HINT, parse_raw_csv, summarize

FIXTURES = Path(__file__).parent / "fixtures"
LADDER = FIXTURES / "numba_ladder_h100_1024.json"
NCU_CSV = FIXTURES / "ncu_raw_simt_4096.csv"
SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_ncu_raw_csv_gives_the_gemm_metrics():
    summary = summarize(parse_raw_csv(NCU_CSV.read_text())[0])
    assert summary.metrics["achieved occupancy (% of warps)"] > 0
    assert 0 < summary.metrics["SM throughput (% of peak)"] <= 100
    assert "DRAM throughput (% of peak)" in summary.metrics and "L2 throughput (% of peak)" in summary.metrics
    assert "shared load bank conflicts" in summary.metrics
    assert summary.stalls and summary.stalls == tuple(sorted(summary.stalls, key=lambda s: -s[1]))
    assert any("tensor pipe" in line for line in summary.lines())


def test_ncu_output_without_a_kernel_is_a_clear_error():
    from gemmtune.errors import GemmtuneError

    with pytest.raises(GemmtuneError, match="no profiled kernel"):
        parse_raw_csv('==PROF== Disconnected\n"ID","Kernel Name"\n"",""\n')


def test_profile_without_ncu_prints_one_line_hint(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gemmtune.cli", "profile", "MNK=64"], capture_output=True, text=True,
                          env={"PATH": str(tmp_path), "PYTHONPATH": SRC}, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == f"gemmtune: {NCU_HINT}" and done.stdout == ""


@pytest.fixture
def plt():
    return pytest.importorskip("matplotlib")


def _written(out: Path) -> list[Path]:
    paths = [out.with_suffix(".png"), out.with_suffix(".svg")]
    for path in paths:
        assert path.stat().st_size > 2000, path
    assert paths[0].read_bytes()[:4] == b"\x89PNG" and b"<svg" in paths[1].read_bytes()[:2000]
    return paths


def test_plot_ladder_and_roofline_from_a_recording(plt, tmp_path):
    assert main(["plot", "ladder", str(LADDER), "--out", str(tmp_path / "ladder")]) == 0
    svg = _written(tmp_path / "ladder")[1].read_text()
    assert "numba-cuda" in svg and "cuBLAS" in svg and "vectorized" in svg  # text stays text
    assert main(["plot", "roofline", str(LADDER), "--out", str(tmp_path / "roof")]) == 0
    _written(tmp_path / "roof")


def test_roofline_points_sit_at_the_compulsory_intensity():
    from gemmtune.plot import roofline_points

    data = json.loads(LADDER.read_text())
    points = roofline_points([data])
    timed = sum(1 for p in data["pairs"] for side in ("cuda_c", "numba") if p[side]["tflops"]) + 1
    assert len(points) == timed
    size = data["spec"]["m"]
    assert all(abs(p.intensity - 2 * size**3 / (3 * size * size * 4)) < 1e-9 for p in points)


def test_unknown_gpu_needs_explicit_peaks():
    from gemmtune.errors import ConfigError
    from gemmtune.plot import peaks_for

    assert peaks_for("NVIDIA H200").bandwidth_tbs == 4.8
    assert peaks_for("NVIDIA H100 80GB HBM3").fp32_tflops == 66.9
    with pytest.raises(ConfigError, match="--peak-tflops"):
        peaks_for("Some GPU")
    assert peaks_for("Some GPU", 10.0, 1.0).fp32_tflops == 10.0


def test_convergence_from_a_simulated_tuning_run(plt, tmp_path):
    db = tmp_path / "tune.sqlite"
    table = Path(SRC) / "gemmtune" / "data" / "simt_gemm_fp32_nn_1024x1024x1024.csv.gz"
    assert main(["tune", "MNK=1024", "--math", "simt", "--simulate", str(table), "--db", str(db), "--trials", "24"]) == 0
    from gemmtune.plot import convergence_traces

    (trace,) = convergence_traces(db)
    best = trace.best_so_far()
    assert len(best) == 24 and all(b2 <= b1 for b1, b2 in zip(best, best[1:]))
    assert main(["plot", "convergence", "MNK=1024", "--math", "simt", "--db", str(db), "--out", str(tmp_path / "conv")]) == 0
    _written(tmp_path / "conv")
    assert main(["plot", "convergence", "MNK=512", "--db", str(db), "--out", str(tmp_path / "none")]) == 2


def test_tensor_pipe_is_busy_only_for_the_tf32_tensor_core_kernel():
    tf32 = summarize(parse_raw_csv((FIXTURES / "ncu_raw_cublas_tf32_4096.csv").read_text())[0])
    simt = summarize(parse_raw_csv(NCU_CSV.read_text())[0])
    assert tf32.tensor_pipe_pct > 50 > simt.tensor_pipe_pct
    assert "selected" not in dict(simt.stalls)  # issuing is not a stall
