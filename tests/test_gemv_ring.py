"""The columns kernel fed by TMA through a ring of shared-memory stages (GemvConfig.ring_stages), without a
GPU: which shapes the chooser gives it, what the family refuses, what its source and KernelSource declare
(tensor maps, the producer warp, the ring's shared memory, the early start), that it compiles without spills
under the device's NVRTC, and that configs without it are as before (the GPU tests are in
test_gpu_gemv_splitk.py, test_gpu_dependent_launch.py, test_gpu_export.py and test_gpu_sanitizer.py)."""
from __future__ import annotations

import pytest

from gemmtune.chooser import choose
from gemmtune.chooser.candidates import RING_CONFIG, ring_config
from gemmtune.chooser.features import gemv_geometry
from gemmtune.compiler import compile_kernel
from gemmtune.kernels import get_family
from gemmtune.kernels.gemv.config import GemvConfig, ring_smem_bytes, ring_stage_rows
from gemmtune.kernels.gemv.render import render
from gemmtune.spec import GemmSpec

SIXTEEN = GemmSpec(16, 4096, 4096, "nn", "fp32")


@pytest.mark.parametrize("spec, across, unroll", [
    (SIXTEEN, 8, 1),  # 128 strips of 32 outputs: one block an SM
    (GemmSpec(16, 14336, 4096, "nn", "fp32"), 16, 1),  # 224 strips of 64: 1.7 rounds
    (GemmSpec(16, 11008, 4096, "nn", "fp32"), 8, 1),  # 16 across: 172 blocks, 1.3 rounds (unbalanced)
    (GemmSpec(16, 2048, 4096, "nn", "fp32"), 4, 1),
    (GemmSpec(8, 4096, 4096, "nn", "fp32"), 8, 2),  # up to 12 vectors: two quads a thread a stage
    (GemmSpec(12, 4096, 4096, "nn", "tf32", "bias_row+relu"), 8, 2),  # tf32: before the tensor-core kernel
    (GemmSpec(9, 1700, 1076, "nn", "fp32"), 4, 1),  # 4 across: unroll 2 would make 512-row stages
    (GemmSpec(2, 4096, 4096, "nn", "fp32"), 8, 2),  # 2-7 vectors: 128-byte strips, at most one an SM
    (GemmSpec(6, 2048, 4096, "nn", "fp32"), 8, 2),
    (GemmSpec(4, 4096, 11008, "nn", "tf32"), 8, 2),
])
def test_vectors_in_quads_take_the_ring_on_sm_90(spec, across, unroll):
    pick = choose(spec, "sm_90a").config
    assert pick == RING_CONFIG.with_(threads_x=across, unroll=unroll) == ring_config(spec, 132)
    assert ring_stage_rows(pick) <= 256


@pytest.mark.parametrize("spec, arch", [
    (SIXTEEN, "sm_80"),  # no TMA
    (SIXTEEN, "sm_100"),  # TMA there, the rule unmeasured
    (GemmSpec(4, 4256, 4096, "nn", "fp32"), "sm_90a"),  # 2-7 vectors: 133 strips of 32 outputs on 132 SMs
    (GemmSpec(2, 11008, 4096, "nn", "fp32"), "sm_90a"),
    (GemmSpec(16, 1000, 4100, "nn", "fp32"), "sm_90a"),  # no strip width gives blocks enough: it lost there
    (GemmSpec(16, 4096, 4098, "nn", "fp32"), "sm_90a"),  # K not a multiple of 4: no quads, no 16-byte rows for TMA
    (GemmSpec(16, 4096, 4096, "nn", "bf16"), "sm_90a"),  # 2-byte values: not this kernel
    (GemmSpec(16, 4096, 4096, "tn", "fp32"), "sm_90a"),  # A stored K×M: no quads
    (GemmSpec(16, 4096, 4096, "nt", "tf32"), "sm_90a"),  # K-contiguous W: the rows kernel
])
def test_other_shapes_and_gpus_keep_their_picks(spec, arch):
    assert getattr(choose(spec, arch).config, "ring_stages", 0) == 0  # (bf16: not even the gemv family)


def test_3xtf32_columns_gemvs_pick_the_tensor_core_kernel():
    """math 3xtf32 runs only on the tensor-core path: the chooser used to be left with no candidate."""
    pick = choose(GemmSpec(16, 4096, 4096, "nn", "fp32", math="3xtf32"), "sm_90a").config
    assert pick.tensor_cores and pick.ring_stages == 0


