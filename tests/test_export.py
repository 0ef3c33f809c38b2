"""Export without a GPU: folder contents, kernel.json round trip, header text, config sources, atomic
writes, the loader's reading side and the `export` verb."""
from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path

import pytest

from gemmtune.cli import main
from gemmtune.errors import GemmtuneError, SpecError
from gemmtune.export import config_source
from gemmtune.export.config_source import choose_config, from_known_configs
from gemmtune.export.header import formula, header_text, launcher_params, split_includes
from gemmtune.export.loader import compiled_from_folder
from gemmtune.export.manifest import ExportManifest, Provenance, file_names, read_manifest
from gemmtune.export.reference import reference_source
from gemmtune.export.writer import export_source, export_spec, write_folder
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels import get_family
from gemmtune.kernels.simt.config import SimtConfig, default_config, ladder, rejections
from gemmtune.spec import GemmSpec

SPEC = GemmSpec(200, 136, 72, layout="nt", epilogue="bias_col+relu+add")


@pytest.fixture
def no_tuning_db(monkeypatch):
    """A tuning database that knows nothing, so tests see the known-configs / default steps."""
    fake = types.ModuleType("gemmtune.tune.db")
    fake.best_known_trial = lambda spec, arch_or_device, db_path=None, family=None: None
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", fake)
    return fake


@pytest.fixture
def exported(tmp_path, no_tuning_db):
    return export_spec(SPEC, tmp_path / "out", arch="sm_90", cache_dir=tmp_path / "cache")


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    name: str
    arch: str


# --- the folder --------------------------------------------------------------------------------
def test_export_writes_every_file(exported):
    names = sorted(p.name for p in exported.path.iterdir())
    assert names == sorted(file_names(SPEC.slug()).values())
    assert exported.manifest.name == SPEC.slug()
    assert (exported.path / f"{SPEC.slug()}.cubin").read_bytes() == exported.compiled.cubin
    assert ".entry" in (exported.path / f"{SPEC.slug()}.ptx").read_text()


def test_kernel_json_round_trips(exported):
    manifest = exported.manifest
    assert ExportManifest.from_json(json.loads(json.dumps(manifest.to_json()))) == manifest
    assert read_manifest(exported.path) == manifest
    data = json.loads((exported.path / "kernel.json").read_text())
    assert data["generator"] == {"family": "simt", "version": manifest.family_version}
    assert data["spec"]["epilogue"] == "bias_col+relu+add" and data["arch"] == "sm_90"
    assert data["config"] == exported.compiled.source.config
    assert set(data["measured"]) == {"time_s", "tflops", "cublas_time_s", "cublas_tflops"}
    assert data["config_source"]["source"] in ("known-configs", "chooser")


def test_kernel_source_json_loads_without_the_generator(exported):
    manifest, compiled = compiled_from_folder(exported.path)
    assert manifest == exported.manifest
    assert compiled.source == exported.compiled.source
    assert compiled.source.content_hash() == exported.compiled.source.content_hash()
    assert compiled.cubin == exported.compiled.cubin and compiled.arch == "sm_90"


def test_measured_times_survive_the_round_trip(tmp_path):
    provenance = Provenance("known-configs", "test row", measured_s=2e-3, cublas_s=1e-3)
    result = export_source(reference_source(SPEC), tmp_path / "o", "sm_80", provenance=provenance,
                           cache_dir=tmp_path / "c")
    data = json.loads((result.path / "kernel.json").read_text())
    assert data["measured"]["time_s"] == 2e-3 and data["measured"]["cublas_tflops"] == pytest.approx(SPEC.flops / 1e-3 / 1e12, rel=1e-3)
    assert read_manifest(result.path).provenance == provenance
    assert "TFLOP/s" in (result.path / "README.md").read_text()


def test_readme_and_cmake_name_the_target(exported):
    readme = (exported.path / "README.md").read_text()
    cmake = (exported.path / "CMakeLists.txt").read_text()
    assert "ReLU(A·B + bias[col]) + C" in readme and "gemmtune.load" in readme
    assert "CUDA_ARCHITECTURES 90)" in cmake and "LANGUAGES CXX CUDA" in cmake


@pytest.mark.parametrize("arch,value,flag", [("sm_80", "80", "-arch=sm_80"), ("sm_90", "90", "-arch=sm_90"),
                                             ("sm_90a", "90a", "-gencode=arch=compute_90a,code=sm_90a")])
