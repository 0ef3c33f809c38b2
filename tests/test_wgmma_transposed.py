"""tf32 and fp32 (3xtf32) operands stored MN-major on the wgmma family, without a GPU: tf32 wgmma
reads K-major tiles only, so the consumers transpose each stage's MN-major chunks in place in
shared memory; every step that runs them compiles for sm_90a without spills, the others refuse
with the reason."""
import pytest

from gemmtune.compiler import compile_kernel
from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.config import default_config, rejections, supports
from gemmtune.spec import GemmSpec

FAMILY = get_family("wgmma")
COOPERATIVE = ("warp_specialized", "wide_tile", "persistent", "tma_store", "sliced_store", "cluster_multicast")


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_cooperative_steps_transpose_without_spills(layout):
    spec = GemmSpec(1000, 776, 332, layout, "tf32", "relu+add")
    assert supports(spec, "sm_90a") is None
    for step, config in FAMILY.ladder("sm_90a"):
        problems = rejections(config, spec)
        if step not in COOPERATIVE:
            assert "transposed" in problems.get("split", ""), (step, problems)
            continue
        assert "split" not in problems, (step, problems)
        if problems:  # (the TMA store of a C tile: the plain steps' own rules)
            continue
        source = FAMILY.render(spec, config, "sm_90a")
        assert "transpose_stage(" in source.code and "named_barrier(4" in source.code
        assert compile_kernel(source, "sm_90a").resources.spill_store_bytes == 0, step


def test_only_mn_major_operands_are_transposed():
    config = default_config(GemmSpec(1000, 776, 332, "nt", "tf32"))
    for layout, calls in (("nt", 0), ("nn", 1), ("tt", 1), ("tn", 2)):
        code = FAMILY.render(GemmSpec(1000, 776, 332, layout, "tf32"), config, "sm_90a").code
        assert code.count("    transpose_chunks(reinterpret_cast") == calls, layout


def test_mn_major_boxes_are_one_128_byte_row_wide():
    """An fp32 MN-major box is 32 values wide (128 bytes, the swizzle's row), the chunk the
    consumers transpose; 16-bit ones stay 64 wide."""
    spec = GemmSpec(1000, 776, 332, "tn", "tf32")
    a, b = FAMILY.render(spec, default_config(spec), "sm_90a").tensor_maps[:2]
    assert a.box == (32, 32) and b.box == (32, 32) and a.dims == (1000, 332)
    half = GemmSpec(1000, 776, 336, "tn", "bf16")
    assert FAMILY.render(half, default_config(half), "sm_90a").tensor_maps[0].box == (64, 64)


def test_transposed_source_is_deterministic():
    spec = GemmSpec(1000, 776, 332, "nn", "tf32", "bias_row+gelu")
    config = default_config(spec)
    assert FAMILY.render(spec, config, "sm_90a").code == FAMILY.render(spec, config, "sm_90a").code
