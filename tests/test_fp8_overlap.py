"""fp8 promote_overlap (issue 70) without a GPU: the option's limits, JSON and names; which candidates offer it; the
overlapped loops' text; NVRTC sm_90a compiles of every offered config without spills or serialised wgmma; the
tensor/rowwise overlapped tile loop run on the host against test_grouped_cpu's model of wgmma groups and the ring."""
from __future__ import annotations

import pytest

from gemmtune.grouped import GroupedConfig, GroupedSpec, candidates, default_config, rejections
from gemmtune.grouped.render import entry_name, render

BLOCK = GroupedSpec(8, 4096, 4096, 1024, "e4m3", scaling="block")
TENSOR = GroupedSpec(8, 4096, 4096, 1024, "e4m3", scaling="tensor")
OVERLAP = GroupedConfig(128, 128, 6, 2, staged_store=True, promote_overlap=True)


def test_overlap_limits_json_and_names():
    assert not rejections(OVERLAP, BLOCK) and not rejections(OVERLAP.with_(promote_every=4), TENSOR)
    assert "promote_overlap" in rejections(OVERLAP, TENSOR)  # nothing promoted: nothing to overlap
    assert "promote_overlap" in rejections(OVERLAP, GroupedSpec(8, 4096, 4096, 1024))
    wide = GroupedConfig(64, 256, 4, 1, promote_every=4, promote_overlap=True)  # 128 + 2 * 128 floats a thread
    assert "two sums" in rejections(wide, TENSOR)["registers"]
    assert OVERLAP.accumulators == 192 and OVERLAP.with_(promote_overlap=False).to_json() == \
        {k: v for k, v in OVERLAP.to_json().items() if k != "promote_overlap"}  # older configs keep their JSON
    assert entry_name(BLOCK, OVERLAP).endswith("c2stov")
    assert entry_name(TENSOR, OVERLAP.with_(promote_every=4)).endswith("c2stpr4ov")


@pytest.mark.parametrize("spec", [BLOCK, GroupedSpec(4, 300, 1000, 512, "e5m2", "relu", scaling="block")], ids=lambda s: s.slug())
def test_block_candidates_pair_overlapped_and_waiting_twins_default_overlapped(spec):
    found = candidates(spec)
    assert found[0].promote_overlap and found[0] == default_config(spec)  # measured 1.16-1.18x the waiting loop
    plain = [c for c in found if not c.promote_overlap and c.cluster == 1]
    assert {c.with_(promote_overlap=True) for c in plain} == {c for c in found if c.promote_overlap}


@pytest.mark.parametrize("spec", [GroupedSpec(4, 300, 1000, 512, "e4m3", "bias", scaling="block"), TENSOR,
                                  GroupedSpec(4, 300, 1000, 4096, "e4m3", scaling="rowwise")], ids=lambda s: s.slug())
def test_overlap_is_not_offered_where_ptxas_spilled_or_serialised(spec):
    """(tensor/rowwise: the pair loop ending in wgmma_wait<0> is not offered; overlap_static is, below)"""
    assert not any(c.promote_overlap and not c.overlap_static for c in candidates(spec))


def test_block_overlap_loop_issues_the_next_k_block_before_promoting():
    code = render(BLOCK, OVERLAP).code
    loop = code[code.index("float sums[2][BN / 2];"):code.index("            store_tile(")]
    issue = loop.index("mma_stage_sums(sums[1], ring_base + ring.s * STAGE_BYTES, part, false);",
                       loop.index("for (int kb = 1; kb + 1 < K_BLOCKS; kb += 2)"))
    wait = loop.index("wgmma_wait<1>();", issue)
    promote = loop.index("promote_block(acc[0], sums[0], scale_row[0] * scale_block[0]", wait)
    assert issue < wait < promote and "wgmma_wait<0>();  // nothing in flight across the loop's back edge" in loop
    assert loop.index("scale_row[1] = a_scales[kb]") < issue  # loaded at its issue, read a k-block later
    assert "store_tile(acc, tile, part, D," in code and "__device__ __forceinline__ void promote_block(" in code
    old = render(BLOCK, OVERLAP.with_(promote_overlap=False)).code
    assert "promote_block" not in old and "wgmma_wait<0>();  // the sums are read below" in old  # the off state


def _compiled(spec, config, tmp_path):
    compile_kernel = pytest.importorskip("gemmtune.compiler").compile_kernel
    return compile_kernel(render(spec, config), "sm_90a", cache_dir=tmp_path)