def test_the_family_refuses_what_the_ring_cannot_run():
    family = get_family("gemv")
    good = RING_CONFIG.with_(threads_x=8, unroll=1)
    assert not family.rejections(good, SIXTEEN, "sm_90")

    def why(config, spec=SIXTEEN, arch="sm_90a") -> str:
        return " ".join(family.rejections(config, spec, arch).values())

    assert "sm_90 and later" in why(good, arch="sm_80")
    assert "256-row box" in why(good.with_(unroll=4))  # 4 × 4 × 32 = 512 rows a stage
    assert "1024 threads" not in why(good) and "at most 512 consumer threads" in why(good.with_(threads=1024))
    assert "ring_stages=5" in why(good.with_(ring_stages=5))
    assert "shared memory" in why(good.with_(unroll=2, ring_stages=8))  # 8 × 48 KB
    assert "not with tensor_cores or k_splits" in why(good.with_(k_splits=2))
    assert "quads over fp32 or tf32" in why(good, GemmSpec(16, 4096, 4096, "nn", "bf16"))
    assert "quads over fp32 or tf32" in why(good, GemmSpec(16, 4096, 4096, "tn", "fp32"))
    # 512 consumer threads and a producer warp are 17 warps: 5 on one of the SM's four register partitions,
    # so ptxas has 96 registers a thread, under what 16 vectors' sums need.
    assert "registers" in why(good.with_(threads=512, threads_x=16))
    assert not family.rejections(good.with_(threads=512, threads_x=16), GemmSpec(8, 4096, 4096, "nn", "fp32"), "sm_90a")


def test_the_ring_source_declares_its_maps_producer_and_early_start():
    spec = GemmSpec(16, 2052, 4100, "nn", "fp32", "bias_col+gelu+add")
    config = ring_config(spec, 132)
    source = render(spec, config, "sm_90a")
    assert source.block == (config.threads + 32, 1, 1)  # the producer warp after the consumers
    assert source.grid == (-(-2052 // (4 * config.threads_x)), 1, 1)
    assert source.dynamic_smem == ring_smem_bytes(config, spec) == 4 * 4 * 256 * (16 + 16)
    assert source.dependent_launch and source.cluster_blocks == 1
    assert source.args[-2:] == ("tma_x", "tma_W")
    x_map, w_map = source.tensor_maps
    assert (x_map.operand, x_map.dims, x_map.box) == ("A", (4100, 16), (256, 16))
    assert (w_map.operand, w_map.dims, w_map.strides, w_map.box) == ("B", (2052, 4100), (2052 * 4,), (16, 256))
    code = source.code
    for piece in ("cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity", "griddepcontrol.wait",
                  "cp.async.bulk.prefetch.tensor.2d.L2", "const __grid_constant__ TmaDescriptor tma_W",
                  "bar.sync 1, %0", "apply_epilogue"):
        assert piece in code, piece


@pytest.mark.parametrize("spec", [SIXTEEN, GemmSpec(16, 14336, 4096, "nn", "fp32", "alpha+beta+bias_col+relu"),
                                  GemmSpec(8, 4096, 4096, "nn", "tf32"), GemmSpec(9, 1700, 1076, "nn", "fp32")])
def test_the_rule_compiles_without_spills(spec):
    compiled = compile_kernel(render(spec, choose(spec, "sm_90a").config, "sm_90a"), "sm_90a")
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0


def test_configs_without_the_ring_are_as_before():
    plain = GemvConfig(threads=512, threads_x=8, unroll=1)
    assert "ring_stages" not in plain.to_json() and "TMA" not in plain.describe()
    ring = plain.with_(threads=256, ring_stages=4)
    assert ring.to_json()["ring_stages"] == 4 and "TMA ring of 4 stages" in ring.describe()
    source = render(SIXTEEN, plain, "sm_90a")
    assert not source.tensor_maps and source.dynamic_smem == 0 and "mbarrier" not in source.code


def test_the_features_count_the_producer_warp_and_the_ring():
    config = ring_config(SIXTEEN, 132)
    geometry = gemv_geometry(SIXTEEN, config, 132, None)
    assert geometry.threads == config.threads + 32 and geometry.blocks == 128
    assert geometry.smem_bytes == ring_smem_bytes(config, SIXTEEN)


def _stages_in_space(spec: GemmSpec) -> set[int]:
    import numpy as np

    from gemmtune.tune.space import space_for, valid_codes

    space = space_for("gemv")
    axis = space.axis("ring_stages")
    codes = valid_codes(space, spec, "sm_90a")
    return {space.params[axis].domain[i] for i in set(np.unravel_index(codes, space.shape)[axis].tolist())}


def test_the_space_holds_ring_configs_for_the_shapes_that_take_them():
    assert _stages_in_space(SIXTEEN) == {0, 2, 3, 4, 6, 8}
    assert _stages_in_space(GemmSpec(16, 4096, 4096, "nt", "fp32")) == {0}
