"""The wgmma family without a GPU: constraints, rendering, NVRTC for sm_90a, the SASS it makes."""
from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
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
    with pytest.raises(ConfigError, match="Hopper"):
        family_for(GemmSpec(64, 64, 64, "nt", "bf16"), "sm_80")
    with pytest.raises(ConfigError, match="multiple of 16"):
        family_for(GemmSpec(77, 13, 5, "nn", "bf16"), "sm_90a")  # M > 16: not a GEMV either
    with pytest.raises(ConfigError, match="K-major"):
        family_for(GemmSpec(64, 64, 64, "nn", "tf32"), "sm_90a")


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