# K: one k-block (a partial one), a partial second, odd and even counts, one pair looping, long K (DeepSeek-V3's 7168)
@pytest.mark.parametrize("k", [16, 144, 208, 384, 1024, 7168])
@pytest.mark.parametrize("epilogue", ["none", "gelu"])
def test_offered_overlapped_configs_compile_without_spills_or_serialised_wgmma(k, epilogue, tmp_path):
    spec = GroupedSpec(8, 4096, 1000, k, "e4m3" if epilogue == "none" else "e5m2", epilogue, scaling="block")
    offered = [c for c in candidates(spec) if c.promote_overlap]
    assert {(c.bm, c.consumers, c.pingpong) for c in offered} == {(128, 2, False), (64, 1, False), (64, 2, True)}
    for config in offered:
        compiled = _compiled(spec, config, tmp_path)
        assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, config
        assert "C751" not in compiled.log and "C752" not in compiled.log, f"{config}: wgmma serialised"


@pytest.mark.parametrize("k", [16, 144, 1024])
def test_the_timed_tensor_overlap_renders_and_compiles(k, tmp_path):
    """Not offered (serialised at long K), but the probe times the default's tile overlapped: it must build."""
    spec = GroupedSpec(8, 4096, 4096, k, "e4m3", scaling="tensor")
    compiled = _compiled(spec, default_config(spec).with_(promote_overlap=True), tmp_path)
    assert compiled.resources.spills == 0


@pytest.mark.parametrize("cluster", [1, 2])
def test_promoted_overlap_tile_loop_releases_each_slot_once_in_order_on_the_cpu(cluster, tmp_path):
    from test_grouped_cpu import _run_tile_loop

    code = render(TENSOR, OVERLAP.with_(promote_every=4, cluster=cluster)).code
    assert "float sums[2][M_BLOCKS][BN / 2];" in code
    assert _run_tile_loop(code, "1, 2, 3, 4, 8, 16", tmp_path) == "ok"


@pytest.mark.parametrize("mistake, finding", [
    (("if (begin > 0 && kb == begin) {", "if (begin > 0 && kb == begin + 1) {"), "not every k-block's sum once"),
    (("acc[0][i] += sums[1][0][i];", "acc[0][i] += sums[0][0][i];"), "not every k-block's sum once")])
def test_the_model_catches_overlap_mistakes(mistake, finding, tmp_path):
    from test_grouped_cpu import _run_tile_loop

    code = render(TENSOR, OVERLAP.with_(promote_every=4)).code
    assert mistake[0] in code
    assert finding in _run_tile_loop(code.replace(mistake[0], mistake[1]), "1, 2, 4", tmp_path)


# --- overlap_static: the tensor/rowwise promoted loop with both buffers named statically (issue 70) ----------------
STATIC = GroupedConfig(128, 128, 6, 2, staged_store=True, promote_every=4, promote_overlap=True, overlap_static=True)


def test_static_limits_json_and_names():
    assert not rejections(STATIC, TENSOR) and STATIC.to_json()["overlap_static"] is True
    assert "overlap_static" not in STATIC.with_(overlap_static=False).to_json()  # older configs keep their JSON
    assert "overlap_static" in rejections(STATIC.with_(promote_overlap=False), TENSOR)
    assert "overlap_static" in rejections(STATIC.with_(promote_every=1), TENSOR)  # the back edge would sit between chunks
    assert "overlap_static" in rejections(STATIC.with_(promote_every=0, promote_overlap=True), BLOCK)
    assert entry_name(TENSOR, STATIC).endswith("c2stpr4ovs")


@pytest.mark.parametrize("spec", [TENSOR, GroupedSpec(4, 300, 1000, 4096, "e4m3", "bias", scaling="rowwise"), BLOCK],
                         ids=lambda s: s.slug())
def test_static_twins_are_offered_for_two_consumer_promoted_tiles(spec):
    found = candidates(spec)
    static = [c for c in found if c.overlap_static]
    if spec.scaling == "block":
        assert not static
        return
    # the default overlaps with per-tensor scales (no bias); its waiting twin is offered, and the unpromoted tile
    # where K fits one promotion chunk (keeps_fp8_accuracy: 8 k-blocks of 128)
    assert found[0].overlap_static == (spec.scaling == "tensor" and not spec.has_bias)
    waiting = found[0].with_(promote_overlap=False, overlap_static=False)
    assert waiting in found and (waiting.with_(promote_every=0) in found) == (spec.k <= 1024)
    assert {c.promote_every for c in static} == {2, 4, 8}
    assert all(c.consumers == 2 and not c.pingpong and c.cluster == 1 and c.promote_overlap for c in static)
    assert found[0].with_(promote_overlap=True, overlap_static=True) in static


