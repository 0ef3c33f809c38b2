"""Export of 16-bit kernels and of kernels that take TMA descriptors: the C++ text, and nvcc building it.

The kernels here are hand-made KernelSources (a tiny kernel in plain CUDA), so these tests need
neither a GPU nor a tensor-core family: they check what the exporter writes around any kernel.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmtune.compiler import CompiledKernel, ResourceUsage
from gemmtune.export.cmake import cmake_text
from gemmtune.export.harness import harness_text
from gemmtune.export.header import header_text, launcher_params
from gemmtune.export.manifest import Provenance
from gemmtune.export.reference import reference_header
from gemmtune.export.toolchain import Nvcc, build_harness, find_nvcc, harness_command
from gemmtune.export.writer import export_files, write_folder
from gemmtune.kernel_source import KernelSource, TensorMapArg
from gemmtune.spec import GemmSpec

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc: pip install '.[test]'")

# One thread writes D[0]: enough for nvcc to check the types the launcher passes.
PLAIN_KERNEL = r"""#include <cuda_bf16.h>
extern "C" __global__ void probe(const __nv_bfloat16* A, const __nv_bfloat16* B, const __nv_bfloat16* C, float alpha,
                                 __nv_bfloat16* D) {
    if (threadIdx.x == 0 && blockIdx.x == 0) D[0] = __float2bfloat16_rn(alpha * __bfloat162float(A[0]));
}
"""
# Like a wgmma kernel: tensor maps as 128 opaque bytes (NVRTC has no <cuda.h>), passed by value.
TMA_KERNEL = r"""struct alignas(64) TmaDescriptor { unsigned long long opaque[16]; };
extern "C" __global__ void probe_tma(const __grid_constant__ TmaDescriptor tma_A,
                                     const __grid_constant__ TmaDescriptor tma_B, float* D) {
    if (threadIdx.x == 0 && blockIdx.x == 0) D[0] = (float)(tma_A.opaque[0] & 1) + (float)(tma_B.opaque[0] & 1);
}
"""


def _compiled(source: KernelSource, arch: str = "sm_90a") -> CompiledKernel:
    return CompiledKernel(source, arch, b"not a cubin", "// ptx", ResourceUsage(32, 0, 0, 0, 0), "", 0.0, "13.0")


def bf16_source() -> KernelSource:
    spec = GemmSpec(100, 72, 40, "nt", "bf16", "alpha+add")
    return KernelSource(PLAIN_KERNEL, "probe", (1, 1, 1), (32, 1, 1), ("A", "B", "C", "alpha", "D"), spec, "handmade",
                        "1")


def tma_source() -> KernelSource:
    """A tf32 kernel reading A (M×K, K-major) and B (N×K) through 128-byte-swizzled tensor maps."""
    spec = GemmSpec(300, 200, 136, "nt", "tf32")
    maps = (TensorMapArg("tma_A", "A", "fp32", (136, 300), (136 * 4,), (32, 128)),
            TensorMapArg("tma_B", "B", "fp32", (136, 200), (136 * 4,), (32, 64)))
    return KernelSource(TMA_KERNEL, "probe_tma", (3, 2, 1), (384, 1, 1), ("tma_A", "tma_B", "D"), spec, "handmade",
                        "1", dynamic_smem=100 * 1024, tensor_maps=maps)


def _write(tmp_path: Path, source: KernelSource, name: str) -> Path:
    files = export_files(name, _compiled(source), Provenance("given", "a hand-made kernel"))
    write_folder(tmp_path / name, files)
    return tmp_path / name


# --- 16-bit types ----------------------------------------------------------------------------------
def test_launcher_takes_each_operand_in_its_storage_type():
    assert launcher_params(GemmSpec(4, 4, 4, dtype="fp16", epilogue="bias_row")) == (
        "const __half* A, const __half* B, const __half* bias, __half* D, cudaStream_t stream = 0")
    assert launcher_params(GemmSpec(4, 4, 4, dtype="bf16", out_dtype="fp32", epilogue="add")) == (
        "const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D, cudaStream_t stream = 0")
    assert launcher_params(GemmSpec(4, 4, 4, dtype="tf32")) == (
        "const float* A, const float* B, float* D, cudaStream_t stream = 0")


def test_bf16_header_includes_the_type_and_packs_arguments():
    text = header_text("bf16_gemm", bf16_source(), "sm_90a")
    assert text.count("#include <cuda_bf16.h>") == 1  # the kernel's own include is not repeated
    assert "const void* arg_A = A;" in text and "float arg_alpha = alpha;" in text
    assert "void* args[] = {&arg_A, &arg_B, &arg_C, &arg_alpha, &arg_D};" in text
    assert "A, B bf16, D (and C/bias) bf16, accumulated in fp32" in text


def test_16_bit_harness_rounds_inputs_and_checks_with_the_output_ulp():
    spec = GemmSpec(100, 72, 40, "nt", "fp16", "bias_col")
    text = harness_text("h", spec, "sm_90a")
    assert "#include <cuda_fp16.h>" in text and "__float2half_rn" in text
    assert "__half* A = random_device_buffer<__half>((size_t)M * K, 1);" in text
    assert "__half* bias = random_device_buffer<__half>((size_t)N, 3);" in text
    assert "using out_t = __half;" in text
    assert "const double tolerance = 8 * FLT_EPSILON * std::sqrt((double)K) + 2.0 * 0x1p-11;" in text
    fp32_out = harness_text("h", GemmSpec(8, 8, 8, dtype="bf16", out_dtype="fp32"), "sm_90a")
    assert "using out_t = float;" in fp32_out and "0x1p-8" not in fp32_out
    assert "4.0 * 0x1p-10" in harness_text("h", GemmSpec(8, 8, 8, dtype="tf32"), "sm_90")


def test_fp32_harness_needs_no_half_headers():
    text = harness_text("h", GemmSpec(8, 8, 8), "sm_90")
    assert "cuda_fp16.h" not in text and "using out_t = float;" in text
    assert "cuda_fp16.h" not in reference_header(GemmSpec(8, 8, 8))


def test_16_bit_reference_reads_through_float_views():
    text = reference_header(GemmSpec(33, 17, 9, "tn", "bf16", "bias_row+beta"))
    assert "const FloatView<__nv_bfloat16> C{C_stored};" in text
    assert "D[(size_t)row * N + col] = from_float<__nv_bfloat16>(v);" in text
    assert "inline cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, const __nv_bfloat16* C," in text


@needs_nvcc
def test_bf16_export_builds_and_links(tmp_path):
    folder = _write(tmp_path, bf16_source(), "bf16_gemm")
    executable = build_harness(folder, NVCC)
    assert executable.is_file()


# --- tensor maps -----------------------------------------------------------------------------------
def test_launcher_builds_each_tensor_map_from_its_description():
    text = header_text("tma_gemm", tma_source(), "sm_90a")
    assert "#include <cuda.h>" in text
    assert text.count("cuTensorMapEncodeTiled(") == 2
    assert "const cuuint64_t dims[2] = {(cuuint64_t)136, (cuuint64_t)300};" in text
    assert "const cuuint64_t strides[1] = {(cuuint64_t)544};" in text
    assert "const cuuint32_t box[2] = {(cuuint32_t)32, (cuuint32_t)128};" in text
    assert "const cuuint32_t element_strides[2] = {(cuuint32_t)1, (cuuint32_t)1};" in text
    assert "&tma_A, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<void*>(static_cast<const void*>(A))" in text
    for flag in ("CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
                 "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"):
        assert text.count(flag) == 2
    assert "void* args[] = {&tma_A, &tma_B, &arg_D};" in text  # the 128-byte maps go by value
    assert "cudaFuncSetAttribute(" in text  # 100 KiB of dynamic shared memory


def test_tensor_map_export_links_the_driver(tmp_path):
    assert "target_link_libraries(g_check PRIVATE CUDA::cuda_driver)" in cmake_text("g", "sm_90a", driver_api=True)
    assert "cuda_driver" not in cmake_text("g", "sm_90a")
    folder = _write(tmp_path, tma_source(), "tma_gemm")
    assert "CUDA::cuda_driver" in (folder / "CMakeLists.txt").read_text()
    command = harness_command(folder, Nvcc(Path("nvcc"), "PATH"))
    assert command[-3:] == ["-lcuda", "-o", "tma_gemm_check"]
    assert "-lcuda" not in harness_command(folder, Nvcc(Path("nvcc"), "PATH"), link=False)


@needs_nvcc
def test_tensor_map_export_compiles(tmp_path):
    """Compile only: linking needs libcuda, which a machine without a driver lacks."""
    folder = _write(tmp_path, tma_source(), "tma_gemm")
    assert build_harness(folder, NVCC, link=False).is_file()


@needs_nvcc
def test_a_tensor_core_family_export_compiles(tmp_path, monkeypatch):
    """The registry's choice for bf16 on sm_90a, exported: its launcher encodes the tensor maps."""
    import sys
    import types

    from gemmtune.errors import ConfigError
    from gemmtune.export.writer import export_spec
    from gemmtune.kernels import family_for

    spec = GemmSpec(300, 200, 136, "nt", "bf16", "relu+add")
    try:
        family = family_for(spec, "sm_90a")
    except ConfigError as err:
        pytest.skip(f"no family for bf16 on sm_90a here: {err}")
    fake_db = types.SimpleNamespace(best_known_trial=lambda spec, target, db_path=None, family=None: None)
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", fake_db)
    result = export_spec(spec, tmp_path / "out", "sm_90a", cache_dir=tmp_path / "cache")
    header = (result.path / f"{spec.slug()}.cuh").read_text()
    assert result.manifest.family == family.name
    assert header.count("cuTensorMapEncodeTiled(") == len(result.compiled.source.tensor_maps)
    assert build_harness(result.path, NVCC, link=False).is_file()
