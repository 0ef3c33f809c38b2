"""Dependent launch without a GPU (kernels/parts/dependent_launch.py): which gemv kernels start with
its prologue (sm_90+, all but the columns kernel on tensor cores), the SASS it gives (the early start, the L2 prefetch, the wait
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
COLUMNS_16 = GemmSpec(16, 4096, 4096, "nn", "fp32")  # 16 vectors: the columns kernel in quads
QUADS = GemvConfig(threads=512, threads_x=8, unroll=1)
TENSOR_COLUMNS = GemmSpec(16, 4096, 4096, "nn", "tf32")


@pytest.mark.parametrize("spec, config, arch, expected", [
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_90", True),
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_100", True),
    (DECODE, UNTUNED_TENSOR_CORE_CONFIG, "sm_80", False),  # griddepcontrol needs sm_90
    (ROWS_1, CUDA_CORE, "sm_90", True),
    (COLUMNS_1, GemvConfig(threads=256, threads_x=32, unroll=2), "sm_90", True),  # a strip of W's first rows
    (COLUMNS_1, GemvConfig(threads=256, threads_x=32, unroll=2), "sm_80", False),
    # Columns on CUDA cores start early only for one vector and 4096 outputs or more (measured).
    (COLUMNS_16, QUADS, "sm_90", False),
    (GemmSpec(8, 4096, 4096, "nn", "fp32"), GemvConfig(threads=256, threads_x=4, unroll=1), "sm_90", False),
    (GemmSpec(1, 1024, 4096, "nn", "fp32"), GemvConfig(threads=1024, threads_x=2, unroll=8), "sm_90", False),
    (GemmSpec(1, 32000, 4096, "nn", "fp32"), GemvConfig(threads=512, threads_x=32, unroll=2), "sm_90", True),
    # The columns kernel on tensor cores: its warps start at spans far apart along K.
    (TENSOR_COLUMNS, GemvConfig(threads=256, warps_per_output=8, tensor_cores=True, mma_tiles=4), "sm_90", False),
])
def test_which_kernels_start_with_the_prologue(spec, config, arch, expected):
    source = render(spec, config, arch)
    assert depends_on_launch(spec, arch, config) is expected
    assert source.dependent_launch is expected
    assert ("griddepcontrol.wait" in source.code) is expected
    assert ("griddepcontrol.launch_dependents" in source.code) is expected


@pytest.mark.parametrize("spec, config", [(DECODE, UNTUNED_TENSOR_CORE_CONFIG), (ROWS_1, CUDA_CORE),
                                          (COLUMNS_1, GemvConfig(threads=256, threads_x=32, unroll=2))])
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


@pytest.mark.parametrize("p, k, cols, first_rows, size", [(4096, 4096, 32, 256, 4), (1000, 4096, 32, 256, 4),
                                                           (1030, 10, 512, 64, 2), (8, 4096, 8, 2048, 4)])
def test_the_columns_prefetch_stays_inside_the_blocks_strip(p, k, cols, first_rows, size):
    """_columns_start's arithmetic and prefetch_rows_to_l2's addresses, in Python: every line asked for
    lies in a row the first step reads and inside the block's strip of outputs (the last block's is
    narrower), and the lines stay within the budget (at least one row)."""
    from gemmtune.kernels.gemv.render import PREFETCH_BYTES

    budget = PREFETCH_BYTES["columns"]
    assert f"(size_t){budget} / strip_lines" in render(COLUMNS_1, GemvConfig(threads=256, threads_x=32, unroll=2),
                                                      "sm_90").code
    for block in range(-(-p // cols)):
        first = block * cols
        strip = min(cols, p - first) * size
        rows = min(first_rows, k, max(1, budget // (-(-strip // 128) * 128)))
        head = min(strip, budget // rows)  # dependent_launch.prologue's prefetch_head
        lines = -(-head // 128)
        asked = set()
        for i in range(rows * lines):
            row, line = divmod(i, lines)
            at = first * size + row * p * size + min(line * 128, head - 1)
            asked.add(at)
            assert row < min(first_rows, k) and first * size <= at - row * p * size < first * size + strip
        assert len(asked) * 128 <= max(budget, 128 * lines)


def test_one_vector_prefetch_budget_halves_from_32_mb():
    """One vector on the CUDA-core rows kernel asks L2 for 4 KB a block where W is 32 MB or more, 8 KB below
    (render.prefetch_budget, measured back to back); other kernels keep PREFETCH_BYTES."""
    from gemmtune.chooser.candidates import ONE_VECTOR_ROWS_CONFIG
    from gemmtune.kernels.gemv.render import ONE_VECTOR_LARGE_W_PREFETCH, PREFETCH_BYTES, prefetch_budget

    config = ONE_VECTOR_ROWS_CONFIG[2]
    small, large = GemmSpec(1, 1024, 4096, "nt", "bf16"), ROWS_1  # 8 MB and 32 MB of W
    assert prefetch_budget(large, "cuda_cores") == ONE_VECTOR_LARGE_W_PREFETCH == 4096
    assert prefetch_budget(small, "cuda_cores") == PREFETCH_BYTES["cuda_cores"] == 8192
    assert prefetch_budget(DECODE, "tensor_cores") == PREFETCH_BYTES["tensor_cores"]
    assert "(size_t)4096 / (block_rows)" in render(large, config, "sm_90").code
    assert "(size_t)8192 / (block_rows)" in render(small, config, "sm_90").code