def test_static_loop_issues_the_next_chunk_before_promoting_and_never_waits_for_all():
    code = render(TENSOR, STATIC).code
    loop = code[code.index("float sums[M_BLOCKS][BN / 2], sums_odd[M_BLOCKS][BN / 2];"):code.index("            store_tile(")]
    body = loop[loop.index("for (int chunk = 1; chunk + 2 < chunks; chunk += 2) {"):loop.index("if (chunks >= 2 && chunks % 2 == 0)")]
    # the back edge sits inside an odd chunk: the body opens with its other k-blocks, accumulated into sums_odd ...
    assert body.index("mma_stage_sums(sums_odd[0], ring_base + ring.s * STAGE_BYTES, part, true);") < \
        body.index("mma_stage_sums(sums[0], ring_base + ring.s * STAGE_BYTES, part, false);")
    for fresh, before in (("sums", "sums_odd"), ("sums_odd", "sums")):  # ... then each chunk's first wgmma, fresh,
        issue = body.index(f"mma_stage_sums({fresh}[0], ring_base + ring.s * STAGE_BYTES, part, false);")
        wait = body.index("wgmma_wait<1>();", issue)  # ... a wait that leaves it in flight ...
        add = body.index(f"acc[0][i] += {before}[0][i];", wait)  # ... and the chunk before added under it
        assert issue < wait < add and body.index(f"fence_operand({before}[0]);", wait) < add
    assert "wgmma_wait<0>" not in loop[:loop.index("wgmma_wait<0>();  // the tile's last k-block")]
    assert "store_tile(sums, tile, part, D," in code and "__device__ __forceinline__ void fence_operand(" in code
    tile = code.index("const GroupTile tile = group_tile(group_end, tile_end, t);  // found here")
    assert code.index("wgmma_wait<0>();  // the tile's last k-block") < tile < code.index("            store_tile(")


# K: one k-block (a partial one), a partial second, one and two chunks, the pair loop once, 4 and 6 times with an
# odd and an even chunk count, long K (DeepSeek-V3's 7168, Llama-3-70B's 14336 at 4 k-blocks a chunk)
@pytest.mark.parametrize("k", [16, 144, 1024, 2048, 4096, 7168, 14336])
@pytest.mark.parametrize("scaling, epilogue", [("tensor", "none"), ("rowwise", "none"), ("rowwise", "bias")])
def test_offered_static_configs_compile_without_spills_or_serialised_wgmma(k, scaling, epilogue, tmp_path):
    spec = GroupedSpec(8, 4096, 4096, k, "e4m3", epilogue, scaling=scaling)
    offered = [c for c in candidates(spec) if c.overlap_static]
    assert offered
    for config in offered:
        compiled = _compiled(spec, config, tmp_path)
        assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, config
        assert "C751" not in compiled.log and "C752" not in compiled.log, f"{config}: wgmma serialised"


def _model_text(code: str) -> str:
    """The static loop's text as the host model runs it: the tile found after the loop is the model's own, and
    fence_operand (an empty asm) a no-op."""
    late = "            const GroupTile tile = group_tile(group_end, tile_end, t);  // found here, not live across the main loop\n"
    assert late in code
    return code.replace(late, "").replace("fence_operand(", "(void)(")


def test_static_tile_loop_releases_each_slot_once_in_order_on_the_cpu(tmp_path):
    from test_grouped_cpu import _run_tile_loop

    assert _run_tile_loop(_model_text(render(TENSOR, STATIC).code), "2, 3, 4, 8, 16", tmp_path) == "ok"


@pytest.mark.parametrize("mistake, finding", [
    (("acc[0][i] += sums_odd[0][i];", "acc[0][i] += sums[0][i];"), "not every k-block's sum once"),
    (("for (int chunk = 1; chunk + 2 < chunks; chunk += 2)", "for (int chunk = 1; chunk + 3 < chunks; chunk += 2)"),
     "k-blocks unreleased"),
    (("sums[0][i] = sums_odd[0][i] + acc[0][i];", "sums[0][i] = sums_odd[0][i];"), "not every k-block's sum once")])
def test_the_model_catches_static_loop_mistakes(mistake, finding, tmp_path):
    from test_grouped_cpu import _run_tile_loop

    code = _model_text(render(TENSOR, STATIC).code)
    assert mistake[0] in code
    assert finding in _run_tile_loop(code.replace(mistake[0], mistake[1]), "2, 4", tmp_path)
