"""Grouped GEMM (issue 69) without a GPU: the spec, the tile scheduler's twin, NVRTC compiles, shapes."""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.errors import ConfigError, SpecError
from gemmtune.grouped import GroupedConfig, GroupedSpec, candidates, default_config, group_offsets, reference, rejections
from gemmtune.grouped.render import render, tensor_maps
from gemmtune.grouped.schedule import plan

ZIPF = [int(x) for x in np.minimum(np.random.default_rng(7).zipf(1.5, 128), 2000)]
SIZES = [(700, 120, 64, 900, 33, 410, 256, 1), (0, 5, 0, 1, 64, 0), (0,), (1,), tuple(ZIPF)]


@pytest.mark.parametrize("kwargs, word", [
    (dict(groups=0), "groups"), (dict(groups=1025), "1024"), (dict(k=100), "multiple of 8"),
    (dict(dtype="fp32"), "dtype"), (dict(epilogue="add"), "unsupported"), (dict(epilogue="relu+gelu"), "two"),
    (dict(n=True), "integer"), (dict(total_m=0), "total_m")])
def test_spec_refuses_bad_input_in_one_line(kwargs, word):
    with pytest.raises(SpecError) as err:
        GroupedSpec(**{**dict(groups=4, total_m=64, n=64, k=64), **kwargs})
    assert word in str(err.value) and "\n" not in str(err.value)


def test_spec_offsets_flops_and_epilogue_names():
    spec = GroupedSpec(3, 100, 16, 8, epilogue="bias+relu")
    assert spec.epilogue.ops == ("bias_col", "relu") and spec.has_bias
    assert spec.flops(group_offsets([10, 0, 30])) == 2 * 40 * 16 * 8
    for bad in ([1, 2], [5, 3, 9], [0, 0, 101]):
        with pytest.raises(SpecError):
            spec.check_offsets(np.array(bad))
    spec.check_offsets(group_offsets([10, 0, 30]))


def test_reference_is_a_loop_over_groups_and_leaves_the_tail():
    rng = np.random.default_rng(0)
    a, b, bias = rng.standard_normal((12, 8)), rng.standard_normal((3, 8, 5)), rng.standard_normal((3, 5))
    out = reference(GroupedSpec(3, 12, 5, 8, epilogue="bias+relu"), a, b, group_offsets([4, 0, 6]), bias)
    assert np.allclose(out[4:10], np.maximum(a[4:10] @ b[2] + bias[2], 0))
    assert np.isnan(out[10:]).all() and not np.isnan(out[:10]).any()


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("bm, bn, n, band_m", [(64, 128, 333, 0), (128, 256, 4096, 0), (128, 64, 64, 0),
                                               (64, 128, 333, 3), (128, 64, 1000, 2), (64, 64, 200, 1)])
