"""An exported folder builds with nvcc (the pip wheel's, or one on PATH) and with CMake — no GPU needed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gemmtune.export.toolchain import Nvcc, build_harness, find_nvcc, harness_command, wheel_nvcc_candidates
from gemmtune.export.writer import export_spec
from gemmtune.spec import GemmSpec

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc: pip install 'nvidia-cuda-nvcc>=13.0,<14' "
                                                     "'nvidia-cuda-runtime>=13.0,<14'")


@pytest.fixture(autouse=True)
def no_tuning_db(monkeypatch):
    fake = types.ModuleType("gemmtune.tune.db")
    fake.best_known_trial = lambda spec, arch_or_device, db_path=None, family=None: None
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", fake)


def _export(tmp_path: Path, spec: GemmSpec, arch: str, name: str | None = None) -> Path:
    out = tmp_path / (name or arch)
    return export_spec(spec, out, arch=arch, name=name, cache_dir=tmp_path / "cache").path


def test_harness_command(tmp_path):
    folder = _export(tmp_path, GemmSpec(64, 64, 64), "sm_90a")
    command = harness_command(folder, Nvcc(Path("/opt/nvcc"), "PATH"))
    # sm_90a: exactly that SASS from compute_90a PTX (-arch=sm_90a also embeds compute_90 PTX)
    assert command[:5] == ["/opt/nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-lineinfo"]
    assert command[-3:] == ["main.cu", "-o", "gemm_fp32_nn_64x64x64_check"]
    assert harness_command(folder, Nvcc(Path("nvcc"), "PATH"), link=False)[-3:] == ["-c", "-o",
                                                                                    "gemm_fp32_nn_64x64x64_check.o"]


def test_the_wheel_nvcc_is_preferred_when_installed():
    wheel = [c for c in wheel_nvcc_candidates() if c.is_file()]
    if not wheel:
        pytest.skip("the nvidia-cuda-nvcc wheel is not installed")
    assert NVCC is not None and NVCC.origin == "pip wheel" and NVCC.path == wheel[0]
    assert NVCC.version().startswith("13.")


@needs_nvcc
@pytest.mark.parametrize("arch,layout,chain", [("sm_80", "tn", "alpha+beta"), ("sm_90", "nt", "bias_col+gelu"),
                                               ("sm_90a", "nn", "relu+add")])
def test_harness_compiles_and_links(tmp_path, arch, layout, chain):
    folder = _export(tmp_path, GemmSpec(300, 260, 70, layout=layout, epilogue=chain), arch)
    executable = build_harness(folder, NVCC)
    assert executable.is_file() and os.access(executable, os.X_OK)


@needs_nvcc
def test_two_exported_headers_live_in_one_program(tmp_path):
    """Namespacing keeps each kernel's M, N, K, tiles and helpers apart."""
    first = _export(tmp_path, GemmSpec(64, 32, 16, epilogue="gelu"), "sm_90", "first_gemm")
    second = _export(tmp_path, GemmSpec(48, 80, 8, layout="tt", epilogue="bias_row+gelu"), "sm_90", "second_gemm")
    program = tmp_path / "both.cu"
    program.write_text(f'#include "{first}/first_gemm.cuh"\n#include "{second}/second_gemm.cuh"\n'
                       "static_assert(first_gemm_info::M == 64 && second_gemm_info::M == 48, \"shapes\");\n"
                       "cudaError_t run(const float* a, const float* b, const float* bias, float* d) {\n"
                       "    cudaError_t e = first_gemm(a, b, d);\n"
                       "    return e != cudaSuccess ? e : second_gemm(a, b, bias, d);\n}\n")
    done = subprocess.run([str(NVCC.path), "-arch=sm_90", "-std=c++17", "-c", str(program), "-o",
                           str(tmp_path / "both.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_nvcc
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_builds_the_harness(tmp_path):
    folder = _export(tmp_path, GemmSpec(129, 64, 33, epilogue="relu+add"), "sm_90a")
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(folder), "-B", str(build), f"-DCMAKE_CUDA_COMPILER={NVCC.path}"],
                               capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    compiled = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert (build / "gemm_fp32_nn_129x64x33_relu_add_check").is_file()


@needs_nvcc
def test_harness_fails_cleanly_without_a_gpu(tmp_path):
    from gemmtune.device import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU; tests/test_gpu_export.py runs the harness")
    executable = build_harness(_export(tmp_path, GemmSpec(16, 16, 16), "sm_90"), NVCC)
    done = subprocess.run([str(executable)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "CUDA error" in done.stderr
