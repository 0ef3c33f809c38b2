"""The wgmma family without a GPU: constraints, rendering, NVRTC for sm_90a, the SASS it makes."""
from __future__ import annotations

import dataclasses
import random
import re
import shutil
import subprocess

import pytest

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernels.wgmma.schedule import schedule_for
from gemmtune.export.toolchain import wheel_tool_candidates
from gemmtune.kernels import family_for, get_family
from gemmtune.spec import GemmSpec

FAMILY = get_family("wgmma")
LADDER = FAMILY.ladder("sm_90a")


def _cuobjdump() -> str | None:
    """The nvidia-cuda-cuobjdump wheel's tool (the test extra installs it), else one on PATH."""
    found = next((str(p) for p in wheel_tool_candidates("cuobjdump") if p.is_file()), None)
    return found or shutil.which("cuobjdump")


def _compile(spec: GemmSpec, config):
    return compile_kernel(FAMILY.render(spec, config, "sm_90a"), "sm_90a")


@pytest.mark.parametrize("step,config", LADDER, ids=[name for name, _ in LADDER])
@pytest.mark.parametrize("layout,dtype", [("nt", "bf16"), ("nn", "fp16"), ("tt", "bf16"), ("nt", "tf32")])
def test_ladder_compiles_without_spills(step, config, layout, dtype):
    spec = GemmSpec(1024, 2048, 512, layout, dtype, "relu+add")
    if FAMILY.rejections(config, spec, "sm_90a"):
        pytest.skip(f"{step} does not fit {dtype}: {FAMILY.rejections(config, spec, 'sm_90a')}")
    compiled = _compile(spec, config)
    assert compiled.arch == "sm_90a"
    assert compiled.resources.spills == 0, compiled.resources.summary()
    assert compiled.resources.stack_bytes == 0
    assert "Potential Performance Loss" not in compiled.log, compiled.log  # ptxas serialised the wgmma


def test_sampled_configs_compile_without_spills():
    space = FAMILY.space()
    from gemmtune.tune.space import candidate_set

    spec = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    candidates = candidate_set(space, spec, "sm_90a")
    for position in random.Random(7).sample(range(len(candidates)), 6):
        config = candidates.config(position)
        assert not FAMILY.rejections(config, spec, "sm_90a")
        assert _compile(spec, config).resources.spills == 0, config.describe()


def test_sass_holds_hgmma_and_tma(tmp_path):
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    compiled = _compile(GemmSpec(4096, 4096, 4096, "nt", "bf16"), FAMILY.default_config(None, "sm_90a"))
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.cubin)
    sass = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA.64x256x16.F32.BF16" in sass
    assert "UTMALDG.2D" in sass
    assert "LDL" not in sass and "STL" not in sass  # nothing in local memory


