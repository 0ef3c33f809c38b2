"""fp8 in the tuner, export and load without a GPU (issues 69/70): tune-grouped / tune / export / export-grouped
command lines and their one-line errors, the database key gemmtune.torch.scaled_mm looks a tuned config up by, the
torch_op column (and its migration), the exported folders (launchers taking the scales, the one-GEMM overload, the
host-reference harness; nvcc compile-only where nvcc exists), and gemmtune.load's reading of grouped folders."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.errors import LaunchError
from gemmtune.grouped import GroupedSpec, candidates, default_config, rejections
from gemmtune.spec import GemmSpec
from gemmtune.tune.grouped_db import GroupedTuningDB
from gemmtune.tune.grouped_records import GroupedKey, GroupedTrial
from gemmtune.tune.grouped_tuner import spec_for_gemm, spec_for_rows, tune_grouped
from gemmtune.tune.trial import Environment, Status

H200 = Environment("NVIDIA H200", "9.0", 132, "sm_90", "12.8", "12.8")


class FakeMeasurer:
    """Times from the tile and promotion (64-row tiles fastest); the torch call named as the GPU worker names it."""

    def __init__(self, torch_op: str = "torch._scaled_mm rowwise"):
        self.environment, self.measured, self.torch_op = H200, [], torch_op

    def measure(self, spec, rows, config) -> GroupedTrial:
        self.measured.append(config)
        seconds = 1e-5 * (1 + config.bm / 128 + config.stages / 100 + config.promote_every / 40)
        return GroupedTrial(config, Status.OK, seconds, (seconds,) * 3, 2e-5, (2e-5,) * 3, torch_op=self.torch_op)

    def close(self) -> None:
        pass


def _device(monkeypatch: pytest.MonkeyPatch, cc=(9, 0), name: str = "NVIDIA H200"):
    import gemmtune.device

    class Device:
        ordinal, sm_count, arch = 0, 132, f"sm_{cc[0]}{cc[1]}"

    Device.cc, Device.name = cc, name
    monkeypatch.setattr(gemmtune.device, "query_device", lambda ordinal=0: Device())
    return Device


# --- the key ----------------------------------------------------------------------------------------------
def test_a_tuned_fp8_gemm_has_the_key_scaled_mm_looks_up() -> None:
    gemm = GemmSpec(1000, 2048, 4096, "nt", "e4m3", "bias_col", out_dtype="fp16", scaling="rowwise")
    grouped, rows = spec_for_gemm(gemm)
    assert rows == (1000,) and (grouped.groups, grouped.total_m, grouped.scaling, grouped.out_dtype) == (1, 1000, "rowwise", "fp16")
    # what gemmtune.torch.scaled_mm builds for (1000, 4096) x (4096, 2048) with a bias and fp16 out (scaled_ops.py)
    called = GroupedSpec(1, 1000, 2048, 4096, "e4m3", "bias", out_dtype="fp16", scaling="rowwise")
    assert GroupedKey.of(grouped) == GroupedKey.of(called)
    assert GroupedKey.of(GroupedSpec(1, 900, 2048, 4096, "e4m3", "bias", out_dtype="fp16", scaling="rowwise")) == \
        GroupedKey.of(called)  # the same bucket of rows
    for other in (dict(scaling="tensor"), dict(out_dtype="bf16"), dict(dtype="e5m2")):
        fields = {"dtype": "e4m3", "out_dtype": "fp16", "scaling": "rowwise", **other}
        changed = GroupedSpec(1, 1000, 2048, 4096, fields["dtype"], "bias", out_dtype=fields["out_dtype"],
                              scaling=fields["scaling"])
        assert GroupedKey.of(changed) != GroupedKey.of(called), other


def test_spec_for_rows_takes_fp8_keywords() -> None:
    spec = spec_for_rows((30, 0, 50), 256, 128, "e5m2", "relu", out_dtype="fp16", scaling="block")
    assert (spec.groups, spec.total_m, spec.dtype, spec.out_dtype, spec.scaling) == (3, 80, "e5m2", "fp16", "block")
    assert spec_for_rows((8,), 64, 64) == GroupedSpec(1, 8, 64, 64)  # the 16-bit call as before


def test_scaled_mm_reads_the_tuned_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gemmtune.grouped import tuned

    gemm = GemmSpec(1000, 512, 1024, "nt", "e4m3", scaling="tensor")
    grouped, rows = spec_for_gemm(gemm)
    db_path = tmp_path / "t.sqlite"
    with GroupedTuningDB(db_path) as db:
        outcome = tune_grouped(grouped, rows, FakeMeasurer(), db)
    assert outcome.best.config != default_config(grouped) and outcome.best.torch_op == "torch._scaled_mm rowwise"
    _device(monkeypatch)
    tuned.use_database(db_path)
    try:  # scaled_mm's spec for M = 1000 (launch.build asks chosen_config)
        assert tuned.chosen_config(GroupedSpec(1, 1000, 512, 1024, "e4m3", scaling="tensor")) == outcome.best.config
        assert tuned.chosen_config(GroupedSpec(1, 1000, 512, 1024, "e4m3", scaling="rowwise")) == \
            default_config(GroupedSpec(1, 1000, 512, 1024, "e4m3", scaling="rowwise"))
    finally:
        tuned.use_database(None)


def test_an_unpromoted_fp8_config_in_the_database_is_not_used_at_long_k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database written before keeps_fp8_accuracy may hold an unpromoted tensor-scaled config as the fastest at
    K = 4096 (32 k-blocks in wgmma's reduced-precision accumulator): scaled_mm keeps the default; at K = 1024 (one
    promotion chunk) the same config sums exactly as a promoted one and is used."""
    from gemmtune.grouped import tuned
    from gemmtune.tune.grouped_records import GroupedContext
    from gemmtune.tune.grouped_tuner import VERSION

    db_path = tmp_path / "t.sqlite"
    measurer = FakeMeasurer()
    found = {}
    for k in (4096, 1024):
        grouped, rows = spec_for_gemm(GemmSpec(1000, 512, k, "nt", "e4m3", scaling="tensor"))
        fast = default_config(grouped).with_(promote_every=0, promote_overlap=False, overlap_static=False)
        assert not rejections(fast, grouped)
        trial = measurer.measure(grouped, rows, fast)
        with GroupedTuningDB(db_path) as db:
            db.record(GroupedContext(grouped, rows, measurer.environment, VERSION), trial)  # the only trial: the fastest
        found[k] = (grouped, fast)
    _device(monkeypatch)
    tuned.use_database(db_path)
    try:
        grouped, fast = found[4096]
        assert tuned.chosen_config(grouped) == default_config(grouped) and default_config(grouped).promote_every == 8
        grouped, fast = found[1024]
        assert tuned.chosen_config(grouped) == fast
    finally:
        tuned.use_database(None)


