"""The mma.sync family without a GPU: constraints, rendering, NVRTC for sm_75..sm_120, its SASS."""
from __future__ import annotations

import pytest
from known_spills import allowed
from sass_dump import sass as dump_sass

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.mma.render import operands
from gemmtune.spec import GemmSpec

FAMILY = get_family("mma")
STEPS = [name for name, _ in FAMILY.ladder("sm_80")]
DTYPES = ("bf16", "fp16", "tf32")
LAYOUTS = ("nn", "nt", "tn", "tt")
SHAPES = ((512, 384, 256), (127, 129, 131))  # aligned, and odd everywhere (2-byte element copies)
OTHER_ARCHES = ("sm_75", "sm_86", "sm_89", "sm_100", "sm_120")


def _step(arch: str, name: str):
    return dict(FAMILY.ladder(arch))[name]


def _check(spec: GemmSpec, config, arch: str):
    assert not FAMILY.rejections(config, spec, arch), FAMILY.rejections(config, spec, arch)
    compiled = compile_kernel(FAMILY.render(spec, config, arch), arch)
    expected = allowed("mma", f"{spec.short()} {arch}")
    found = (compiled.resources.spills, compiled.resources.stack_bytes)
    assert found == expected, (spec.short(), arch, compiled.resources.summary())
    return compiled


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("step", STEPS)
def test_every_step_dtype_layout_and_shape_compiles_without_spills(arch, step):
    config = _step(arch, step)
    for dtype in DTYPES:
        for layout in LAYOUTS:
            for shape in SHAPES:
                _check(GemmSpec(*shape, layout, dtype), config, arch)


@pytest.mark.parametrize("arch", OTHER_ARCHES)
@pytest.mark.parametrize("step", STEPS)
def test_every_step_compiles_on_other_arches(arch, step):
    """Each step once per dtype the arch runs, layouts and shapes rotating."""
    index = STEPS.index(step)
    for d, dtype in enumerate(DTYPES):
        spec = GemmSpec(*SHAPES[(index + d) % 2], LAYOUTS[(index + d) % 4], dtype)
        if FAMILY.supports(spec, arch):
            assert arch == "sm_75" and dtype != "fp16"
            continue
        _check(spec, _step(arch, step), arch)


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu", "alpha+beta+relu",
                                      "bias_col+gelu+add"])
def test_every_epilogue_compiles(epilogue):
    for i, (dtype, layout, shape, out) in enumerate([("bf16", "tn", (127, 129, 131), None),
                                                    ("fp16", "nt", (512, 384, 256), "fp32"),
                                                    ("tf32", "tt", (127, 130, 131), None)]):
        spec = GemmSpec(*shape, layout, dtype, epilogue, out)
        _check(spec, _step("sm_80", STEPS[-1 - i]), "sm_80")


def test_copy_width_follows_the_stored_rows():
    config = _step("sm_80", "tuned")
    widths = lambda spec: tuple((op.copy_bytes, op.use_async) for op in operands(spec, config, "sm_80"))  # noqa: E731
    assert widths(GemmSpec(256, 256, 256, "nn", "bf16")) == ((16, True), (16, True))
    assert widths(GemmSpec(256, 256, 1500, "nn", "bf16")) == ((8, True), (16, True))  # A rows: 3000 B
    assert widths(GemmSpec(256, 258, 1502, "nn", "fp16")) == ((4, True), (4, True))
    assert widths(GemmSpec(256, 256, 131, "nt", "fp16")) == ((2, False), (2, False))  # no 2-byte cp.async
    assert widths(GemmSpec(7, 13, 5, "tt", "tf32")) == ((4, True), (4, True))
    assert [op.use_ldmatrix for op in operands(GemmSpec(64, 64, 64, "tn", "tf32"), config, "sm_80")] == [False, False]
    assert not any(op.use_async for op in operands(GemmSpec(64, 64, 64, "nn", "fp16"), _step("sm_75", "tuned"), "sm_75"))


@pytest.mark.parametrize("step", STEPS)
def test_sass_holds_hmma_ldsm_and_ldgsts(tmp_path, step):
    config = _step("sm_80", step)
    sass = dump_sass(tmp_path, _check(GemmSpec(1024, 1024, 1024, "nn", "bf16"), config, "sm_80").cubin)
    assert "HMMA.16816.F32.BF16" in sass
    assert ("LDSM" in sass) == config.ldmatrix
    assert ("LDSM.16.MT88.4" in sass) == config.ldmatrix  # B is N-contiguous: ldmatrix.trans
    assert ("LDGSTS" in sass) == config.async_copy
    assert "LDL" not in sass and "STL" not in sass


