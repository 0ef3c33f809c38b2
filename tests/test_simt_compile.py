"""The simt family compiles with NVRTC (no GPU): every ladder step, all layouts, no spills."""
import os

import pytest
from known_spills import allowed

from gemmtune.compiler import compile_kernel, parse_resource_report
from gemmtune.errors import ConfigError
from gemmtune.kernels.simt.render import render
from gemmtune.kernels.simt.config import SimtConfig, ladder, rejections
from gemmtune.spec import GemmSpec

SHAPES = [(4096, 4096, 4096), (127, 129, 131), (7, 13, 5)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("step", [name for name, _ in ladder()])
def test_ladder_steps_compile_without_spills(step, arch, tmp_path):
    config = dict(ladder(arch))[step]
    for layout in ("nn", "nt", "tn", "tt"):
        for shape in SHAPES:
            spec = GemmSpec(*shape, layout=layout)
            compiled = compile_kernel(render(spec, config, arch), arch, tmp_path)
            found = (compiled.resources.spills, compiled.resources.stack_bytes)
            assert found == allowed("simt", f"{spec.short()} {arch} {step}"), (layout, shape, compiled.resources.summary())
            assert len(compiled.cubin) > 1000 and ".entry" in compiled.ptx


SAMPLE_CONFIGS = [
    SimtConfig(bm=64, bn=64, bk=8, tm=4, tn=4, wm=32, wn=32, wniter=2, vec=4, stages=2, async_copy=True),
    SimtConfig(bm=128, bn=64, bk=16, tm=8, tn=4, wm=64, wn=32, wniter=2, vec=4, stages=2, async_copy=False, pad=4),
    SimtConfig(bm=64, bn=128, bk=8, tm=8, tn=8, wm=0, wn=0, wniter=1, vec=4, stages=2, async_copy=True),
    SimtConfig(bm=256, bn=128, bk=16, tm=8, tn=8, wm=64, wn=64, wniter=2, vec=4, stages=1, async_copy=False),
]


@pytest.mark.parametrize("config", SAMPLE_CONFIGS, ids=lambda c: c.describe().replace(" ", "_"))
def test_sample_configs_compile(config, tmp_path):
    assert rejections(config, GemmSpec(1000, 1000, 1000)) == {}
    for arch in ("sm_80", "sm_90"):
        compiled = compile_kernel(render(GemmSpec(1000, 1000, 1000, layout="nt"), config, arch), arch, tmp_path)
        assert compiled.resources.spills == 0, compiled.resources.summary()


def test_render_is_deterministic():
    spec = GemmSpec(1000, 999, 17, layout="tn", epilogue="relu+add")
    for _, config in ladder():
        assert render(spec, config).code == render(spec, config).code


def test_rejected_config_names_the_reason():
    bad = SimtConfig(bm=128, bn=128, bk=16, tm=8, tn=8, wm=0, wn=0, wniter=1, vec=4, stages=1, async_copy=True)
    with pytest.raises(ConfigError, match="cp.async needs stages=2"):
        render(GemmSpec(64, 64, 64), bad)
    assert "pipeline" in rejections(bad, GemmSpec(64, 64, 64))
    assert "pipeline" in rejections(dict(ladder())["double_buffer"].with_(async_copy=True), GemmSpec(8, 8, 8), "sm_75")


def test_vector_loads_degrade_on_unaligned_rows():
    spec_aligned, spec_odd = GemmSpec(64, 64, 64), GemmSpec(64, 64, 63)
    config = dict(ladder())["vectorized"]
    assert "const float4*>(&A[" in render(spec_aligned, config).code
    assert "const float4*>(&A[" not in render(spec_odd, config).code  # rows of A are 63 floats: scalar loads


def test_launch_geometry_covers_output():
    spec = GemmSpec(1000, 130, 7)
    for _, config in ladder():
        src = render(spec, config)
        if config.kind == "naive":
            covered = (src.grid[0] * src.block[0], src.grid[1] * src.block[1])
        elif config.kind == "coalesced":
            covered = (src.grid[1] * src.block[1], src.grid[0] * src.block[0])
        else:
            covered = (src.grid[1] * config.bm, src.grid[0] * config.bn)
        assert covered[0] >= spec.m and covered[1] >= spec.n


def test_epilogue_operands_in_kernel_signature():
    src = render(GemmSpec(32, 32, 32, epilogue="alpha+bias_row+beta"), dict(ladder())["double_buffer"])
    assert src.args == ("A", "B", "C", "bias", "alpha", "beta", "D")
    assert "float alpha" in src.code and "v += beta * c;" in src.code
    assert "const float4 c4 = *reinterpret_cast<const float4*>(&C[row * N + col]);" in src.code


def test_resource_report_parser():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 96 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]\n")
    report = parse_resource_report(log, "k")
    assert (report.registers, report.shared_bytes, report.stack_bytes, report.spills) == (96, 16384, 8, 16)