# --- the database -----------------------------------------------------------------------------------------
def test_torch_op_round_trips_and_older_tables_gain_the_column(tmp_path: Path) -> None:
    db_path = tmp_path / "t.sqlite"
    spec = spec_for_rows((100, 28), 256, 128)
    with GroupedTuningDB(db_path) as db:
        tune_grouped(spec, (100, 28), FakeMeasurer("torch._grouped_mm"), db, limit=1)
    conn = sqlite3.connect(db_path)  # as a file written before the column: drop it
    conn.execute("ALTER TABLE grouped_trials DROP COLUMN torch_op")
    conn.commit()
    conn.close()
    with GroupedTuningDB(db_path) as db:
        outcome = tune_grouped(spec, (100, 28), FakeMeasurer("named"), db, limit=2)
    assert [t.torch_op for t in outcome.trials] == ["", "named"]  # the older row reads ''


# --- command lines ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, word", [
    (["--dtype", "e4m3"], "needs --scale"), (["--dtype", "bf16", "--scale", "tensor"], "for fp8 inputs"),
    (["--dtype", "e4m3", "--scale", "tensor", "--out-dtype", "e4m3"], "bf16, fp16 or fp32"),
    (["--dtype", "int8"], "take bf16"), (["--dtype", "e4m3", "--scale", "block", "-k", "120"], "multiple of 16")])
