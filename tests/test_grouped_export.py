"""Export of grouped GEMMs without a GPU (issue 69): the folder's files, a launcher whose parameters, argument order,
grid and shared memory are the runtime's launch (grouped/launch.py renders the same KernelSource), NVRTC compiles
(inside the export), nvcc builds of the harness where nvcc is present, and `gemmtune export-grouped`'s errors."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.errors import SpecError
from gemmtune.export.grouped import export_grouped, harness_rows, launcher_params
from gemmtune.export.toolchain import build_harness, find_nvcc
from gemmtune.grouped import GroupedConfig, GroupedSpec, candidates, default_config
from gemmtune.grouped.render import render

SPECS = [GroupedSpec(6, 900, 200, 72, "bf16", "bias+relu"), GroupedSpec.masked(4, 64, 256, 128, "fp16", swiglu=True),
         GroupedSpec(8, 2048, 512, 256, "bf16", "gelu")]


def _config(spec: GroupedSpec) -> GroupedConfig:
    clustered = [c for c in candidates(spec) if c.cluster == 2]
    return clustered[0] if spec.epilogue.ops == ("gelu",) and clustered else default_config(spec)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list:
    root = tmp_path_factory.mktemp("grouped_exports")
    return [export_grouped(spec, _config(spec), root / f"e{i}", sm_count=132) for i, spec in enumerate(SPECS)]


def test_folder_holds_the_single_gemm_exports_files(exported: list) -> None:
    result = exported[0]
    names = {p.name for p in result.path.iterdir()}
    assert names == {f"{result.name}.cuh", f"{result.name}.cubin", f"{result.name}.ptx", "main.cu", "reference.cuh",
                     "CMakeLists.txt", "README.md", "kernel.json", "kernel_source.json"}
    manifest = json.loads((result.path / "kernel.json").read_text())
    assert manifest["grouped"]["groups"] == 6 and manifest["grouped"]["epilogue"] == "bias_col+relu"
    assert manifest["grouped"]["config"] == result.config.to_json() and result.compiled.cubin
    assert "CUDA::cuda_driver" in (result.path / "CMakeLists.txt").read_text()


@pytest.mark.parametrize("index", range(len(SPECS)))
def test_launcher_matches_the_runtime_launch(exported: list, index: int) -> None:
    result = exported[index]
    spec, header = result.spec, (result.path / f"{result.name}.cuh").read_text()
    runtime = render(spec, result.config, 132)  # what grouped.launch.build renders on a 132-SM GPU
    assert f"inline cudaError_t {result.name}({launcher_params(spec)})" in header
    grid, block = runtime.grid, runtime.block
    assert f"const dim3 grid({grid[0]}, {grid[1]}, {grid[2]}), block({block[0]}, {block[1]}, {block[2]});" in header
    assert f"const size_t smem = {runtime.dynamic_smem};" in header
    passed = re.search(r"void\* args\[\] = \{(.*)\};", header).group(1)
    assert [a.strip().lstrip("&").removeprefix("arg_") for a in passed.split(",")] == list(runtime.args)
    assert f"return cudaErrorInvalidValue;" in header and f"GROUPS = {spec.groups}, TOTAL_M = {spec.total_m}" in header
    for tmap in runtime.tensor_maps:
        assert f"box {tmap.box}" in header and f"dims {tmap.dims}" in header


def test_launcher_parameters_name_offs_or_counts_and_the_bias() -> None:
    assert launcher_params(SPECS[0]) == ("const __nv_bfloat16* A, const __nv_bfloat16* B, const int* offs, "
                                         "const __nv_bfloat16* bias, __nv_bfloat16* D, int groups, int total_m, "
                                         "cudaStream_t stream = 0")
    assert "const int* counts" in launcher_params(SPECS[1]) and "__half* D" in launcher_params(SPECS[1])


def test_harness_rows_are_uneven_and_in_range() -> None:
    ends = harness_rows(SPECS[0])
    assert ends[-1] == 900 and ends == sorted(ends) and len(set(b - a for a, b in zip([0] + ends, ends))) > 2
    assert harness_rows(SPECS[1]) == [0, 21, 42, 64]


@pytest.mark.skipif(find_nvcc() is None, reason="no nvcc")
@pytest.mark.parametrize("index", range(len(SPECS)))
def test_harness_compiles_with_nvcc(exported: list, index: int) -> None:
    assert build_harness(exported[index].path, link=False).is_file()


def test_other_arches_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="sm_90a"):
        export_grouped(SPECS[0], default_config(SPECS[0]), tmp_path / "x", arch="sm_80")


@pytest.mark.parametrize("argv, word", [
    ([], "--out"), (["--out", "X"], "give the group sizes"), (["--out", "X", "--groups", "4"], "go together"),
    (["--out", "X", "--rows", "3,4", "--groups", "2", "--total-m", "7"], "not both"),
    (["--out", "X", "--groups", "4", "--total-m", "30", "--masked"], "capacity"),
    (["--out", "X", "--rows", "8,8", "--config", "[1]"], "JSON object"),
    (["--out", "X", "--rows", "8,8", "--config", '{"bm": 96}'], "bm is 64 or 128")])
def test_export_grouped_refuses_bad_input_in_one_line(argv: list[str], word: str, capsys: pytest.CaptureFixture,
                                                      tmp_path: Path) -> None:
    argv = [str(tmp_path / a) if a == "X" else a for a in argv]
    assert main(["export-grouped", "-n", "256", "-k", "128", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err


def test_export_grouped_command_writes_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "moe"
    assert main(["export-grouped", "-n", "256", "-k", "128", "--tokens", "64", "--experts", "4", "--topk", "2",
                 "--epilogue", "bias", "--config", '{"bm": 64, "bn": 128, "consumers": 1}', "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "config source: given" in text and "(A, B, offs, bias, D, groups, total_m, stream)" in text
    manifest = json.loads((out / "kernel.json").read_text())
    assert manifest["grouped"]["total_m"] == 128 and manifest["grouped"]["config"]["stages"] == 8