def test_prefetch_c_only_when_the_epilogue_reads_c(tmp_path):
    config = dict(ladder())["double_buffer"].with_(prefetch_c=True)
    fused = render(GemmSpec(1000, 999, 64, epilogue="relu+add"), config)
    assert "prefetch.global.L2" in fused.code
    assert compile_kernel(fused, "sm_90", tmp_path).resources.spills == 0
    assert "prefetch.global.L2" not in render(GemmSpec(1000, 999, 64, epilogue="relu"), config).code


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_stage_c_copies_c_into_dynamic_shared_memory(arch, tmp_path):
    config = dict(ladder(arch))["double_buffer"].with_(stage_c=True)
    for shape in [(1000, 999, 64), (256, 256, 8), (100, 128, 1000)]:
        fused = render(GemmSpec(*shape, epilogue="relu+add"), config, arch)
        assert "copy_c()" in fused.code and "Cs[" in fused.code
        assert fused.dynamic_smem == 4 * config.bm * (config.bn + 4)
        assert compile_kernel(fused, arch, tmp_path).resources.spills == 0
    # Without C to read, stage_c changes nothing: same kernel as without it (but the config comment).
    plain = GemmSpec(1000, 999, 64, epilogue="relu")

    def body(c):
        return [line for line in render(plain, c, arch).code.splitlines() if not line.startswith("// config:")]

    assert body(config) == body(config.with_(stage_c=False))
    assert render(plain, config, arch).dynamic_smem == 0


def test_stage_c_needs_double_buffering_and_room():
    spec = GemmSpec(512, 512, 512, epilogue="relu+add")
    single = dict(ladder())["warptiling"].with_(stage_c=True)
    assert "c_stage" in rejections(single, spec, "sm_90")
    wide = SimtConfig(bm=256, bn=256, bk=32, tm=16, tn=8, wm=128, wn=64, wniter=2, stage_c=True)
    assert "c_stage" in rejections(wide, spec, "sm_86")  # 256 KiB of C tile > 99 KiB


def test_nvrtc_cache_is_off_so_ptxas_always_reports():
    """NVRTC's own cache skips ptxas on a hit and prints no report; importing the compiler turns it off."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CUDA_CACHE_DISABLE"}
    code = "import os, gemmtune.compiler; print(os.environ['CUDA_CACHE_DISABLE'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_compile_configs_returns_each_kernel_or_its_typed_error():
    from gemmtune.build import compile_configs

    good, bad = dict(ladder())["double_buffer"], SimtConfig(bm=48)
    out = compile_configs([(GemmSpec(127, 129, 131), good, "sm_90"), (GemmSpec(64, 64, 64), bad, "sm_90")], workers=2)
    assert out[0].resources.spills == 0 and out[0].source.entry.endswith("_simt")
    assert isinstance(out[1], ConfigError) and "48" in str(out[1])


def test_a_compile_without_a_resource_report_is_redone_past_nvrtcs_cache(monkeypatch, tmp_path):
    """NVRTC's own cache (on where it loaded before CUDA_CACHE_DISABLE was set) skips ptxas on a hit and
    prints no report: the compile is redone once with an empty kernel of a new name, so its PTX is new."""
    from gemmtune import compiler

    spec = GemmSpec(64, 64, 64)
    source = render(spec, ladder()[-1][1], "sm_90")
    real = compiler._nvrtc_compile
    seen = []

    def first_without_report(src, arch, code=None):
        cubin, ptx, log = real(src, arch, code)
        seen.append(code)
        return (cubin, ptx, "") if len(seen) == 1 else (cubin, ptx, log)

    monkeypatch.setattr(compiler, "_nvrtc_compile", first_without_report)
    compiled = compiler.compile_kernel(source, "sm_90", cache_dir=tmp_path)
    assert seen[0] is None and "gemmtune_uncached_" in seen[1] and seen[1].startswith(source.code)
    assert compiled.resources.registers > 0 and compiled.source.code == source.code
