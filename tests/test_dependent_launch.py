"""Dependent launch without a GPU (kernels/parts/dependent_launch.py): which gemv kernels start with
its prologue (sm_90+, the rows kind), the SASS it gives (the early start, the L2 prefetch, the wait
before any other memory access), the flag's JSON round trip, the runtime's launch configuration and
the exported launcher's cudaLaunchKernelExC."""
from __future__ import annotations

import pytest
from sass_dump import sass as dump_sass

from gemmtune.chooser.candidates import UNTUNED_TENSOR_CORE_CONFIG
from gemmtune.compiler import compile_kernel
from gemmtune.export.header import _launcher
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels.gemv.config import GemvConfig
from gemmtune.kernels.gemv.render import depends_on_launch, render
from gemmtune.spec import GemmSpec

DECODE = GemmSpec(16, 4096, 4096, "nt", "bf16")
ROWS_1 = GemmSpec(1, 4096, 4096, "nt", "bf16")  # B stored N×K: the CUDA-core rows kernel
COLUMNS_1 = GemmSpec(1, 4096, 4096, "nn", "fp32")  # B stored K×N: the columns kernel
CUDA_CORE = GemvConfig(threads=256, warps_per_output=8, outputs_per_warp=1, threads_x=8, unroll=2)


@pytest.mark.parametrize("spec, config, arch, expected", [
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_90", True),
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_100", True),
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_80", False),  # griddepcontrol needs sm_90
    (ROWS_1, CUDA_CORE, "sm_90", True),
    (COLUMNS_1, GemvConfig(threads=256, threads_x=32, unroll=2), "sm_90", False),  # no contiguous run of W per block
])
def test_which_kernels_start_with_the_prologue(spec, config, arch, expected):
    source = render(spec, config, arch)
    assert depends_on_launch(spec, arch) is expected
    assert source.dependent_launch is expected
    assert ("griddepcontrol.wait" in source.code) is expected
    assert ("griddepcontrol.launch_dependents" in source.code) is expected


@pytest.mark.parametrize("spec, config", [(DECODE, UNTUNED_TENSOR_CORE_CONFIG), (ROWS_1, CUDA_CORE)])
def test_sass_starts_early_prefetches_then_waits_before_any_load(tmp_path, spec, config):
    """PREEXIT (let the next kernel start), CCTL.E.PF2 (the L2 prefetches), then ACQBULK (the wait)
    before the first global load or store: nothing the previous kernel writes is touched before it."""
    sass = dump_sass(tmp_path, compile_kernel(render(spec, config, "sm_90"), "sm_90").cubin).splitlines()

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(sass) if pattern in line)

    early, prefetch, wait = first("PREEXIT"), first("CCTL.E.PF2"), first("ACQBULK")
    memory = min(i for i, line in enumerate(sass) if "LDG" in line or "STG" in line)
    assert early < prefetch < wait < memory


def test_the_flag_survives_json():
    source = render(DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_90")
    assert KernelSource.from_json(source.to_json()).dependent_launch
    plain = render(DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_80")
    assert "dependent_launch" not in plain.to_json()
    assert not KernelSource.from_json(plain.to_json()).dependent_launch


def test_runtime_launch_configuration_allows_programmatic_serialization():
    pytest.importorskip("cuda.bindings")
    from gemmtune.device import driver
    from gemmtune.runtime import dependent_launch_config

    source = render(DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_90")
    config = dependent_launch_config(source, 0)
    cu = driver()
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == source.grid
    assert (config.blockDimX, config.blockDimY, config.blockDimZ) == source.block
    assert config.numAttrs == 1
    attribute = config.attrs[0]
    assert attribute.id == cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attribute.value.programmaticStreamSerializationAllowed == 1


def test_exported_launcher_launches_with_the_attribute():
    dependent = _launcher("decode", render(DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_90"))
    assert "cudaLaunchKernelExC" in dependent
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in dependent
    plain = _launcher("decode", render(DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_80"))
    assert "cudaLaunchKernelExC" not in plain and "cudaLaunchKernel(" in plain
