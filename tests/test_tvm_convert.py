"""TVM output -> KernelSource: NVRTC-ready text, launch extents, argument order."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tvm")
pytestmark = pytest.mark.tvm

import tvm

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernel_source import KernelSource
from gemmtune.spec import GemmSpec
from gemmtune.tvm import convert, workloads
from gemmtune.tvm.schedules import named_schedule, named_source

TVM_HEADER = """\
#ifdef __CUDACC_RTC__
  #include <cuda/std/cstdint>
  using cuda::std::uint8_t;
#else
  #include <cstdint>
  #include <cuda.h>
#endif
#ifdef _WIN32
  using uint = unsigned int;
#else
  #define uint unsigned int
#endif
extern "C" __global__ void k(float* __restrict__ D_ptr) { D_ptr[threadIdx.x] = (uint)threadIdx.x; }
"""


def test_nvrtc_ready_drops_tvm_include_block_and_keeps_the_rest() -> None:
    text = convert.nvrtc_ready(TVM_HEADER)
    assert "#include" not in text and "cuda::std" not in text
    assert "#define uint unsigned int" in text and "typedef unsigned int uint32_t;" in text
    assert 'extern "C" __global__ void k' in text


def test_nvrtc_ready_refuses_headers_it_cannot_replace() -> None:
    with pytest.raises(ConfigError, match="cuda_fp16.h"):
        convert.nvrtc_ready("#include <cuda_fp16.h>\n" + TVM_HEADER)


def test_multi_axis_launch_dims_from_dlight(tmp_path: Path) -> None:
    spec = GemmSpec(512, 256, 128, "nt")
    source = named_source(spec, "dlight")
    assert source.threads > 32 and source.block[1] > 1  # dlight binds threadIdx.x and threadIdx.y
    assert source.grid[0] * source.grid[1] > 1
    compile_kernel(source, "sm_90", tmp_path)


def _bound_vector_add(n: int, threads: int) -> tvm.IRModule:
    sch = tvm.s_tir.Schedule(workloads.module(workloads.vector_add(n)))
    block, thread = sch.split(sch.get_loops(sch.get_sblock("add"))[0], [None, threads])
    sch.bind(block, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    return sch.mod


def test_build_cuda_reads_entry_params_and_extents() -> None:
    built = convert.build_cuda(_bound_vector_add(1000, 128), "sm_80", symbol="vadd")
    (kernel,) = built.kernels
    assert kernel.entry == "vadd_kernel" and kernel.params == ("A", "B", "C")
    assert kernel.grid == (8, 1, 1) and kernel.block == (128, 1, 1)


def test_non_gemm_parameters_are_rejected() -> None:
    built = convert.build_cuda(_bound_vector_add(64, 64), "sm_90")
    # C and D are both GEMM names, but this kernel has no D: a plain GEMM source needs A, B, D.
    with pytest.raises(ConfigError):
        convert.to_kernel_source(built, GemmSpec(8, 8, 8), {})


def test_kernel_source_round_trips_through_json() -> None:
    spec = GemmSpec(256, 256, 64, epilogue="relu+add")
    source = named_source(spec, "manual")
    again = KernelSource.from_json(source.to_json())
    assert again == source and again.content_hash() == source.content_hash()
    assert source.family == "tvm" and source.config["step"] == "epilogue_fusion"


def test_signature_must_match_the_lowered_parameter_order() -> None:
    spec = GemmSpec(256, 256, 64)
    built = convert.build_cuda(named_schedule(spec, "manual").mod, "sm_90", symbol="g")
    (kernel,) = built.kernels
    swapped = convert.TvmBuild(built.cuda, (convert.TvmKernel(kernel.entry, ("B", "A", "D"), kernel.grid,
                                                              kernel.block),), built.arch)
    with pytest.raises(ConfigError, match="lowered IR"):
        convert.to_kernel_source(swapped, spec, {})