def test_family_choice_and_reasons():
    assert family_for(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_90").name == "wgmma"
    assert family_for(GemmSpec(64, 64, 64, "nt", "fp32"), "sm_90").name == "simt"
    # Off Hopper the mma.sync family; rows TMA cannot read in place are staged (copied into aligned
    # rows first), and a config without staging says why it is refused.
    assert family_for(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_80").name == "mma"
    assert family_for(GemmSpec(64, 64, 64, "nn", "tf32"), "sm_90a").name == "wgmma"  # B transposed in smem
    assert family_for(GemmSpec(1000, 999, 1000, "nn", "tf32"), "sm_90a").name == "wgmma"  # rows of B: 3996 bytes
    # too little work to repay the copies: mma reads the rows in place
    assert family_for(GemmSpec(77, 13, 5, "nn", "bf16"), "sm_90a").name == "mma"  # M > 16: not a GEMV either
    assert family_for(GemmSpec(64, 63, 64, "nn", "tf32"), "sm_90a").name == "mma"  # rows of B: 252 bytes
    assert "mma family" in FAMILY.yields(GemmSpec(64, 63, 64, "nn", "tf32"), "sm_90a")
    with pytest.raises(ConfigError, match="Hopper"):
        family_for(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_80", "wgmma")
    for spec in (GemmSpec(77, 13, 5, "nn", "bf16"), GemmSpec(64, 63, 64, "nn", "tf32")):
        staged = FAMILY.default_config(spec, "sm_90a")
        assert staged.stage_operands and not FAMILY.rejections(staged, spec, "sm_90a")
        with pytest.raises(ConfigError, match="multiple of 16"):
            FAMILY.render(spec, staged.with_(stage_operands=False), "sm_90a")


def test_rejections_name_their_constraint():
    spec = GemmSpec(256, 256, 256, "nt", "bf16")
    too_big = FAMILY.default_config(spec, "sm_90a").with_(stages=8)
    assert "shared_memory" in FAMILY.rejections(too_big, spec, "sm_90a")
    spilling = FAMILY.default_config(spec, "sm_90a").with_(bm=128, bn=256, consumers=1)
    assert "registers" in FAMILY.rejections(spilling, spec, "sm_90a")
    with pytest.raises(ConfigError, match="registers"):
        FAMILY.render(spec, spilling, "sm_90a")


def test_tensor_maps_describe_each_layout():
    config = FAMILY.default_config(None, "sm_90a")
    kmajor = FAMILY.render(GemmSpec(300, 200, 136, "nt", "fp16"), config, "sm_90a")
    a, b = kmajor.tensor_maps[:2]
    assert (a.dims, a.box, a.strides) == ((136, 300), (64, 128), (272,))
    assert (b.dims, b.box) == ((136, 200), (64, 256))
    mn_major = FAMILY.render(GemmSpec(304, 200, 136, "tn", "fp16"), config, "sm_90a")
    a, b = mn_major.tensor_maps[:2]
    assert (a.dims, a.box) == ((304, 136), (64, 64))  # A stored K×M: 64-wide chunks of M
    assert (b.dims, b.box) == ((200, 136), (64, 64))
    fused = FAMILY.render(GemmSpec(300, 200, 136, "nt", "fp16", "relu+add"),
                          config.with_(stages=3, tma_store=True, store_slices=1),
                          "sm_90a")
    assert [t.operand for t in fused.tensor_maps] == ["A", "B", "D", "C"]
    assert fused.args[-4:] == ("tma_A", "tma_B", "tma_D", "tma_C")


def _sass(tmp_path, compiled) -> str:
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.cubin)
    return subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def test_cluster_main_loop_has_no_gpu_wide_fence(tmp_path):
    """A stage release to the other block of a cluster must not fence: `.release.cluster` arrivals put
    MEMBAR.ALL.GPU before every one of them, in the main loop, and cost the cluster kernel 30% on an
    H100. Between the first and the last HGMMA there may be no MEMBAR.ALL.GPU at all."""
    config = dict(LADDER)["cluster_multicast"]
    sass = _sass(tmp_path, _compile(GemmSpec(4096, 4096, 4096, "nt", "bf16"), config))
    lines = sass.splitlines()
    mma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    assert mma and "UTMALDG.2D.MULTICAST" in sass
    loop = lines[mma[0]:mma[-1] + 1]
    assert not [line for line in loop if "MEMBAR.ALL.GPU" in line]
    assert any("SYNCS.ARRIVE.TRANS64.RED" in line for line in loop)  # the remote arrivals are there


def test_store_slices_and_pingpong_constraints():
    spec = GemmSpec(1024, 1024, 1024, "nt", "bf16")
    fused = GemmSpec(1024, 1024, 1024, "nt", "bf16", "relu+add")
    steps = dict(LADDER)
    sliced = steps["sliced_store"]
    assert not FAMILY.rejections(sliced.with_(store_slices=2), spec, "sm_90a")
    assert "store" in FAMILY.rejections(sliced.with_(store_slices=3), spec, "sm_90a")
    assert "store" in FAMILY.rejections(sliced.with_(store_slices=2), fused, "sm_90a")  # C is loaded whole
    assert "store" in FAMILY.rejections(sliced.with_(tma_store=False), spec, "sm_90a")
    narrow = sliced.with_(bn=128, store_slices=4)  # 32 bf16 columns: half a 128-byte row
    assert "store" in FAMILY.rejections(narrow, spec, "sm_90a")
    pingpong = steps["pingpong"]
    assert not FAMILY.rejections(pingpong, fused, "sm_90a")
    assert "tile" in FAMILY.rejections(pingpong.with_(persistent=False), spec, "sm_90a")
    assert "tile" in FAMILY.rejections(pingpong.with_(consumers=1), spec, "sm_90a")
    assert "registers" in FAMILY.rejections(pingpong.with_(bn=256), spec, "sm_90a")  # a whole 128x256 tile each
    # Each ping-pong consumer keeps its own epilogue buffer; cooperative ones share one.
    cooperative = pingpong.with_(pingpong=False)
    assert pingpong.epilogue_bytes(spec) == 2 * cooperative.epilogue_bytes(spec)
    assert pingpong.rows_per_consumer == 128 and cooperative.rows_per_consumer == 64


def test_pingpong_renders_turns_and_own_buffers():
    steps = dict(LADDER)
    code = FAMILY.render(GemmSpec(2056, 2184, 200, "nt", "fp16", "relu+add"), steps["pingpong"], "sm_90a").code
    assert "constexpr bool PINGPONG = true;" in code
    assert "mbarrier_wait(&mainloop_done[1 - turn]" in code and "mbarrier_arrive(&mainloop_done[turn])" in code
    plain = FAMILY.render(GemmSpec(2056, 2184, 200, "nt", "fp16"), steps["sliced_store"], "sm_90a").code
    assert "mainloop_done[1 - turn]" not in plain  # cooperative consumers read every stage: no turns


@pytest.mark.parametrize("spec", [GemmSpec(2048, 5120, 5120, "nt", "bf16"),
                                  GemmSpec(1024, 1024, 16384, "nt", "fp16", "relu+add"),
                                  GemmSpec(1000, 1496, 4104, "tn", "bf16", "bias_row+gelu")],
                         ids=lambda s: s.short())
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_split_tail_compiles_without_spills(tmp_path, spec, cluster_m):
    """Split tiles keep their accumulators in registers: the partial sums go to module memory with
    128-bit stores, nothing to local memory."""
    config = dict(LADDER)["sliced_store"].with_(split_tail=True, cluster_m=cluster_m)
    if spec.epilogue.reads_c:
        config = dict(LADDER)["tma_store"].with_(split_tail=True, cluster_m=cluster_m)
    source = FAMILY.render(spec, config, "sm_90a")
    assert "store_partial(acc, consumer);" in source.code and "__device__ float4 partial_sums" in source.code
    compiled = compile_kernel(source, "sm_90a")
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0
    sass = _sass(tmp_path, compiled)
    assert "HGMMA" in sass and "LDL" not in sass and "STL" not in sass
    assert "STG.E.STRONG.GPU.128" in sass or "STG.E.128" in sass


def test_split_tail_only_where_the_last_wave_has_room():
    """Whole waves run whole tiles: no partial-sum code, and the same grid as the plain persistent
    kernel; a last wave over half full is shared out in even runs of k-blocks."""
    config = dict(LADDER)["sliced_store"]
    spec = GemmSpec(128 * 12, 256 * 11, 4096, "nt", "bf16")  # 132 tiles: one full wave
    plain, split = FAMILY.render(spec, config, "sm_90a"), FAMILY.render(spec, config.with_(split_tail=True), "sm_90a")
    assert "partial_sums" not in split.code and split.grid == plain.grid == (132, 1, 1)
    assert not split.co_resident
    near_full = GemmSpec(4096, 4096, 4096, "nt", "bf16")  # 512 tiles: 116 left over, too full to pay to share
    assert "partial_sums" not in FAMILY.render(near_full, config.with_(split_tail=True), "sm_90a").code
    big = GemmSpec(8192, 8192, 8192, "nt", "bf16")  # 2048 tiles: 68 left over, shared by 132 blocks
    shared = FAMILY.render(big, config.with_(split_tail=True), "sm_90a")
    assert "partial_sums" in shared.code and "TAIL_WORKERS = 132" in shared.code and shared.grid == (132, 1, 1)
    assert shared.co_resident
    small = GemmSpec(512, 512, 8192, "nt", "bf16")  # 8 tiles of 128 k-blocks: 8 ways (16 k-blocks each)
    assert FAMILY.render(small, config, "sm_90a").grid == (8, 1, 1)
    assert FAMILY.render(small, config.with_(split_tail=True), "sm_90a").grid == (64, 1, 1)


def test_split_tail_constraints():
    spec = GemmSpec(1024, 1024, 1024, "nt", "bf16")
    assert "schedule" in FAMILY.rejections(dict(LADDER)["pingpong"].with_(split_tail=True), spec, "sm_90a")
    assert "schedule" in FAMILY.rejections(dict(LADDER)["wide_tile"].with_(split_tail=True), spec, "sm_90a")
    assert not FAMILY.rejections(dict(LADDER)["cluster_multicast"].with_(split_tail=True), spec, "sm_90a")


def test_c_spread_loads_small_c_boxes_only_for_c():
    config = dict(LADDER)["tma_store"].with_(c_spread=True)
    fused = GemmSpec(1024, 1024, 1024, "nt", "fp16", "relu+add")
    source = FAMILY.render(fused, config, "sm_90a")
    boxes = {t.name: t.box for t in source.tensor_maps}
    assert boxes["tma_C"] == (64, 16) and boxes["tma_D"] == (64, 64)
    assert "constexpr int C_BOXES_PER_KB = 1;" in source.code
    assert "store" in FAMILY.rejections(config, fused.without_epilogue(), "sm_90a")  # no C to spread
    assert "store" in FAMILY.rejections(config.with_(tma_store=False), fused, "sm_90a")


def test_c_ring_constraints_and_slots():
    """C through the ring: a slice of C must fit a slot's larger operand region, so the whole-tile
    slice of a 128x256 fp16 tile (64 KB against 32 KB) is refused and two slices are not."""
    fused = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    ring = dict(LADDER)["sliced_store"].with_(store_slices=2, c_ring=True)
    assert not FAMILY.rejections(ring, fused, "sm_90a")
    assert ring.stages == 4 and ring.smem_bytes(fused) <= 227 * 1024  # the 4th stage fits beside the slice buffer
    assert "store" in FAMILY.rejections(ring.with_(store_slices=1), fused, "sm_90a")  # 64 KB slice
    assert "store" in FAMILY.rejections(ring, fused.without_epilogue(), "sm_90a")  # no C
    assert "store" in FAMILY.rejections(ring.with_(c_spread=True), fused, "sm_90a")
    assert "store" in FAMILY.rejections(ring.with_(tma_store=False, store_slices=1), fused, "sm_90a")
    source = FAMILY.render(fused, ring, "sm_90a")
    assert "unsigned char* c_slots = reinterpret_cast<unsigned char*>(C_IN_A_REGION ? a_tiles : b_tiles);" in source.code
    assert "store_tile_smem(acc, tile_m, tile_n, consumer, out_buf, tma_D, c_slots, full, empty, ring" in source.code
    assert {t.name: t.box for t in source.tensor_maps}["tma_C"] == (64, 64)
    compiled = _compile(fused, ring)
    assert compiled.resources.spills == 0
    # Without c_ring the C tile has its own buffer and the ring never sees it.
    assert "c_slots" not in FAMILY.render(fused, dict(LADDER)["tma_store"].with_(c_spread=True), "sm_90a").code


def test_stmatrix_and_c_prefetch_constraints_and_sass(tmp_path):
    """stmatrix is for a 16-bit D through the TMA-store buffer; c_l2_prefetch only warms c_ring's
    loads. The fused kernel's SASS then moves C and D four words per instruction (LDSM/STSM, no
    32-bit LDS/STS left in the epilogue) and asks L2 for C (UTMAPF)."""
    fused = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    ring = dict(LADDER)["sliced_store"].with_(store_slices=2, c_ring=True)
    both = ring.with_(stmatrix=True, c_l2_prefetch=True)
    assert not FAMILY.rejections(both, fused, "sm_90a")
    assert "store" in FAMILY.rejections(ring.with_(c_ring=False, c_l2_prefetch=True), fused, "sm_90a")
    assert "store" in FAMILY.rejections(both, dataclasses.replace(fused, out_dtype="fp32"), "sm_90a")
    assert "store" in FAMILY.rejections(dict(LADDER)["persistent"].with_(stmatrix=True), fused, "sm_90a")
    assert not FAMILY.rejections(both.without_c_options(), fused.without_epilogue(), "sm_90a")
    assert not both.without_c_options().c_l2_prefetch and both.without_c_options().stmatrix
    compiled = _compile(fused, both)
    assert compiled.resources.spills == 0
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(compiled.cubin)
    sass = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert sass.count("STSM") == 16 and sass.count("LDSM") == 16  # 128x128 fp16 per consumer slice: 2 slices
    assert not re.search(r"\s(STS|LDS)[\s.]", sass)  # no one-word shared-memory access left
    assert "UTMAPF.L2.2D" in sass


def test_overlap_epilogue_constraints():
    sliced = dict(LADDER)["sliced_store"].with_(store_slices=2, overlap_epilogue=True)
    plain, fused = GemmSpec(4096, 4096, 4096, "nt", "bf16"), GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    assert not FAMILY.rejections(sliced, plain, "sm_90a")
    assert not FAMILY.rejections(sliced.with_(c_ring=True, stages=2), fused, "sm_90a")
    for config, spec, fragment in [
            (sliced.with_(tma_store=False, store_slices=1), plain, "part of the TMA-store epilogue"),
            (sliced.with_(store_slices=1), plain, "its own store slices"),
            (sliced.with_(bn=192), GemmSpec(4096, 4096, 4096, "nt", "tf32"), "its own store slices"),  # 96-column halves
            (sliced.with_(persistent=False, group_m=1), plain, "its own store slices"),
            (sliced.with_(bn=128, pingpong=True), plain, "its own store slices"),
            (sliced, fused, "needs the whole tile buffer"),  # C in slices comes through the ring
            # the last k-block's slot is held until the lower half's C slices (loaded after it) are read
            (sliced.with_(c_ring=True, store_slices=4, bn=128, stages=2),
             GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add", out_dtype="fp32"), "it needs 3 stages"),
            (sliced, GemmSpec(4096, 4096, 64, "nt", "bf16"), "K is one k-block")]:
        reasons = " ".join(FAMILY.rejections(config, spec, "sm_90a").values())
        assert fragment in reasons, (config.describe(), reasons)


OVERLAP_CASES = [
    (GemmSpec(4096, 4096, 4096, "nt", "bf16"), {}),
    (GemmSpec(4096, 4096, 4096, "nn", "fp16", "relu+add"), {"c_ring": True, "c_l2_prefetch": True, "stmatrix": True,
                                                            "cluster_m": 2, "serpentine": True}),
    (GemmSpec(2000, 3000, 1000, "tt", "bf16", "bias_row+gelu+add", out_dtype="fp32"),
     {"c_ring": True, "bn": 128, "store_slices": 4, "stages": 3}),
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), {"store_slices": 4}),
    (GemmSpec(8192, 8192, 8192, "nt", "fp16"), {"split_tail": True, "cluster_m": 2}),  # a split tail: partial pieces
    (GemmSpec(1000, 6392, 4600, "tn", "fp16", "relu+add"), {"split_tail": True, "c_ring": True}),  # shares across units
    (GemmSpec(4096, 4096, 4096, "nt", "bf16"), {"bn": 128}),
    (GemmSpec(4096, 4096, 4096, "nt", "bf16"), {"bm": 64, "consumers": 1}),
]


@pytest.mark.parametrize("spec,changes", OVERLAP_CASES, ids=[f"{s.short()}-{sorted(c)}" for s, c in OVERLAP_CASES])
def test_overlap_epilogue_keeps_wgmma_asynchronous(spec, changes):
    """The overlapped epilogue only pays where ptxas keeps every wgmma asynchronous: no serialisation
    report (C7511/C7514), no spills, and only half-width wgmma in the kernel."""
    config = dict(LADDER)["sliced_store"].with_(store_slices=2, overlap_epilogue=True).with_(**changes)
    assert not FAMILY.rejections(config, spec, "sm_90a"), FAMILY.rejections(config, spec, "sm_90a")
    source = FAMILY.render(spec, config, "sm_90a")
    compiled = compile_kernel(source, "sm_90a")
    assert "Potential Performance Loss" not in compiled.log, compiled.log
    assert compiled.resources.spills == 0, compiled.resources.summary()
    half = config.bn // 2
    assert f"wgmma.mma_async.sync.aligned.m64n{half}k" in source.code
    assert f"m64n{config.bn}k" not in source.code


def test_d_over_c_constraints_buffer_and_code(tmp_path):
    """d_over_c writes D over C in its ring slot (c_ring and stmatrix, not the overlapped write-back):
    no store buffer in shared memory, the TMA store reads the slot, and the slot goes back only after
    that store has read it. Configs without it keep their JSON (and database keys)."""
    fused = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    ring = dict(LADDER)["sliced_store"].with_(store_slices=2, c_ring=True, stmatrix=True)
    over = ring.with_(d_over_c=True)
    assert not FAMILY.rejections(over, fused, "sm_90a")
    for broken in (over.with_(stmatrix=False), over.with_(c_ring=False), over.with_(overlap_epilogue=True),
                   over.with_(tma_store=False, store_slices=1, c_ring=False, stmatrix=False)):
        assert "store" in FAMILY.rejections(broken, fused, "sm_90a"), broken.describe()
    assert over.smem_bytes(fused) == ring.smem_bytes(fused) - 128 * 128 * 2  # one 128x128 fp16 slice buffer
    # ... and the kernel lays out its shared memory without it (its barriers sit right after the ring)
    assert "constexpr int EPI_BYTES = 0;" in FAMILY.render(fused, over, "sm_90a").code
    assert "constexpr int EPI_BYTES = 0;" not in FAMILY.render(fused, ring, "sm_90a").code
    assert not over.without_c_options().d_over_c
    assert "d_over_c" not in ring.to_json() and over.to_json()["d_over_c"] is True
    assert type(over).from_json(over.to_json()) == over
    code = FAMILY.render(fused, over, "sm_90a").code
    assert "tma_store_2d_hinted(&tma_D, c_tile" in code and "stmatrix_x4(c_tile" in code
    assert "tma_store_wait_read_but_one();" in code  # a slice's slot waits for its own store only
    assert "tma_store_wait_read();  // the previous slice's store has read the buffer" not in code
    compiled = _compile(fused, over.with_(cluster_m=2, c_l2_prefetch=True, serpentine=True, split_tail=True))
    assert compiled.resources.spills == 0, compiled.resources.summary()
    assert "Potential Performance Loss" not in compiled.log, compiled.log



def test_c_first_buffer_constraints_and_code():
    """c_first_buffer gives d_over_c's first slice of C the store buffer's room: it needs d_over_c and
    2 or 4 slices; the producer loads that slice there (its own barriers), the ring takes the rest,
    and the buffer goes back with the last ring slot."""
    fused = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
    over = dict(LADDER)["sliced_store"].with_(store_slices=2, c_ring=True, stmatrix=True, d_over_c=True)
    first = over.with_(c_first_buffer=True)
    assert not FAMILY.rejections(first, fused, "sm_90a")
    assert "store" in FAMILY.rejections(first.with_(d_over_c=False), fused, "sm_90a")
    assert first.smem_bytes(fused) == over.smem_bytes(fused) + 128 * 128 * 2
    assert not first.without_c_options().c_first_buffer and "c_first_buffer" not in over.to_json()
    code = FAMILY.render(fused, first, "sm_90a").code
    assert "load_c_boxes(tma_C, out_buf, &c_full[0], tile_m, tile_n, 0, 0, C_BOXES, 0);" in code
    assert "for (int slice = 1; slice < STORE_SLICES; ++slice)" in code  # the ring's slices
    assert "mbarrier_arrive(&c_empty[0]);  // and the first slice's buffer" in code
    for slices in (2, 4):
        compiled = _compile(fused, first.with_(store_slices=slices, cluster_m=2, c_l2_prefetch=True, split_tail=True))
        assert compiled.resources.spills == 0, compiled.resources.summary()
        assert "Potential Performance Loss" not in compiled.log, compiled.log


def test_with_c_path_only_where_blocks_run_several_tiles_of_a_fused_epilogue():
    """default_config and the chooser's ring candidate take the rest of the C path (stmatrix, C's
    L2 prefetch, d_over_c, c_first_buffer) where the epilogue reads C through the ring and blocks
    run more than one tile each; not for one wave of tiles, nor without C, nor for fp32 output
    (stmatrix moves 16-bit values), and never into a rejected config."""
    from gemmtune.chooser import rank
    from gemmtune.kernels.wgmma.config import C_PATH, default_config, with_c_path

    many = GemmSpec(3072, 4096, 768, "nt", "fp16", "relu+add")  # 384 tiles of 128x256
    config = default_config(many)
    assert all(getattr(config, name) for name in C_PATH) and not FAMILY.rejections(config, many, "sm_90a")
    assert with_c_path(config.without_c_options().with_(c_ring=True), many) == config
    chosen = rank(many, "sm_90a", 132, "wgmma")[0].config
    assert chosen.c_ring and chosen.d_over_c and chosen.c_first_buffer
    one_wave = GemmSpec(2048, 2048, 2048, "nt", "fp16", "relu+add")  # 128 tiles on 132 SMs
    assert default_config(one_wave).c_ring and not default_config(one_wave).d_over_c
    assert with_c_path(config.with_(**{name: False for name in C_PATH}), many, sm_count=384).d_over_c is False
    plain = GemmSpec(3072, 4096, 768, "nt", "fp16")
    assert not default_config(plain).d_over_c and with_c_path(config, plain) is config
    tf32 = GemmSpec(3072, 4096, 768, "nt", "tf32", "relu+add")
    assert default_config(tf32).c_ring and not default_config(tf32).stmatrix
    _compile(many, config)


def test_fitted_widths_build_for_k_major_b_and_stay_out_of_the_space():
    """Any multiple of 8 from 64 to 256 is a tile width for B stored K-major (nt, tt): it renders,
    compiles without spills, and stores D directly; B stored N-contiguous (nn, tn) keeps multiples of
    64 (its boxes); the space and the chooser keep the measured widths."""
    from gemmtune.kernels.wgmma.config import MEASURED_BN, WgmmaConfig
    from gemmtune.kernels.wgmma.space import WGMMA_DOMAINS

    fitted = WgmmaConfig(bm=128, bn=104, stages=6, tma_store=False, store_slices=1, split_tail=True)
    for layout, dtype in (("nt", "tf32"), ("nt", "bf16"), ("tt", "fp16")):
        spec = GemmSpec(5000, 300, 2048, layout, dtype, "bias_col")
        assert not FAMILY.rejections(fitted, spec, "sm_90a")
        compiled = _compile(spec, fitted)
        assert compiled.resources.spills == 0 and "wgmma.mma_async.sync.aligned.m64n104k" in compiled.source.code
    nn = GemmSpec(5000, 304, 2048, "nn", "bf16")
    assert "boxes of 64 columns" in " ".join(FAMILY.rejections(fitted, nn, "sm_90a").values())
    for bn in (60, 264, 100):
        assert "multiple of 8 from 64 to 256" in " ".join(
            FAMILY.rejections(fitted.with_(bn=bn), GemmSpec(5000, 300, 2048, "nt", "bf16"), "sm_90a").values())
    assert "clusters" not in " ".join(FAMILY.rejections(fitted, GemmSpec(5000, 300, 2048, "nt", "bf16"), "sm_90a"))
    assert FAMILY.rejections(fitted.with_(cluster_m=2), GemmSpec(5000, 300, 2048, "nt", "bf16"), "sm_90a")
    assert dict(WGMMA_DOMAINS)["bn"] == MEASURED_BN == (64, 128, 192, 256)


def test_overlap_epilogue_dropped_where_every_tile_is_split():
    """Where the schedule splits every tile along K, no write-back can overlap a next tile: the kernel
    is rendered without overlap_epilogue (full-width wgmma, a note in its head), while the artifact
    keeps the requested config; a schedule with whole tiles keeps the overlap."""
    config = dict(LADDER)["sliced_store"].with_(store_slices=2, overlap_epilogue=True, split_tail=True)
    long_k = GemmSpec(512, 512, 65536, "nt", "bf16")
    assert schedule_for(long_k, config).whole_units == 0
    source = FAMILY.render(long_k, config, "sm_90a")
    assert "m64n256k16" in source.code and "m64n128k16" not in source.code
    assert "rendered without overlap_epilogue" in source.code
    assert source.config == config.to_json()
    square = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    assert schedule_for(square, config).whole_units > 0
    kept = FAMILY.render(square, config, "sm_90a").code
    assert "m64n128k16" in kept and "m64n256k16" not in kept and "rendered without" not in kept


# The bias prefetch (writeback.bias_prefetch_call, BIAS_PREFETCH): each loop kind asks L1 for the tile's bias once a piece,
# over the columns for bias_col and the consumer's rows for bias_row (swap-AB turns the caller's
# bias_col into its kernel's bias_row); kernels without a bias vector have neither helper nor call.
_PP = dict(bm=128, bn=128, stages=4, consumers=2, pingpong=True, tma_store=True, stmatrix=True, split_tail=False)
_OVL = dict(bm=128, bn=256, stages=4, consumers=2, tma_store=True, store_slices=2, stmatrix=True, overlap_epilogue=True)
PREFETCH_CASES = [
    (GemmSpec(1000, 768, 512, "nt", "bf16", "bias_col+gelu"), {}, "tile_n * BN, BN, N"),
    (GemmSpec(1000, 1024, 512, "nt", "bf16", "bias_col"), _OVL, "tile_n * BN, BN, N"),
    (GemmSpec(1000, 768, 512, "nt", "fp16", "bias_col+relu"), _PP, "tile_n * BN, BN, N"),
    (GemmSpec(1000, 768, 512, "nt", "bf16", "bias_row+add"), {}, "tile_m * BM + consumer * CONSUMER_ROWS, ROWS_PER_CONSUMER, M"),
    (GemmSpec(24, 768, 512, "nt", "bf16", "bias_col"), dict(bm=64, bn=24, stages=8, consumers=1, swap_ab=True, tma_store=False,
                                                                   stmatrix=False, store_slices=1),
     "tile_m * BM + consumer * CONSUMER_ROWS, ROWS_PER_CONSUMER, M"),
    (GemmSpec(300, 200, 96, "nn", "fp32", "bias_col", math="3xtf32"), dict(bm=128, bn=128, stages=3), "tile_n * BN, BN, N"),
    (GemmSpec(300, 200, 96, "nn", "tf32", "bias_col"), dict(bm=128, bn=128, stages=3), "tile_n * BN, BN, N"),
]


@pytest.mark.parametrize("spec,fields,span", PREFETCH_CASES, ids=lambda v: v.short() if isinstance(v, GemmSpec) else None)
def test_a_bias_is_prefetched_into_l1_once_a_piece(spec, fields, span):
    config = FAMILY.default_config(spec, "sm_90a").with_(**fields) if fields else FAMILY.default_config(spec, "sm_90a")
    assert not FAMILY.rejections(config, spec, "sm_90a"), FAMILY.rejections(config, spec, "sm_90a")
    code = FAMILY.render(spec, config, "sm_90a").code
    calls = [line.strip() for line in code.split("\n") if "prefetch_bias_l1(bias," in line]
    assert calls == [f"if (writes_d) prefetch_bias_l1(bias, {span});  // read by the write-back"]
    assert code.count("void prefetch_bias_l1(") == 1
    compiled = _compile(spec, config)
    assert compiled.resources.spill_store_bytes == 0


@pytest.mark.parametrize("epilogue", ["none", "relu+add", "gelu"])
def test_no_bias_no_prefetch(epilogue):
    spec = GemmSpec(1000, 768, 512, "nt", "bf16", epilogue)
    assert "prefetch_bias_l1" not in FAMILY.render(spec, FAMILY.default_config(spec, "sm_90a"), "sm_90a").code


@pytest.mark.parametrize("epilogue", ["bias_col", "bias_col+gelu", "bias_col+add"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_staged_bias_fits_beside_three_consumers_sums(epilogue, dtype):
    # 192x192 tiles: 96 sums a thread under 152 registers; the bias staged as packed pairs (24 words) fits
    # beside them, where 48 floats spilled 72-132 B (NVRTC 13.0, before bias_words).
    spec = GemmSpec(6000, 2304, 768, "nt", dtype, epilogue)
    config = FAMILY.default_config(spec, "sm_90a").with_(bm=192, bn=192, stages=3, consumers=3, tma_store=True,
                                                        store_slices=1, stmatrix=True, overlap_epilogue=False,
                                                        c_ring=False, c_l2_prefetch=False, d_over_c=False,
                                                        c_first_buffer=False, cluster_m=1)
    assert not FAMILY.rejections(config, spec, "sm_90a"), FAMILY.rejections(config, spec, "sm_90a")
    assert "u32 bias_words[SLICE_COLS / 8];" in FAMILY.render(spec, config, "sm_90a").code
    assert _compile(spec, config).resources.spill_store_bytes == 0


@pytest.mark.parametrize("bn,slices", [(224, 2), (176, 1), (80, 1)])
def test_a_ragged_slice_ends_in_an_overlapping_box(bn, slices):
    """A TMA-stored slice that is not whole 128-byte rows (WgmmaConfig.ragged_slice) is stored in whole boxes
    whose last starts OUT_CHUNK columns before the slice's end; the buffer holds whole boxes, and kernels of
    whole-box slices render none of it. Where the rule does not hold (C read, fp32 D, 8-column steps), the
    family refuses the width."""
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    spec = GemmSpec(257, 3000, 1000, "nt", "bf16", epilogue="bias_col+gelu")
    config = WgmmaConfig(bm=128, bn=bn, stages=3, consumers=2, specialized=True, persistent=True, tma_store=True,
                         store_slices=slices, split_tail=True, stmatrix=True)
    family = get_family("wgmma")
    assert not family.rejections(config, spec, "sm_90a") and config.ragged_slice(spec)
    cols = bn // slices
    boxes = -(-cols // 64)
    assert config.epilogue_bytes(spec) == 128 * boxes * 128
    source = family.render(spec, config, "sm_90a")
    assert "LAST_BOX_COL = SLICE_COLS - OUT_CHUNK" in source.code and "last_box_offset(r_at" in source.code
    assert compile_kernel(source, "sm_90a").resources.spill_store_bytes == 0
    whole = config.with_(bn=256, store_slices=2)
    assert not whole.ragged_slice(spec) and "LAST_BOX" not in family.render(spec, whole, "sm_90a").code
    assert "store" in family.rejections(config, GemmSpec(257, 3000, 1000, "nt", "bf16", epilogue="add"), "sm_90a")
    assert "store" in family.rejections(config.with_(bn=bn - 8), spec, "sm_90a")


def test_a_ragged_slice_needs_the_persistent_specialized_kernel():
    """Only the kernel the GPU tests ran stores ragged slices (tests/test_gpu_ragged_store.py)."""
    from gemmtune.kernels.wgmma.config import WgmmaConfig

    spec = GemmSpec(257, 3000, 1000, "nt", "bf16")
    config = WgmmaConfig(bm=128, bn=224, stages=3, consumers=2, specialized=True, persistent=True, tma_store=True,
                         store_slices=2, split_tail=True, stmatrix=True)
    family = get_family("wgmma")
    assert not family.rejections(config, spec, "sm_90a")
    assert "store" in family.rejections(config.with_(persistent=False, split_tail=False), spec, "sm_90a")
