"""Grouped GEMM (issue 69) without a GPU: the spec, the tile scheduler's twin, NVRTC compiles, shapes."""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.errors import ConfigError, SpecError
from gemmtune.grouped import GroupedConfig, GroupedSpec, candidates, default_config, group_offsets, reference, rejections
from gemmtune.grouped.render import render, tensor_maps
from gemmtune.grouped.schedule import plan
from gemmtune.grouped.config import DEFAULT_BAND_M, DEFAULT_PROMOTE_EVERY

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


def test_default_config_walks_large_groups_in_bands():
    # 128-row tiles in bands of 8 tile rows (a wave's rows of A stay in L2); fp8 tensor/rowwise's too (its own test)
    large = default_config(GroupedSpec(16, 32768, 12800, 4096))
    assert large.bm == 128 and large.band_m == DEFAULT_BAND_M == 8 and large.pingpong
    assert default_config(GroupedSpec(128, 128 * 40, 2048, 1024)).band_m == 0
    plain = large.with_(band_m=0)
    assert plain in candidates(GroupedSpec(16, 32768, 12800, 4096))  # the whole-group walk stays a candidate


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
# SwiGLU (gate and up boxes) and the masked layout (counts scanned instead of ends)
VARIANT_SPECS = [GroupedSpec(8, 4096, 1408, 2048, "bf16", swiglu=True), GroupedSpec(6, 70, 333, 200, "fp16", swiglu=True),
                 GroupedSpec.masked(8, 256, 4096, 7168, "bf16", "bias+gelu"),
                 GroupedSpec.masked(32, 64, 768, 2048, "bf16", swiglu=True)]


@pytest.mark.parametrize("spec", COMPILE_SPECS + VARIANT_SPECS, ids=lambda s: s.slug())
def test_every_candidate_compiles_for_sm90a_without_spills(spec, tmp_path):
    compile_kernel = pytest.importorskip("gemmtune.compiler").compile_kernel
    for config in candidates(spec):
        compiled = compile_kernel(render(spec, config), "sm_90a", cache_dir=tmp_path)
        assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, config
        assert "C751" not in compiled.log, f"{config}: wgmma serialised"


def test_fake_impl_gives_shapes():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemmtune.torch import grouped_calls  # noqa: F401 (registers the op)

    with FakeTensorMode():
        a = torch.empty(100, 64, dtype=torch.bfloat16)
        b = torch.empty(4, 96, 64, dtype=torch.bfloat16).transpose(1, 2)
        offs = torch.empty(4, dtype=torch.int32)
        assert torch.ops.gemmtune.grouped_mm(a, b, offs).shape == (100, 96)
        bias = torch.empty(4, 96, dtype=torch.bfloat16)
        assert torch.ops.gemmtune.grouped_mm(a, b, offs, bias, "gelu").shape == (100, 96)
        with pytest.raises(SpecError):
            torch.ops.gemmtune.grouped_mm(a, b, offs.long())


# --- SwiGLU pair epilogue and the masked layout --------------------------------------------------------------
@pytest.mark.parametrize("kwargs, word", [
    (dict(swiglu=True, epilogue="bias"), "no bias"), (dict(swiglu=True, epilogue="relu"), "no bias or activation"),
    (dict(swiglu="yes"), "True or False"), (dict(layout="ragged"), "layout"),
    (dict(layout="masked", total_m=65), "groups (4) x capacity")])
def test_variant_specs_refuse_bad_input_in_one_line(kwargs, word):
    with pytest.raises(SpecError) as err:
        GroupedSpec(**{**dict(groups=4, total_m=64, n=64, k=64), **kwargs})
    assert word in str(err.value) and "\n" not in str(err.value)


def test_masked_spec_names_its_capacity():
    spec = GroupedSpec.masked(4, 96, 200, 64, swiglu=True)
    assert (spec.total_m, spec.capacity, spec.weight_rows, spec.rows_operand) == (384, 96, 400, "counts")
    assert spec.slug().endswith("_swiglu_masked96") and GroupedSpec(4, 384, 200, 64).slug() == "grouped_g4_m384_n200_k64_bf16"
    with pytest.raises(SpecError, match="capacity"):
        GroupedSpec.masked(4, 0, 64, 64)
    begins, ends = spec.row_ranges(np.array([0, 5, 96, 500]))
    assert begins.tolist() == [0, 96, 192, 288] and ends.tolist() == [0, 101, 288, 384]  # counts clamped to capacity
    assert spec.flops(np.array([0, 5, 96, 500])) == 2 * (5 + 96 + 96) * 400 * 64
    spec.check_offsets(np.array([0, 96, 3, 1]))  # counts need not rise
    for bad in ([1, 2, 3], [0, 97, 0, 0], [-1, 0, 0, 0]):
        with pytest.raises(SpecError, match="counts"):
            spec.check_offsets(np.array(bad))