def test_cmake_architecture_per_arch(tmp_path, arch, value, flag):
    result = export_source(reference_source(GemmSpec(8, 8, 8)), tmp_path / arch, arch, cache_dir=tmp_path / "c")
    assert f"CUDA_ARCHITECTURES {value})" in (result.path / "CMakeLists.txt").read_text()
    assert flag in (result.path / "main.cu").read_text()


# --- header ------------------------------------------------------------------------------------
@pytest.mark.parametrize("chain,params", [
    ("none", "const float* A, const float* B, float* D, cudaStream_t stream = 0"),
    ("relu+add", "const float* A, const float* B, const float* C, float* D, cudaStream_t stream = 0"),
    ("alpha+bias_row+beta", "const float* A, const float* B, const float* C, const float* bias, float alpha, "
                            "float beta, float* D, cudaStream_t stream = 0"),
])
def test_launcher_signature(chain, params):
    assert launcher_params(GemmSpec(4, 4, 4, epilogue=chain)) == params


def test_header_wraps_the_kernel_and_launches_it(exported):
    text = (exported.path / f"{SPEC.slug()}.cuh").read_text()
    entry = exported.manifest.entry
    assert f"namespace {SPEC.slug()}_kernel {{" in text and f"namespace {SPEC.slug()}_info {{" in text
    assert f"inline cudaError_t {SPEC.slug()}(" in text
    # Arguments packed as the runtime packs them, in the kernel's parameter order.
    assert "void* args[] = {&arg_A, &arg_B, &arg_C, &arg_bias, &arg_D};" in text
    assert f"cudaLaunchKernel({SPEC.slug()}_kernel::{entry}, grid, block, args, smem, stream)" in text
    assert "cudaGetLastError()" in text and "cuTensorMapEncodeTiled" not in text
    assert "cudaFuncSetAttribute" not in text  # static shared memory only


def test_header_opts_in_to_large_dynamic_shared_memory():
    source = dataclasses.replace(reference_source(GemmSpec(8, 8, 8)), dynamic_smem=100 * 1024)
    text = header_text("big_smem", source, "sm_90")
    assert "cudaFuncSetAttribute(big_smem_kernel::" in text and "cudaFuncAttributeMaxDynamicSharedMemorySize" in text
    assert "const size_t smem = 102400;" in text


def test_header_hoists_includes_out_of_the_namespace():
    base = reference_source(GemmSpec(8, 8, 8))
    source = dataclasses.replace(base, code='#include <cuda_fp16.h>\n' + base.code)
    includes, body = split_includes(source.code)
    assert includes == ["#include <cuda_fp16.h>"] and "#include" not in body
    text = header_text("x", source, "sm_90")
    assert text.index("#include <cuda_fp16.h>") < text.index("namespace x_kernel")


@pytest.mark.parametrize("name,fragment", [("9lives", "not a C identifier"), ("a-b", "not a C identifier"),
                                           ("gemm_fp32_nn_8x8x8_reference", "entry name")])
def test_bad_export_names(name, fragment):
    with pytest.raises(SpecError, match=fragment):
        header_text(name, reference_source(GemmSpec(8, 8, 8)), "sm_90")


@pytest.mark.parametrize("chain,text", [("none", "A·B"), ("relu+add", "ReLU(A·B) + C"),
                                        ("alpha+beta", "alpha·A·B + beta·C"),
                                        ("bias_col+alpha", "alpha·(A·B + bias[col])"),
                                        ("add+gelu", "GELU(A·B + C)")])
def test_formula(chain, text):
    assert formula(GemmSpec(2, 2, 2, epilogue=chain)) == text


def test_harness_checks_then_times(exported):
    text = (exported.path / "main.cu").read_text()
    assert f'#include "{SPEC.slug()}.cuh"' in text and '#include "reference.cuh"' in text
    assert "cudaMemset(D, 0xFF" in text  # poisoned output
    assert "gemmtune_reference::launch(A, B, C, bias, R, 0)" in text
    assert text.index("PASS") < text.index("median_ms([&]")
    assert "return ok ? 0 : 1;" in text


# --- config sources ----------------------------------------------------------------------------
def test_known_configs_by_arch_without_a_gpu(no_tuning_db):
    choice = choose_config(GemmSpec(4096, 4096, 4096, math="simt"), "sm_90")
    assert choice.provenance.source == "known-configs" and "H100" in choice.provenance.detail
    assert choice.describe().startswith("config source: known-configs")
    assert choose_config(GemmSpec(4096, 4096, 4096, math="simt"), "sm_80").provenance.detail.startswith("A100")


