"""The columns kernel with K split over a cluster (GemvConfig.k_splits), without a GPU: which shapes the
chooser's rule gives it (the rule is off: chooser.candidates.CLUSTER_SPLIT_UNTUNED), what its source declares (the cluster, the early start, the prefetch inside its split),
that it compiles without spills, and that the runtime and the exported launcher allow clusters of 16
(the GPU correctness tests are in test_gpu_gemv_splitk.py and test_gpu_dependent_launch.py)."""
from __future__ import annotations

import pytest

from gemmtune.chooser import choose
from gemmtune.chooser.candidates import SPLIT_WAYS, split_config
from gemmtune.compiler import compile_kernel
from gemmtune.export.header import _launcher
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels import get_family
from gemmtune.kernels.gemv.config import GemvConfig
from gemmtune.kernels.gemv.render import PREFETCH_BYTES, render
from gemmtune.spec import GemmSpec

ONE_VECTOR = GemmSpec(1, 1024, 4096, "nn", "fp32")


@pytest.mark.parametrize("spec, across, unroll", [
    (ONE_VECTOR, 8, 4),  # 32 strips of 128 bytes × 16 splits: 512 blocks
    (GemmSpec(1, 2048, 4096, "nn", "fp32"), 16, 2),  # 16 across still gives 512 blocks
    (GemmSpec(1, 1000, 4100, "nn", "fp32", "bias_col+relu"), 8, 4),
    (GemmSpec(1, 1536, 4096, "nn", "fp32"), 16, 2),  # 24 strips × 16: 2.9 blocks an SM
    (GemmSpec(1, 512, 4096, "tn", "tf32"), 8, 4),  # A transposed: still one vector, B stored K×N
    (GemmSpec(1, 1024, 4096, "nn", "bf16"), 8, 4),  # 2-byte values: 128-byte strips hold 64 outputs
    (GemmSpec(1, 4096, 4096, "nn", "fp16"), 16, 2),  # rows of 8 KB: still split
])
def test_one_vector_of_few_outputs_takes_the_split_on_sm_90_only_while_it_is_on(spec, across, unroll, monkeypatch):
    """The rule's block shape; the chooser picks it only with CLUSTER_SPLIT_UNTUNED on (off since 2026-11-29:
    synccheck's report), and with it off the tuner's space has no split either."""
    import importlib

    candidates = importlib.import_module("gemmtune.chooser.candidates")  # the package re-exports a function of that name

    split = GemvConfig(threads=256, warps_per_output=1, threads_x=across, unroll=unroll, k_splits=SPLIT_WAYS)
    assert split_config(spec, 132) == split
    assert choose(spec, "sm_90a").config.k_splits == 1
    monkeypatch.setattr(candidates, "CLUSTER_SPLIT_UNTUNED", True)
    assert candidates.split_rule(spec, "sm_90a", 132) == split


@pytest.mark.parametrize("spec, arch", [
    (ONE_VECTOR, "sm_80"),  # no clusters
    (ONE_VECTOR, "sm_100"),  # clusters of 16 exist there, but the rule is unmeasured
    (GemmSpec(2, 1024, 4096, "nn", "fp32"), "sm_90a"),  # two vectors wanted another block shape
    (GemmSpec(1, 2560, 4096, "nn", "fp32"), "sm_90a"),  # rows past 8 KB: every split streamed slower
    (GemmSpec(1, 4104, 4096, "nn", "bf16"), "sm_90a"),
    (GemmSpec(1, 1024, 700, "nn", "fp32"), "sm_90a"),  # 16 splits of K = 700 hold under 64 values each
    (GemmSpec(1, 1024, 4096, "nt", "fp32"), "sm_90a"),  # K-contiguous W: the rows kernel
])
def test_other_shapes_and_gpus_keep_their_candidates(spec, arch):
    assert choose(spec, arch).config.k_splits == 1


def test_clusters_of_16_only_where_they_exist():
    family = get_family("gemv")
    sixteen = split_config(ONE_VECTOR, 132)
    for arch in ("sm_90", "sm_90a", "sm_100"):
        assert not family.rejections(sixteen, ONE_VECTOR, arch)
    assert "sm_90 or sm_100" in " ".join(family.rejections(sixteen, ONE_VECTOR, "sm_120").values())
    assert not family.rejections(sixteen.with_(k_splits=8), ONE_VECTOR, "sm_120")
    assert family.rejections(sixteen.with_(k_splits=32), ONE_VECTOR, "sm_90a")


def test_the_split_source_declares_its_cluster_and_starts_early():
    config = split_config(ONE_VECTOR, 132)
    source = render(ONE_VECTOR, config, "sm_90a")
    assert source.grid == (1024 // 32, SPLIT_WAYS, 1) and source.cluster_blocks == SPLIT_WAYS
    assert "__cluster_dims__(1, SPLITS, 1)" in source.code and f"constexpr int SPLITS = {SPLIT_WAYS};" in source.code
    assert source.dependent_launch and "griddepcontrol.wait" in source.code
    # Its prologue asks for the first rows of its own split's share, never past K.
    assert "const int block_k = blockIdx.y * K_SHARE;" in source.code
    assert "min(FIRST_ROWS, K - block_k)" in source.code and "W + (size_t)block_k * P + block_first" in source.code
    assert f"(size_t){PREFETCH_BYTES['columns_split']} / strip_lines" in source.code
    # A block writes into the first block's shared memory only after the whole cluster runs.
    code = source.code
    assert code.index("cluster_arrive_relaxed();") < code.index("cluster_wait();") < code.index(
        "cluster_store(&split_sums")
    assert KernelSource.from_json(source.to_json()).cluster_blocks == SPLIT_WAYS
    plain = render(ONE_VECTOR, config.with_(k_splits=1), "sm_90a")
    assert plain.cluster_blocks == 1 and "cluster_blocks" not in plain.to_json()


@pytest.mark.parametrize("spec", [ONE_VECTOR, GemmSpec(1, 2048, 4096, "nn", "fp32"),
                                  GemmSpec(1, 1000, 4100, "nn", "tf32", "bias_col+relu"),
                                  GemmSpec(1, 4096, 4096, "nn", "bf16", "bias_col+gelu")])
def test_the_split_picks_compile_without_spills(spec):
    compiled = compile_kernel(render(spec, choose(spec, "sm_90a").config, "sm_90a"), "sm_90a")
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, compiled.resources


def test_the_exported_launcher_allows_clusters_of_16():
    split = _launcher("gemv", render(ONE_VECTOR, split_config(ONE_VECTOR, 132), "sm_90a"))
    assert "cudaFuncAttributeNonPortableClusterSizeAllowed" in split and "cudaLaunchKernelExC" in split
    eight = _launcher("gemv", render(ONE_VECTOR, split_config(ONE_VECTOR, 132).with_(k_splits=8), "sm_90a"))
    assert "NonPortableClusterSize" not in eight


def test_the_cost_features_count_the_split_blocks():
    from gemmtune.chooser.features import gemv_geometry

    config = split_config(ONE_VECTOR, 132)
    split, plain = gemv_geometry(ONE_VECTOR, config, 132, None), gemv_geometry(ONE_VECTOR, config.with_(k_splits=1), 132, None)
    assert (split.splits, split.blocks) == (SPLIT_WAYS, plain.blocks * SPLIT_WAYS) and plain.splits == 1