def test_swiglu_reference_gates_the_up_half_with_silu_of_the_gate_half():
    rng = np.random.default_rng(1)
    f, sizes = 5, [4, 0, 6]
    a = rng.standard_normal((12, 8))
    w_gate, w_up = rng.standard_normal((3, f, 8)), rng.standard_normal((3, f, 8))
    w = np.concatenate([w_gate, w_up], axis=1)  # stored (G, 2F, K): what torch.cat([w_gate, w_up], dim=1) gives
    out = reference(GroupedSpec(3, 12, f, 8, swiglu=True), a, w.transpose(0, 2, 1), group_offsets(sizes))
    gate, up = a[4:10] @ w_gate[2].T, a[4:10] @ w_up[2].T
    assert out.shape == (12, f) and np.allclose(out[4:10], gate / (1 + np.exp(-gate)) * up)
    assert np.isnan(out[10:]).all() and not np.isnan(out[:10]).any()
    with np.errstate(over="raise", invalid="raise"):  # silu of a very negative gate is -0, without overflow
        from gemmtune.grouped.spec import silu
        assert silu(np.array([-1e4, 0.0, 1e4])).tolist() == [-0.0, 0.0, 1e4]


def test_masked_reference_fills_each_slot_up_to_its_count():
    rng = np.random.default_rng(2)
    spec = GroupedSpec.masked(3, 4, 5, 8, epilogue="bias+relu")
    a, b, bias = rng.standard_normal((12, 8)), rng.standard_normal((3, 8, 5)), rng.standard_normal((3, 5))
    out = reference(spec, a, b, np.array([2, 0, 9]), bias)  # 9 > capacity: the whole slot
    assert np.allclose(out[0:2], np.maximum(a[0:2] @ b[0] + bias[0], 0)) and np.isnan(out[2:8]).all()
    assert np.allclose(out[8:12], np.maximum(a[8:12] @ b[2] + bias[2], 0))