def test_sass_of_tf32_and_sm_75(tmp_path):
    sass = dump_sass(tmp_path, _check(GemmSpec(1024, 1024, 1024, "nt", "tf32"), _step("sm_90", "tuned"), "sm_90").cubin)
    assert "HMMA.1688.F32.TF32" in sass and "LDSM" in sass and "LDGSTS" in sass
    sass = dump_sass(tmp_path, _check(GemmSpec(1024, 1024, 1024, "tn", "fp16"), _step("sm_75", "tuned"), "sm_75").cubin)
    assert "HMMA.1688.F32" in sass and "LDSM.16.MT88.4" in sass and "LDGSTS" not in sass


def test_source_is_deterministic():
    spec = GemmSpec(127, 129, 131, "tn", "bf16", "bias_row+gelu+add")
    first = [FAMILY.render(spec, config, "sm_80").code for _, config in FAMILY.ladder("sm_80")]
    again = [FAMILY.render(spec, config, "sm_80").code for _, config in FAMILY.ladder("sm_80")]
    assert first == again and len(set(first)) == len(first)


def test_rejections_name_their_constraint():
    spec = GemmSpec(256, 256, 256, "nn", "bf16")
    tuned = _step("sm_80", "tuned")
    assert "shared_memory" in FAMILY.rejections(tuned.with_(stages=5, bm=256), spec, "sm_86")
    assert "registers" in FAMILY.rejections(tuned.with_(wm=128, wn=64, bm=128), spec, "sm_80")
    assert "tile" in FAMILY.rejections(tuned.with_(wm=48), spec, "sm_80")
    assert "pipeline" in FAMILY.rejections(tuned, GemmSpec(256, 256, 256, "nn", "fp16"), "sm_75")
    assert "dtype" in FAMILY.rejections(tuned, GemmSpec(256, 256, 256, "nn", "fp32"), "sm_80")
    assert all(reason for reason in FAMILY.rejections(tuned.with_(k_bytes=48, stages=9), spec, "sm_80").values())
    with pytest.raises(ConfigError, match="accumulators"):
        FAMILY.render(spec, tuned.with_(wm=128, wn=64, bm=128), "sm_80")
    assert "sm_80" in FAMILY.supports(GemmSpec(64, 64, 64, "nn", "bf16"), "sm_75")
    assert FAMILY.supports(GemmSpec(64, 64, 64, "nn", "fp16"), "sm_70")


def test_every_step_is_valid_for_every_supported_spec():
    for arch in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"):
        for name, config in FAMILY.ladder(arch):
            for dtype in DTYPES:
                spec = GemmSpec(1, 1, 1, "tt", dtype)
                if FAMILY.supports(spec, arch) is None:
                    assert not FAMILY.rejections(config, spec, arch), (arch, name, dtype)
                    assert not FAMILY.rejections(FAMILY.default_config(spec, arch), spec, arch)