def test_known_configs_by_gpu_name_and_nearest_shape(no_tuning_db):
    device = FakeDevice("NVIDIA H200", "sm_90")
    # math simt: auto runs fp32 nt this size as 3xtf32 on sm_90 (gemmtune.precision), another family
    choice = choose_config(GemmSpec(3800, 4400, 4096, layout="nt", math="simt"), "sm_90", device)
    assert choice.provenance.detail.startswith("H200 entry for 4096x4096x4096 nt")


def test_far_shapes_go_to_the_chooser_not_the_nearest_known_config(no_tuning_db):
    device = FakeDevice("NVIDIA H200", "sm_90")
    choice = choose_config(GemmSpec(3000, 5000, 4096, layout="nt"), "sm_90", device)
    assert choice.provenance.source == "chooser" and "waves" in choice.provenance.detail
    skinny = choose_config(GemmSpec(64, 4096, 4096, math="simt"), "sm_90", device)
    assert skinny.provenance.source == "chooser" and skinny.config.split_k > 1


def test_unknown_gpu_gets_the_chooser(no_tuning_db):
    spec = GemmSpec(512, 512, 512)
    for arch, device in (("sm_89", None), ("sm_90", FakeDevice("NVIDIA GH999", "sm_90"))):
        choice = choose_config(spec, arch, device)
        assert choice.provenance.source == "chooser" and not rejections(choice.config, spec, arch)


def test_known_config_that_breaks_a_constraint_is_skipped(tmp_path, no_tuning_db):
    bad = SimtConfig(bm=512, bn=512, tm=1, tn=1, wm=0, wn=0)  # far too many threads
    row = {"gpu": "H100", "arch": "sm_90", "m": 64, "n": 64, "k": 64, "layout": "nn", "config": bad.to_json()}
    table = tmp_path / "known.json"
    table.write_text(json.dumps({"format": 1, "family": "simt", "entries": [row]}))
    assert from_known_configs(GemmSpec(64, 64, 64), "sm_90", table=table) is None
    assert choose_config(GemmSpec(64, 64, 64), "sm_90", table=table).provenance.source == "chooser"


def test_shipped_table_is_valid():
    rows = config_source.load_known_configs()
    assert {row.gpu for row in rows} >= {"H100", "H200", "A100"}
    for row in rows:
        config_type = get_family(row.family).config_type
        assert isinstance(row.config, config_type)
        assert row.config.to_json() == config_type.from_json(row.config.to_json()).to_json()


def test_tuning_database_wins(monkeypatch):
    tuned = dict(ladder())["warptiling"]
    seen = {}

    def best_known_trial(spec, arch_or_device, db_path=None, family=None):
        seen.update(spec=spec, target=arch_or_device, db_path=db_path)
        return types.SimpleNamespace(result=types.SimpleNamespace(config=tuned, median_s=1.25e-3))

    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", types.SimpleNamespace(best_known_trial=best_known_trial))
    choice = choose_config(SPEC, "sm_90", FakeDevice("NVIDIA H100 80GB HBM3", "sm_90"), Path("/x/db.sqlite"))
    assert choice.config == tuned and choice.provenance.source == "tuning-db"
    assert choice.provenance.measured_s == 1.25e-3  # the tuned time goes into kernel.json
    assert seen["target"].name.startswith("NVIDIA H100") and seen["db_path"] == Path("/x/db.sqlite")


# --- atomic writes -----------------------------------------------------------------------------
def test_reexport_replaces_the_folder_and_leaves_no_temporaries(tmp_path, exported):
    (exported.path / "stale.txt").write_text("from an older export")
    export_spec(SPEC, exported.path, arch="sm_80", cache_dir=tmp_path / "cache")
    assert not (exported.path / "stale.txt").exists()
    assert read_manifest(exported.path).arch == "sm_80"
    assert sorted(p.name for p in exported.path.parent.iterdir() if p.name.startswith(".")) == []