COUNTS = [(0, 0, 0, 0), (1, 0, 128, 3), (128, 128, 128, 128), (77, 200, 0, 1)]  # capacity 128; 200 is clamped


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("bm, bn, n, band_m", [(64, 128, 333, 0), (128, 64, 1000, 2), (64, 64, 200, 1)])
def test_masked_scheduler_twin_covers_each_groups_counted_rows_once(counts, bm, bn, n, band_m):
    from gemmtune.grouped.schedule import plan_for

    spec = GroupedSpec.masked(4, 128, n, 64)
    tiles = plan_for(spec, np.array(counts), bm, bn, band_m)
    rows = [min(c, 128) for c in counts]
    expected = {(g, m, j) for g, r in enumerate(rows) for m in range(-(-r // bm)) for j in range(-(-n // bn))}
    seen = [tiles.tile(t) for t in range(tiles.total)]
    assert len(seen) == len(expected) and {(t.group, t.tile_m, t.tile_n) for t in seen} == expected
    for t in seen:  # a tile's rows start in its group's slot and stop at its count
        assert (t.row_begin, t.row_end) == (t.group * 128, t.group * 128 + rows[t.group])
        assert t.row_begin + t.tile_m * bm < t.row_end


def test_swiglu_tiles_cover_output_columns_in_half_tiles():
    from gemmtune.grouped.render import out_bn
    from gemmtune.grouped.schedule import plan_for

    spec, config = GroupedSpec(2, 300, 333, 64, swiglu=True), GroupedConfig(128, 128, 4, 2)
    tiles = plan_for(spec, group_offsets([100, 200]), config.bm, out_bn(spec, config))
    assert tiles.tiles_n == 6 and tiles.total == (1 + 2) * 6  # ceil(333 / 64) column tiles of 64 outputs
    a, b = tensor_maps(spec, config)
    assert (b.dims, b.strides, b.box) == ((64, 666, 2), (128, 128 * 666), (64, 64, 1))  # gate and up boxes


def test_swiglu_and_masked_kernels_say_what_they_do():
    swiglu = render(GroupedSpec(8, 1000, 333, 200, swiglu=True), GroupedConfig(128, 128, 4, 2)).code
    assert "constexpr int OUT_BN = BN / 2;" in swiglu and "N + tile.tile_n * OUT_BN" in swiglu
    assert "swiglu(acc[mb][4 * j + 2 * half], acc[mb][4 * (j + OUT_BN / 8) + 2 * half])" in swiglu
    masked = render(GroupedSpec.masked(8, 96, 256, 64), GroupedConfig(64, 128, 4, 1))
    assert "constexpr int CAPACITY = 96;" in masked.code and "scan_groups(counts, group_end, tile_end)" in masked.code
    assert masked.args[0] == "offs" and "clamped_end" not in masked.code
    plain = render(GroupedSpec(8, 768, 256, 64), GroupedConfig(64, 128, 4, 1)).code
    assert "CAPACITY" not in plain and "swiglu" not in plain and "scan_groups(offs, group_end, tile_end)" in plain




def test_fake_impls_give_swiglu_and_masked_shapes():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import gemmtune.torch as gt

    with FakeTensorMode():
        a = torch.empty(100, 64, dtype=torch.bfloat16)
        w13 = torch.empty(4, 2 * 96, 64, dtype=torch.bfloat16).transpose(1, 2)
        offs = torch.empty(4, dtype=torch.int32)
        assert torch.ops.gemmtune.grouped_mm(a, w13, offs, None, "swiglu").shape == (100, 96)
        x3, w = torch.empty(4, 32, 64, dtype=torch.bfloat16), torch.empty(4, 80, 64, dtype=torch.bfloat16)
        assert torch.ops.gemmtune.grouped_mm_masked(x3, w.transpose(1, 2), offs).shape == (4, 32, 80)
        assert gt.grouped_mm_masked(x3, w.transpose(1, 2), offs, None, "swiglu").shape == (4, 32, 40)
        bias = torch.empty(4, 80, dtype=torch.bfloat16)
        assert gt.grouped_mm_masked(x3, w.transpose(1, 2), offs, bias, "relu").shape == (4, 32, 80)
        for bad, word in (((a, w13, offs, torch.empty(4, 192, dtype=torch.bfloat16), "swiglu"), "no bias"),
                          ((a, torch.empty(4, 64, 95, dtype=torch.bfloat16), offs, None, "swiglu"), "odd"),
                          ((a, w13, offs, None, "silu"), "unsupported")):
            with pytest.raises(SpecError, match=word):
                torch.ops.gemmtune.grouped_mm(*bad)
        for bad in ((a, w.transpose(1, 2), offs), (x3, w.transpose(1, 2), offs[:3]), (x3, w.transpose(1, 2), offs.long())):
            with pytest.raises(SpecError, match="grouped_mm_masked"):
                torch.ops.gemmtune.grouped_mm_masked(*bad)


def test_swiglu_refuses_staged_rows_of_32_columns():
    from gemmtune.grouped.render import swiglu_rejections

    spec, config = GroupedSpec(4, 256, 512, 64, swiglu=True), GroupedConfig(64, 64, 4, 1, staged_store=True)
    assert "swiglu_staged" in swiglu_rejections(config, spec)
    assert not swiglu_rejections(config.with_(bn=128), spec) and not swiglu_rejections(config, GroupedSpec(4, 256, 512, 64))
    with pytest.raises(ConfigError, match="BN >= 128"):
        render(spec, config)
    assert all(not swiglu_rejections(c, spec) for c in candidates(spec))


# --- clusters of two sharing A by multicast (config.cluster = 2) -----------------------------------------------
CLUSTER = GroupedConfig(128, 128, 5, 2, pingpong=True, staged_store=True, cluster=2)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("bm, bn, n, band_m", [(64, 128, 333, 0), (128, 256, 4096, 0), (128, 64, 64, 0),
                                               (64, 128, 333, 3), (128, 64, 1000, 2), (64, 64, 200, 1)])
def test_cluster_pairs_cover_every_tile_once_and_share_rows(sizes, bm, bn, n, band_m):
    offs = group_offsets(sizes)
    total_m = int(offs[-1]) + 3
    pairs = plan(offs, total_m, n, bm, bn, band_m, cluster=2)
    tiles_n = -(-n // bn)
    assert pairs.units_n == -(-tiles_n // 2) and pairs.total == plan(offs, total_m, n, bm, 2 * bn, band_m).total
    seen = []
    for t in range(pairs.total):
        first, second = pairs.tile(t, 0), pairs.tile(t, 1)
        # both blocks of the cluster: one group, one m-tile (the shared A rows), adjacent columns 2j and 2j + 1
        assert (first.group, first.tile_m, first.row_begin) == (second.group, second.tile_m, second.row_begin)
        assert first.tile_n % 2 == 0 and second.tile_n in (first.tile_n + 1, tiles_n)
        assert second.tile_n < tiles_n or tiles_n % 2 == 1 and first.tile_n == tiles_n - 1  # idle: odd columns only
        seen += [(tile.group, tile.tile_m, tile.tile_n) for tile in pairs.cluster_tiles(t)]
    expected = {(g, m, j) for g, rows in enumerate(sizes) for m in range(-(-rows // bm)) for j in range(tiles_n)}
    assert len(seen) == len(expected) and set(seen) == expected


@pytest.mark.parametrize("counts", COUNTS)
def test_masked_cluster_pairs_cover_each_groups_counted_rows_once(counts):
    from gemmtune.grouped.schedule import plan_for

    spec = GroupedSpec.masked(4, 128, 333, 64)  # 3 tile columns of 128: the second pair is half idle
    pairs = plan_for(spec, np.array(counts), 64, 128, cluster=2)
    rows = [min(c, 128) for c in counts]
    seen = [(t.group, t.tile_m, t.tile_n) for u in range(pairs.total) for t in pairs.cluster_tiles(u)]
    expected = {(g, m, j) for g, r in enumerate(rows) for m in range(-(-r // 64)) for j in range(3)}
    assert len(seen) == len(expected) and set(seen) == expected


def test_cluster_config_json_entry_and_rejections():
    spec = GroupedSpec(8, 4096, 4096, 1024)
    assert "cluster" not in GroupedConfig().to_json()  # older configs keep their JSON (and database keys)
    assert CLUSTER.to_json()["cluster"] == 2 and CLUSTER.a_share_rows == 64
    assert "cluster" in rejections(CLUSTER.with_(cluster=4), spec) and not rejections(CLUSTER, spec)
    with pytest.raises(ConfigError, match="cluster=3"):
        render(spec, CLUSTER.with_(cluster=3))
    from gemmtune.grouped.render import entry_name
    assert entry_name(spec, CLUSTER).endswith("ppstcl2") and entry_name(spec, CLUSTER.with_(cluster=1)).endswith("ppst")


@pytest.mark.parametrize("spec", COMPILE_SPECS + VARIANT_SPECS, ids=lambda s: s.slug())
def test_default_config_stays_without_clusters_and_candidates_add_them(spec):
    assert default_config(spec).cluster == 1 and candidates(spec)[0] == default_config(spec)
    pairs = [c for c in candidates(spec) if c.cluster == 2]
    assert pairs and all(not rejections(c, spec) for c in pairs)
    assert candidates(spec)[-len(pairs):] == pairs  # last: timed against the rest, untimed until then
    assert not [c for c in candidates(GroupedSpec(4, 256, 128, 64)) if c.cluster == 2]  # one 128-column tile


def test_cluster_kernel_multicasts_half_of_a_and_releases_slots_in_both_blocks():
    spec = GroupedSpec(8, 4096, 4096, 1024)
    source = render(spec, CLUSTER, sm_count=133)
    code = source.code
    assert source.grid == (132, 1, 1)  # whole clusters only
    assert tensor_maps(spec, CLUSTER)[0].box == (64, 64) and tensor_maps(spec, CLUSTER.with_(cluster=1))[0].box == (64, 128)
    assert "__cluster_dims__(2, 1, 1)" in code and "constexpr int CLUSTER = 2;" in code
    assert "tma_load_2d_multicast(slot + rank * A_SHARE_BYTES" in code and "tma_load_2d(slot, &tma_A" not in code
    assert "mbarrier_arrive_expect_tx(full, has_b ? STAGE_BYTES : A_TILE_BYTES);" in code
    assert "(PINGPONG ? 1 : CONSUMERS) * CLUSTER" in code and "mbarrier_arrive(&empty[" not in code
    assert code.count("release_slot(&empty[") == 3 and code.count("void release_slot(") == 1
    assert code.count("cluster_sync();") == 2 and "__syncthreads();" not in code
    assert "cluster_tile(group_end, tile_end, t, rank)" in code and "* PAIRS_N" in code and "* TILES_N;" not in code
    plain = render(spec, CLUSTER.with_(cluster=1)).code
    assert not any(word in plain for word in ("__cluster_dims__", "CLUSTER", "cluster_sync();", "release_slot",
                                              "cluster_tile", "tma_load_2d_multicast(slot"))


CLUSTER_SPECS = [GroupedSpec(8, 4096, 4096, 1024, "bf16", "bias+gelu"), GroupedSpec(6, 70, 333, 200, "fp16", "relu"),
                 GroupedSpec(8, 4096, 1408, 2048, "bf16", swiglu=True), GroupedSpec.masked(8, 256, 333, 7168, "bf16"),
                 GroupedSpec(4, 300, 1000, 512, "e4m3", scaling="rowwise", epilogue="bias+gelu"),
                 GroupedSpec(4, 300, 1000, 512, "e5m2", scaling="tensor"), GroupedSpec(4, 300, 1000, 512, "e4m3", scaling="block")]
CLUSTER_SHAPES = [CLUSTER, GroupedConfig(128, 256, 3, 2, staged_store=True, cluster=2),
                  GroupedConfig(64, 128, 6, 1, band_m=2, cluster=2), GroupedConfig(128, 128, 6, 2, cluster=2),
                  GroupedConfig(64, 256, 4, 2, pingpong=True, cluster=2)]


@pytest.mark.parametrize("spec", CLUSTER_SPECS, ids=lambda s: s.slug())
def test_cluster_configs_compile_for_sm90a_without_spills(spec, tmp_path):
    compile_kernel = pytest.importorskip("gemmtune.compiler").compile_kernel
    from gemmtune.grouped.render import swiglu_rejections

    compiled = 0
    for config in CLUSTER_SHAPES:
        if rejections(config, spec) or swiglu_rejections(config, spec):
            continue
        result = compile_kernel(render(spec, config), "sm_90a", cache_dir=tmp_path)
        assert result.resources.spills == 0 and result.resources.stack_bytes == 0, config
        assert "C751" not in result.log, f"{config}: wgmma serialised"
        compiled += 1
    assert compiled >= 1


# --- fp8 promotion (issue 70: promote_every) ------------------------------------------------------------------
FP8_TENSOR = GroupedSpec(8, 4096, 4096, 1024, "e4m3", scaling="tensor")
FP8_SMALL = GroupedSpec(64, 64 * 40, 1000, 512, "e5m2", "bias+gelu", scaling="rowwise")  # groups of 40 rows, N % 8 != 0
PROMOTED = GroupedConfig(128, 128, 6, 2, staged_store=True, promote_every=4)


def test_promotion_limits_name_the_broken_one():
    assert not rejections(PROMOTED, FP8_TENSOR)
    assert "promote_every" in rejections(PROMOTED.with_(promote_every=3), FP8_TENSOR)
    assert "promote_every" in rejections(PROMOTED, GroupedSpec(8, 4096, 4096, 1024))  # bf16 sums in fp32 already
    assert "promote_every" in rejections(PROMOTED, GroupedSpec(8, 4096, 4096, 1024, "e4m3", scaling="block"))
    pingpong_128 = GroupedConfig(128, 128, 5, 2, pingpong=True, promote_every=2)  # 128 rows a consumer
    assert "promote_every" in rejections(pingpong_128, FP8_TENSOR) and not rejections(pingpong_128.with_(promote_every=0), FP8_TENSOR)
    wide = GroupedConfig(64, 256, 4, 1, promote_every=1)  # acc and sums of 256 columns: 256 floats a thread
    assert "256 fp32 sums" in rejections(wide, FP8_TENSOR)["registers"] and not rejections(wide.with_(promote_every=0), FP8_TENSOR)
    assert not rejections(GroupedConfig(64, 64, 8, 1, promote_every=8), FP8_TENSOR)
    with pytest.raises(ConfigError, match="promote_every=3"):
        render(FP8_TENSOR, PROMOTED.with_(promote_every=3))


def test_promotion_json_and_entry_names():
    assert "promote_every" not in PROMOTED.with_(promote_every=0).to_json()  # older configs keep their JSON
    assert PROMOTED.to_json()["promote_every"] == 4 and PROMOTED.accumulators == 128
    from gemmtune.grouped.render import entry_name
    assert entry_name(FP8_TENSOR, PROMOTED).endswith("c2stpr4")
    assert entry_name(FP8_TENSOR, PROMOTED.with_(cluster=2)).endswith("stcl2pr4")
    assert entry_name(FP8_TENSOR, PROMOTED.with_(promote_every=0)).endswith("c2st")


@pytest.mark.parametrize("spec", [FP8_TENSOR, FP8_SMALL, GroupedSpec(1, 300, 96, 208, "e4m3", scaling="rowwise")],
                         ids=lambda s: s.slug())
def test_fp8_default_is_promoted_and_candidates_keep_every_interval(spec):
    default = default_config(spec)
    assert default.promote_every == DEFAULT_PROMOTE_EVERY == 8 and default.rows_per_consumer == 64 and default.bn == 128
    assert (default.bm, default.pingpong) == ((64, True) if spec is FP8_SMALL else (128, False))
    assert default.band_m == (0 if spec is FP8_SMALL else DEFAULT_BAND_M)  # bands of 128-row tiles, as bf16's
    found = candidates(spec)
    assert found[0] == default and all(not rejections(c, spec) for c in found)
    waiting = default.with_(promote_overlap=False, overlap_static=False)  # (the default overlaps on 128x128 tiles)
    assert default.overlap_static == (spec is not FP8_SMALL)  # per-tensor or rowwise scales, 128x128, no bias
    same_tile = {c.promote_every for c in found if c.with_(promote_every=DEFAULT_PROMOTE_EVERY) == waiting}
    assert same_tile == {0, 1, 2, 4, 8}  # the default's tile at every interval, unpromoted included
    assert any(not c.promoted and c.bn == 256 for c in found)
    assert any(c.promoted and c.cluster == 2 for c in found) == (spec.n > 128)  # pairs where a tile row has two tiles


def test_promotion_stays_out_of_16_bit_and_block_scaled_kernels():
    for spec in (GroupedSpec(8, 4096, 4096, 1024), GroupedSpec(8, 4096, 4096, 1024, "e4m3", scaling="block")):
        assert not any(c.promoted for c in candidates(spec))
    assert "PROMOTE_EVERY" not in render(FP8_TENSOR, PROMOTED.with_(promote_every=0)).code


def _loop_text(code: str) -> str:
    """A consumer's tile in the generated kernel: from its accumulators to its store."""
    start = code.index("            float acc[M_BLOCKS][BN / 2];")
    end = code.index("            store_tile(", start)
    stored = code[end:].split("(", 1)[1].split(",", 1)[0]  # what the tile is stored from: acc, or sums promoted
    return code[start:end] + f"            float (&stored)[M_BLOCKS][BN / 2] = {stored};\n"


def test_promoted_loop_sums_chunks_apart_and_promotes_after_a_full_wait():
    code = render(FP8_TENSOR, PROMOTED).code
    assert "constexpr int PROMOTE_EVERY = 4;" in code
    loop = _loop_text(code)
    chunk = loop.index("for (int chunk = 0; chunk < K_BLOCKS; chunk += PROMOTE_EVERY)")
    inner = loop.index("for (int kb = chunk; kb < chunk_end; ++kb)", chunk)
    issue = loop.index("mma_stage_sums(sums[0], ring_base + ring.s * STAGE_BYTES, part, kb > chunk);", inner)
    pipelined = loop.index("wgmma_wait<1>();", issue)
    promote = loop.index("wgmma_wait<0>();", pipelined)
    add = loop.index("acc[0][i] += sums[0][i];", promote)
    last = loop.index("sums[0][i] += acc[0][i];", add)  # the last chunk's sums take acc: the tile is stored from them
    assert chunk < inner < issue < pipelined < promote < add < last
    assert loop.index("mbarrier_arrive(&empty[previous]);", promote) < add  # the chunk's last slot, before the adds
    assert "store_tile(sums, tile, part, D," in code
    assert "mma_stage(acc" not in loop and "scale" not in loop[chunk:]  # scales stay in the epilogue
    assert "min(chunk + PROMOTE_EVERY, K_BLOCKS)" in loop  # the last chunk may be shorter than PROMOTE_EVERY
    assert "wgmma_m64n128(sums, desc_a, desc_b, ks > 0 || add);" in code
    clustered = _loop_text(render(FP8_TENSOR, PROMOTED.with_(cluster=2)).code)
    assert "mbarrier_arrive(&empty[" not in clustered and clustered.count("release_slot(&empty[") == 4  # idle, pipelined, promotion, tail


# The consumer's tile (acc zeroed .. before store_tile) of the generated kernel, run on the CPU against a model of
# wgmma groups and the ring: each wgmma group completes only at a wgmma_wait, in order, adding k-block kb's value
# (kb + 1) to its accumulators (or overwriting them where it starts a chunk). A slot must be released once, in ring
# order, after the wgmma that read it completed; a k-block's slot must be waited on only once the producer can
# have refilled it; what store_tile takes (acc, or sums promoted) must hold every k-block once.
HARNESS = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>
using std::min;
typedef unsigned u32;
typedef unsigned long long u64;
#define __device__
#define __forceinline__ inline
static int STAGES, K_BLOCKS, PROMOTE_EVERY;
constexpr int BN = 8, M_BLOCKS = 1, STAGE_BYTES = 1, TILES_N = 1;
constexpr bool PINGPONG = false;
RING_TEXT
struct { int x = 0; } threadIdx;
struct { int tile_n = 0; } tile;
static u64 full[16], empty[16], mainloop_done[2];
static unsigned char ring_base[16];
struct Group { float* d; int kb; bool add; int slot; };
static std::vector<Group> open_group;
static std::deque<std::vector<Group>> in_flight;
static int waited, released, issued;  // k-blocks of this run: waited on, released, issued to wgmma

static void fail(const char* what, int value) {
    std::printf("STAGES=%d K_BLOCKS=%d PROMOTE_EVERY=%d: %s (%d)\n", STAGES, K_BLOCKS, PROMOTE_EVERY, what, value);
    std::exit(1);
}
static void mbarrier_wait(u64* bar, u32 phase) {
    if (bar < full || bar >= full + 16) return;  // (mainloop_done: ping-pong only)
    if (bar - full != waited % STAGES || phase != (u32)(waited / STAGES % 2)) fail("waited out of ring order", waited);
    if (released < waited - STAGES + 1) fail("waited on a slot the producer cannot have refilled", waited);
    ++waited;
}
static void wgmma_fence() {}
static void issue(float* d, const unsigned char* slot, bool add) {
    if (slot - ring_base != issued % STAGES || issued >= waited) fail("wgmma read a slot not waited on", issued);
    open_group.push_back({d, issued % K_BLOCKS, add, issued});
    ++issued;
}
static void mma_stage(float (&acc)[M_BLOCKS][BN / 2], const unsigned char* slot, int) { issue(acc[0], slot, true); }
static void mma_stage_sums(float (&sums)[BN / 2], const unsigned char* slot, int, bool add) { issue(sums, slot, add); }
static void wgmma_commit() { in_flight.push_back(open_group); open_group.clear(); }
template <int N> static void wgmma_wait() {
    while ((int)in_flight.size() > N) {
        for (const Group& g : in_flight.front())
            for (int i = 0; i < BN / 2; ++i) g.d[i] = (g.add ? g.d[i] : 0.0f) + (g.kb + 1);
        in_flight.pop_front();
    }
}
static void arrive_empty(u64* bar) {
    if (bar - empty != released % STAGES) fail("released out of ring order", released);
    for (const auto& group : in_flight)
        for (const Group& g : group)
            if (g.slot == released) fail("released a slot its wgmma still reads", released);
    if (released >= waited) fail("released a slot not waited on", released);
    ++released;
}
static void mbarrier_arrive(u64* bar) { if (bar >= empty && bar < empty + 16) arrive_empty(bar); }
static void release_slot(u64* bar) { arrive_empty(bar); }

static void run() {
    waited = released = issued = 0;
    in_flight.clear();
    Ring ring;
    const int consumer = 0, part = 0;
    (void)part;
    for (int turn = 0; turn < 3; ++turn) {
TILE_TEXT
        if (!in_flight.empty() || released != (turn + 1) * K_BLOCKS) fail("tile stored with k-blocks unreleased", released);
        for (int i = 0; i < BN / 2; ++i)
            if (stored[0][i] != K_BLOCKS * (K_BLOCKS + 1) / 2.0f) fail("the tile stored is not every k-block's sum once", (int)stored[0][i]);
    }
}

int main() {
    const int promote[] = {PROMOTES};
    for (int p : promote)
        for (int stages = 2; stages <= 5; ++stages)
            for (int k_blocks : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17}) {
                PROMOTE_EVERY = p, STAGES = stages, K_BLOCKS = k_blocks;
                run();
            }
    std::printf("ok\n");
    return 0;
}
"""


def _run_tile_loop(code: str, promotes: str, tmp_path) -> str:
    """HARNESS around the consumer tile of `code`, PROMOTE_EVERY taking each of `promotes`: its output."""
    import shutil
    import subprocess

    from gemmtune.kernels.parts.ring import RING

    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("needs a host C++ compiler")
    source = HARNESS.replace("RING_TEXT", RING).replace("TILE_TEXT", _loop_text(code)).replace("PROMOTES", promotes)
    path = tmp_path / "tile_loop.cpp"
    path.write_text(source)
    subprocess.run([compiler, "-std=c++17", "-O1", "-o", str(tmp_path / "tile_loop"), str(path)], check=True)
    return subprocess.run([str(tmp_path / "tile_loop")], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("promote_every", [0, 4])
def test_generated_tile_loop_releases_each_slot_once_in_order_on_the_cpu(promote_every, cluster, tmp_path):
    code = render(FP8_TENSOR, PROMOTED.with_(promote_every=promote_every, cluster=cluster)).code
    promotes = "1, 2, 3, 4, 8, 16" if promote_every else "0"  # the text reads PROMOTE_EVERY at run time here
    assert _run_tile_loop(code, promotes, tmp_path) == "ok"


@pytest.mark.parametrize("mistake, finding", [
    (("wgmma_wait<0>();  // promotion", "wgmma_wait<1>();  // promotion"), "still reads"),
    (("previous = -1;  // the chunk's", "// the chunk's"), "released out of ring order"),
    (("part, kb > chunk);", "part, true);"), "not every k-block's sum once"),
    (("acc[0][i] += sums[0][i];", "acc[0][i] = sums[0][i];"), "not every k-block's sum once"),
    (("sums[0][i] += acc[0][i];", "sums[0][i] += 0;"), "not every k-block's sum once")])
def test_the_tile_loop_model_catches_release_and_promotion_mistakes(mistake, finding, tmp_path):
    code = render(FP8_TENSOR, PROMOTED).code
    assert mistake[0] in code
    assert finding in _run_tile_loop(code.replace(mistake[0], mistake[1]), "1, 2, 4", tmp_path)


# rowwise scales with a bias: the epilogue that spilled where the tile was stored from acc (render.PROMOTED_LOOP)
PROMOTED_SPECS = [FP8_TENSOR, FP8_SMALL, GroupedSpec(3, 500, 300, 16, "e4m3", scaling="rowwise"),
                  GroupedSpec(3, 500, 300, 144, "e5m2", scaling="tensor"),
                  GroupedSpec(5, 401, 304, 4096, "e4m3", "bias", scaling="rowwise"),
                  GroupedSpec(5, 401, 304, 640, "e5m2", "bias+relu", scaling="rowwise")]
# the GPU tests' tiles (tests/test_fp8_grouped.py): 64 rows a consumer, staged, clusters too
GPU_TILES = [GroupedConfig(64, 128, 8, 2, pingpong=True, staged_store=True), GroupedConfig(128, 128, 6, 2, staged_store=True)]


@pytest.mark.parametrize("spec", PROMOTED_SPECS, ids=lambda s: s.slug())
def test_promoted_candidates_compile_for_sm90a_without_spills(spec, tmp_path):
    compile_kernel = pytest.importorskip("gemmtune.compiler").compile_kernel
    promoted = [c for c in candidates(spec) if c.promoted]
    assert {c.promote_every for c in promoted} == {1, 2, 4, 8} and any(c.cluster == 2 for c in promoted)
    if spec.n == 304:
        promoted += [t.with_(promote_every=p, cluster=cl) for t in GPU_TILES for p in (1, 8) for cl in (1, 2)]
    for config in promoted:
        compiled = compile_kernel(render(spec, config), "sm_90a", cache_dir=tmp_path)
        assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, config
        assert "C751" not in compiled.log and "C752" not in compiled.log, f"{config}: wgmma serialised"