def test_family_for_picks_mma_where_wgmma_and_gemv_do_not_apply():
    pick = lambda m, n, k, layout, dtype, arch: family_for(GemmSpec(m, n, k, layout, dtype), arch).name  # noqa: E731
    assert pick(1024, 1024, 1024, "nt", "bf16", "sm_90") == "wgmma"
    assert pick(1024, 1024, 1024, "tt", "fp16", "sm_90a") == "wgmma"
    assert pick(1024, 1024, 1024, "nt", "fp32", "sm_90") == "wgmma"  # auto: 3xtf32 (gemmtune.precision)
    assert pick(512, 512, 512, "nt", "fp32", "sm_90") == "simt"
    assert pick(1024, 1024, 1024, "nt", "fp32", "sm_80") == "simt"
    assert pick(16, 1024, 1024, "nt", "bf16", "sm_80") == "gemv"
    assert pick(16, 1024, 1024, "nt", "bf16", "sm_90") == "wgmma"  # swap-AB at 4-128 rows (wgmma.config.SWAP_AB_ROWS)
    assert pick(2, 1024, 1024, "nt", "bf16", "sm_90") == "gemv"
    assert pick(1024, 1, 1024, "nn", "bf16", "sm_80") == "gemv"
    # Rows TMA cannot read in place: wgmma with staged operands (copied into aligned rows first),
    # unless the shape is too small to repay the copies.
    assert pick(77, 13, 5, "nn", "bf16", "sm_90a") == "mma"
    assert pick(3000, 5000, 1500, "nn", "bf16", "sm_90") == "wgmma"  # A's rows are 3000 B
    assert pick(3000, 5000, 1500, "nn", "bf16", "sm_89") == "mma"
    assert pick(1024, 1024, 1024, "nn", "tf32", "sm_90") == "wgmma"  # MN-major tf32: transposed in smem
    assert pick(1024, 1024, 1024, "tt", "tf32", "sm_90") == "wgmma"
    assert pick(1024, 1023, 1024, "nn", "tf32", "sm_90") == "wgmma"  # B's rows: staged
    assert pick(1024, 1024, 1024, "nt", "tf32", "sm_90") == "wgmma"
    for arch in ("sm_80", "sm_86", "sm_89", "sm_100", "sm_120"):
        for dtype in DTYPES:
            assert pick(1024, 1024, 1024, "nt", dtype, arch) == "mma"
    assert pick(1024, 1024, 1024, "nn", "fp16", "sm_75") == "mma"
    with pytest.raises(ConfigError, match="sm_80"):
        family_for(GemmSpec(64, 64, 64, "nn", "bf16"), "sm_75")
    assert family_for(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_90", "mma").name == "mma"


def test_space_holds_the_ladder_and_default():
    space = FAMILY.space()
    assert space.family == "mma"
    for config in (_step("sm_80", "tuned"), FAMILY.default_config(GemmSpec(4096, 4096, 4096, "nn", "bf16"), "sm_80")):
        assert space.code_of(config) is not None
    for config in (_step("sm_80", "tuned"), _step("sm_80", "smem_mma")):
        assert FAMILY.config_from_json(config.to_json()) == config
        assert config.key() == FAMILY.config_from_json(config.to_json()).key()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_candidates_and_defaults_compile_without_spills(arch):
    from gemmtune.kernels.mma.config import candidates

    big = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    assert FAMILY.default_config(big, arch) == _step(arch, "tuned")  # 256x128, 128-byte slices (H100, 2026-11-26)
    for spec in (big, GemmSpec(4093, 4091, 4097, "nt", "bf16"), GemmSpec(3000, 5000, 1500, "nn", "fp16"),
                 GemmSpec(4096, 4096, 4096, "nn", "tf32")):
        found = candidates(spec, arch)
        assert found[0] == ("default", FAMILY.default_config(spec, arch)) and len(found) >= 4
        for _, config in found:
            _check(spec, config, arch)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_120"])
def test_odd_rows_default_keeps_its_copies_in_registers(arch):
    """Rows of odd length go through registers; the default for them is the tile measured to stage
    those registers across the mma work (2.1x faster than copies that wait on their loads)."""
    from gemmtune.kernels.mma.config import register_copied
    from gemmtune.kernels.mma.render import staged_in_registers

    for spec in (GemmSpec(4093, 4091, 4097, "nt", "fp16"), GemmSpec(2001, 3000, 1024, "tn", "fp16"),
                 GemmSpec(3000, 2001, 1024, "nn", "fp16")):
        assert register_copied(spec)
        config = FAMILY.default_config(spec, arch)
        assert (config.bm, config.bn, config.k_bytes) == (128, 256, 32)
        assert staged_in_registers(config, *operands(spec, config, arch))
    assert not register_copied(GemmSpec(3000, 5000, 1500, "nn", "bf16"))  # 8-byte rows: cp.async
    assert not register_copied(GemmSpec(4093, 4091, 4097, "nt", "tf32"))  # 4-byte elements: cp.async


def test_configs_that_would_spill_are_rejected():
    """16 warps of 64x64 (or 64x32 with two fragment sets) leave 128 registers a thread: ptxas spills."""
    from gemmtune.kernels.mma.config import MmaConfig

    spec = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    for config in (MmaConfig(bm=256, bn=256, wm=64, wn=64), MmaConfig(bm=128, bn=256, wm=64, wn=32)):
        assert "occupancy" in FAMILY.rejections(config, spec, "sm_90")