def test_scheduler_twin_covers_every_tile_once(sizes, bm, bn, n, band_m):
    offs = group_offsets(sizes)
    total_m = int(offs[-1]) + 3
    tiles = plan(offs, total_m, n, bm, bn, band_m)
    seen = [tiles.tile(t) for t in range(tiles.total)]
    expected = {(g, m, j) for g, rows in enumerate(sizes) for m in range(-(-rows // bm)) for j in range(-(-n // bn))}
    assert len(seen) == len(expected) and {(t.group, t.tile_m, t.tile_n) for t in seen} == expected
    starts = np.concatenate(([0], offs[:-1]))
    for t in seen:  # the rows a tile stores lie inside its group
        assert (t.row_begin, t.row_end) == (starts[t.group], offs[t.group])
        assert t.row_begin + t.tile_m * bm < t.row_end


def test_bands_walk_tile_rows_fastest_inside_a_band():
    # one group of 5 tile rows and 3 tile columns in bands of 2: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2), then
    # the rows 2-3 band, then the last band of one row
    tiles = plan(np.array([5 * 64]), 5 * 64, 3 * 64, 64, 64, band_m=2)
    order = [(tiles.tile(t).tile_m, tiles.tile(t).tile_n) for t in range(tiles.total)]
    assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert order[6:8] == [(2, 0), (3, 0)] and order[12:] == [(4, 0), (4, 1), (4, 2)]


def test_scheduler_twin_clamps_offsets_past_the_rows():
    tiles = plan(np.array([50, 40, 500]), 100, 64, 64, 64)
    assert tiles.ends == (50, 40, 100) and tiles.total == 1 + 0 + 1  # a decreasing end empties a group


def test_default_config_uses_64_row_tiles_for_small_groups():
    assert default_config(GroupedSpec(128, 128 * 40, 2048, 1024)).bm == 64
    assert default_config(GroupedSpec(8, 8 * 512, 2048, 1024)).bm == 128


def test_rejections_name_the_broken_limit():
    spec = GroupedSpec(8, 4096, 4096, 1024)
    assert "registers" in rejections(GroupedConfig(128, 256, 4, consumers=1), spec)
    assert "shared_memory" in rejections(GroupedConfig(128, 256, 8, consumers=2), spec)
    assert "consumers" in rejections(GroupedConfig(64, 128, 4, consumers=2), spec)
    assert "pingpong" in rejections(GroupedConfig(64, 256, 4, consumers=1, pingpong=True), spec)
    assert "registers" in rejections(GroupedConfig(128, 256, 4, consumers=2, pingpong=True), spec)  # 128x256 a consumer
    assert not rejections(GroupedConfig(64, 256, 4, consumers=2, pingpong=True), spec)  # 64 rows is a whole wgmma
    assert "staged_store" in rejections(GroupedConfig(64, 256, 4, staged_store=True), GroupedSpec(8, 4096, 4100, 1024))
    assert "shared_memory" in rejections(GroupedConfig(128, 256, 4, staged_store=True), spec)  # 3 stages beside 64 KiB
    with pytest.raises(ConfigError):
        render(spec, GroupedConfig(128, 256, 8, 2))


def test_b_is_one_3d_map_over_the_groups():
    a, b = tensor_maps(GroupedSpec(8, 1000, 300, 72), GroupedConfig(128, 128, 4, 2))
    assert (a.dims, a.box) == ((72, 1000), (64, 128))
    assert (b.dims, b.strides, b.box) == ((72, 300, 8), (144, 144 * 300), (64, 128, 1))


COMPILE_SPECS = [GroupedSpec(8, 4096, 4096, 1024, "bf16", "bias+gelu"), GroupedSpec(6, 70, 333, 200, "fp16", "relu"),
                 GroupedSpec(128, 5000, 2048, 7168, "bf16")]


@pytest.mark.parametrize("spec", COMPILE_SPECS, ids=lambda s: s.slug())
def test_every_candidate_compiles_for_sm90a_without_spills(spec, tmp_path):
    compile_kernel = pytest.importorskip("gemmtune.compiler").compile_kernel
    for config in candidates(spec):
        compiled = compile_kernel(render(spec, config), "sm_90a", cache_dir=tmp_path)
        assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, config
        assert "C751" not in compiled.log, f"{config}: wgmma serialised"


def test_fake_impl_gives_shapes():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemmtune.grouped import torch_ops  # noqa: F401 (registers the op)

    with FakeTensorMode():
        a = torch.empty(100, 64, dtype=torch.bfloat16)
        b = torch.empty(4, 96, 64, dtype=torch.bfloat16).transpose(1, 2)
        offs = torch.empty(4, dtype=torch.int32)
        assert torch.ops.gemmtune.grouped_mm(a, b, offs).shape == (100, 96)
        bias = torch.empty(4, 96, dtype=torch.bfloat16)
        assert torch.ops.gemmtune.grouped_mm(a, b, offs, bias, "gelu").shape == (100, 96)
        with pytest.raises(SpecError):
            torch.ops.gemmtune.grouped_mm(a, b, offs.long())