def test_refuses_to_overwrite_a_folder_that_is_not_an_export(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SpecError, match="not empty"):
        write_folder(tmp_path / "mine", {"a.txt": b"x"})
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_an_out_folder_that_cannot_be_made_is_named_in_one_line(tmp_path, capsys):
    """The staging folder beside --out is an implementation detail: the error names --out, not it."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecError, match="cannot write there"):
        write_folder(tmp_path / "file" / "sub" / "out", {"a.txt": b"x"})
    assert main(["export", "MNK=64", "--out", str(tmp_path / "file" / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {tmp_path / 'file' / 'out'}: cannot write there" in err and ".tmp" not in err


def test_a_failed_write_leaves_the_old_folder_and_no_staging(tmp_path, exported):
    before = sorted(p.name for p in exported.path.iterdir())
    with pytest.raises(FileNotFoundError):
        write_folder(exported.path, {"kernel.json": b"{}", "missing_dir/file": b"x"})
    assert sorted(p.name for p in exported.path.iterdir()) == before
    assert [p.name for p in exported.path.parent.iterdir() if p.name.startswith(".")] == []


# --- loader, reading side ----------------------------------------------------------------------
def test_loader_rejects_folders_that_are_not_exports(tmp_path, exported):
    with pytest.raises(GemmtuneError, match="not a gemmtune export"):
        compiled_from_folder(tmp_path)
    (exported.path / f"{SPEC.slug()}.cubin").unlink()
    with pytest.raises(GemmtuneError, match="cubin is missing"):
        compiled_from_folder(exported.path)


def test_loader_rejects_mismatched_or_foreign_manifests(exported):
    path = exported.path / "kernel_source.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "entry": "other_kernel"}))
    with pytest.raises(GemmtuneError, match="does not match"):
        compiled_from_folder(exported.path)
    manifest = exported.path / "kernel.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": "something-else/9"}))
    with pytest.raises(GemmtuneError, match="format"):
        read_manifest(exported.path)


def test_load_without_a_gpu_says_so(exported):
    from gemmtune import load
    from gemmtune.device import gpu_available
    from gemmtune.errors import NoDeviceError

    if gpu_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoDeviceError):
        load(exported.path)


# --- the export verb ---------------------------------------------------------------------------
def test_cli_export_prints_the_config_source(tmp_path, capsys, no_tuning_db, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code = main(["export", "M=96", "N=64", "K=32", "--epilogue", "relu+add", "--arch", "sm_90a",
                 "--out", str(tmp_path / "o"), "--name", "my_gemm"])
    out = capsys.readouterr().out
    assert code == 0
    assert "config source: chooser" in out and "for sm_90a" in out
    assert read_manifest(tmp_path / "o").name == "my_gemm" and (tmp_path / "o" / "my_gemm.cuh").exists()


def test_cli_export_with_a_given_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["export", "MNK=64", "--config", "coalesced", "--arch", "sm_80", "--out", str(tmp_path / "o")]) == 0
    assert "config source: given (--config (ladder step coalesced))" in capsys.readouterr().out
    assert read_manifest(tmp_path / "o").config["kind"] == "coalesced"


@pytest.mark.parametrize("argv,fragment", [
    (["MNK=64", "--epilogue", "relu+sigmoid"], "unknown epilogue op 'sigmoid'"),
    (["MNK=64", "--epilogue", "relu+relu"], "repeats an op"),
    (["MNK=64", "--arch", "sm_70"], "unknown arch 'sm_70'"),
    (["M=64", "N=64"], "missing size K"),
    (["MNK=64", "--layout", "xx"], "unknown layout"),
    (["MNK=64", "--name", "1st"], "not a C identifier"),
    (["MNK=64", "--config", "{not json"], "--config must be"),
])
def test_cli_export_bad_input_is_one_line(tmp_path, capsys, argv, fragment):
    code = main(["export", *argv, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err and err.count("\n") == 1 and err.startswith("gemmtune: ")
    assert not (tmp_path / "o").exists()


def test_cli_export_needs_out(capsys):
    assert main(["export", "MNK=64"]) == 2
    assert "export needs --out DIR" in capsys.readouterr().err


def test_reference_source_is_a_valid_kernel_source():
    source = reference_source(GemmSpec(5, 7, 3, layout="tn", epilogue="alpha+bias_row+beta"))
    assert isinstance(source, KernelSource) and source.args == ("A", "B", "C", "bias", "alpha", "beta", "D")
    assert source.grid == (1, 1, 1) and source.block == (16, 16, 1)
    assert "A[(size_t)p * M + row]" in source.code and "double acc" in source.code


def test_nvcc_compatible_kernel_options_reach_cmake():
    from gemmtune.export.cmake import cmake_text, nvcc_options

    options = ("--use_fast_math", "-default-device", "-DTILE=4")
    assert nvcc_options(options) == ["--use_fast_math", "-DTILE=4"]
    assert '"$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo;--use_fast_math;-DTILE=4>"' in cmake_text("k", "sm_90", options)