def test_tune_grouped_fp8_refuses_bad_input_in_one_line(argv: list[str], word: str, capsys, tmp_path: Path) -> None:
    assert main(["tune-grouped", "-n", "256", "-k", "128", "--rows", "8,8", "--db", str(tmp_path / "t.sqlite"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err and not (tmp_path / "t.sqlite").exists()


def test_tune_grouped_fp8_prints_the_torch_call_in_the_table(monkeypatch, tmp_path: Path, capsys) -> None:
    import gemmtune.tune.grouped_measure as measure

    op = "torch._scaled_grouped_mm rowwise, scales of one (no block-scaled grouped form in torch)"
    monkeypatch.setattr(measure, "WorkerMeasurer", lambda rounds, timeout: FakeMeasurer(op))
    argv = ["tune-grouped", "-n", "256", "-k", "256", "--rows", "100,0,60", "--dtype", "e4m3", "--scale", "block",
            "--out-dtype", "fp16", "--candidates", "3", "--db", str(tmp_path / "t.sqlite")]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "e4m3_block_fp16" in out and "x torch._scaled_grouped_mm rowwise, scales of one" in out
    assert "torch: torch._scaled_grouped_mm" in out and "gemmtune.torch.scaled_grouped_mm uses the fastest" in out


def test_tune_of_an_fp8_gemm_runs_the_grouped_tuner(monkeypatch, tmp_path: Path, capsys) -> None:
    import gemmtune.tune.grouped_measure as measure

    monkeypatch.setattr(measure, "WorkerMeasurer", lambda rounds, timeout: FakeMeasurer("torch._scaled_mm per tensor"))
    db_path = tmp_path / "t.sqlite"
    argv = ["--dtype", "e4m3", "--scale", "tensor", "--db", str(db_path)]
    assert main(["tune", "M=1000", "N=512", "K=1024", "t=2", *argv]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[2/2]" in out and "gemmtune.torch.scaled_mm uses the fastest" in out and "torch._scaled_mm per tensor" in out
    grouped, _ = spec_for_gemm(GemmSpec(1000, 512, 1024, "nt", "e4m3", scaling="tensor"))
    stored = sqlite3.connect(db_path).execute("SELECT DISTINCT lookup_key FROM grouped_trials").fetchall()
    assert stored == [(GroupedKey.of(grouped).hash(),)]
    assert main(["tune", "M=1000", "N=512", "K=1024", *argv]) == 0  # all candidates: the first two from the database
    out = capsys.readouterr().out
    assert "(in the database)" in out and f"[{len(candidates(grouped))}/{len(candidates(grouped))}]" in out


def test_tune_of_a_decode_fp8_gemm_says_scaled_mm_runs_the_gemv(monkeypatch, tmp_path: Path, capsys) -> None:
    import gemmtune.tune.grouped_measure as measure

    monkeypatch.setattr(measure, "WorkerMeasurer", lambda rounds, timeout: FakeMeasurer())
    assert main(["tune", "M=8", "N=512", "K=1024", "--dtype", "e4m3", "--scale", "rowwise", "--trials", "1",
                 "--db", str(tmp_path / "t.sqlite")]) == 0
    assert "fp8 decode GEMV" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("extra, word", [(["--simulate", "x.csv"], "--simulate replays"), (["--time", "5"], "--trials N"),
                                         (["--family", "wgmma"], "not e4m3")])
def test_tune_of_an_fp8_gemm_refuses_what_does_not_apply(extra, word, capsys, tmp_path: Path) -> None:
    assert main(["tune", "MNK=256", "--dtype", "e4m3", "--scale", "tensor", "--db", str(tmp_path / "t.sqlite"), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err and not (tmp_path / "t.sqlite").exists()


# --- export -----------------------------------------------------------------------------------------------
FP8_SPECS = [GroupedSpec(5, 600, 320, 256, "e4m3", "bias+gelu", scaling="rowwise"),
             GroupedSpec(3, 300, 200, 272, "e5m2", out_dtype="fp16", scaling="block"),
             GroupedSpec(4, 256, 128, 128, "e4m3", "relu", layout="masked", scaling="tensor"),
             GroupedSpec(2, 300, 136, 256, "e4m3", "bias", out_dtype="fp32", scaling="tensor")]


@pytest.fixture(scope="module")
def fp8_exports(tmp_path_factory: pytest.TempPathFactory) -> list:
    from gemmtune.export.grouped import export_grouped

    root = tmp_path_factory.mktemp("fp8_exports")
    return [export_grouped(spec, default_config(spec), root / f"e{i}", sm_count=132) for i, spec in enumerate(FP8_SPECS)]


def test_fp8_launchers_take_the_scales_after_the_bias(fp8_exports: list) -> None:
    from gemmtune.export.grouped import launcher_params

    assert launcher_params(FP8_SPECS[0]) == (
        "const unsigned char* A, const unsigned char* B, const int* offs, const __nv_bfloat16* bias, "
        "const float* scale_a, const float* scale_b, __nv_bfloat16* D, int groups, int total_m, cudaStream_t stream = 0")
    assert "const int* counts, const float* scale_a" in launcher_params(FP8_SPECS[2])
    words = {"rowwise": "scale_b (G, N) float32", "block": "(G, ceil(N/128), ceil(K/128))", "tensor": "one scale each"}
    for result in fp8_exports:
        header = (result.path / f"{result.name}.cuh").read_text()
        assert words[result.spec.scaling] in header and "CU_TENSOR_MAP_DATA_TYPE_UINT8" in header
        assert "&arg_scale_a, &arg_scale_b, &arg_D" in header
        grouped = json.loads((result.path / "kernel.json").read_text())["grouped"]
        assert (grouped["dtype"], grouped["scaling"], grouped["out_dtype"], grouped["gemm"]) == \
            (result.spec.dtype, result.spec.scaling, result.spec.out_dtype, False)
        assert "fp8_value" in (result.path / "reference.cuh").read_text()
        assert "host reference" in (result.path / "main.cu").read_text()


def test_load_reads_the_grouped_field_back(fp8_exports: list) -> None:
    from gemmtune.export.loader import compiled_from_folder, grouped_spec_of

    for result in fp8_exports:
        manifest, _ = compiled_from_folder(result.path)
        assert grouped_spec_of(result.path, manifest) == result.spec


def test_load_refuses_a_grouped_folder_on_another_gpu(fp8_exports: list, monkeypatch) -> None:
    import gemmtune

    _device(monkeypatch, cc=(8, 0), name="NVIDIA A100")
    with pytest.raises(LaunchError, match="sm_90a .* is sm_80: it cannot run there"):
        gemmtune.load(fp8_exports[0].path)


def test_load_refuses_a_damaged_grouped_field(fp8_exports: list, tmp_path: Path) -> None:
    import shutil

    from gemmtune.export.loader import compiled_from_folder, grouped_spec_of
    from gemmtune.input_files import InputFileError

    folder = tmp_path / "copy"
    shutil.copytree(fp8_exports[0].path, folder)
    data = json.loads((folder / "kernel.json").read_text())
    data["grouped"]["n"] = 999
    (folder / "kernel.json").write_text(json.dumps(data))
    manifest, _ = compiled_from_folder(folder)
    with pytest.raises(InputFileError, match="does not match"):
        grouped_spec_of(folder, manifest)


@pytest.mark.skipif(__import__("gemmtune.export.toolchain", fromlist=["x"]).find_nvcc() is None, reason="no nvcc")
@pytest.mark.parametrize("index", range(len(FP8_SPECS)))
def test_fp8_harness_compiles_with_nvcc(fp8_exports: list, index: int) -> None:
    from gemmtune.export.toolchain import build_harness

    assert build_harness(fp8_exports[index].path, link=False).is_file()


def test_export_of_an_fp8_gemm_writes_the_one_gemm_launcher(tmp_path: Path, capsys) -> None:
    from gemmtune.export.toolchain import build_harness, find_nvcc

    out = tmp_path / "g"
    assert main(["export", "M=300", "N=384", "K=512", "--dtype", "e4m3", "--scale", "block", "--epilogue", "bias_col",
                 "--config", '{"bm": 64, "bn": 128, "consumers": 1}', "--out", str(out)]) == 0
    text = capsys.readouterr().out
    name = "gemm_e4m3_block_bf16_300x384x512_bias_col"
    assert "config source: given" in text and f"launcher: {name}(const unsigned char* A" in text
    header = (out / f"{name}.cuh").read_text()
    assert (f"inline cudaError_t {name}(const unsigned char* A, const unsigned char* B, const __nv_bfloat16* bias, "
            "const float* scale_a, const float* scale_b, __nv_bfloat16* D, cudaStream_t stream = 0)") in header
    assert f"return {name}(A, B, offs, bias, scale_a, scale_b, D, 1, 300, stream);" in header
    grouped = json.loads((out / "kernel.json").read_text())["grouped"]
    assert grouped["gemm"] is True and grouped["groups"] == 1 and grouped["config"]["bm"] == 64
    assert f"{name}(A, B, bias, scale_a, scale_b, D, 0)" in (out / "main.cu").read_text()
    if find_nvcc() is not None:
        assert build_harness(out, link=False).is_file()


@pytest.mark.parametrize("extra, word", [(["--arch", "sm_80"], "export them for sm_90a"),
                                         (["--backend", "tvm"], "does not take fp8"),
                                         (["--config", '{"bn": 256}'], "block scales")])
def test_export_of_an_fp8_gemm_refuses_in_one_line(extra, word, capsys, tmp_path: Path) -> None:
    assert main(["export", "MNK=256", "--dtype", "e4m3", "--scale", "block", "--out", str(tmp_path / "x"), *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err and not (tmp_path / "x").exists()


def test_export_grouped_takes_fp8(tmp_path: Path, capsys) -> None:
    out = tmp_path / "moe"
    assert main(["export-grouped", "-n", "256", "-k", "128", "--rows", "40,0,88", "--dtype", "e5m2", "--scale",
                 "rowwise", "--out-dtype", "fp16", "--epilogue", "bias", "--out", str(out)]) == 0
    assert "(A, B, offs, bias, scale_a, scale_b, D, groups, total_m, stream)" in capsys.readouterr().out
    grouped = json.loads((out / "kernel.json").read_text())["grouped"]
    assert (grouped["dtype"], grouped["out_dtype"], grouped["scaling"]) == ("e5m2", "fp16", "rowwise")
