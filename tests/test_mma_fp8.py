"""fp8 (e4m3, e5m2) on the mma.sync family without a GPU (issue 70): m16n8k32 mma.sync on sm_89 and later
archs other than sm_90a, routing, constraints, rendering and NVRTC (no spills), and the SASS ptxas makes."""
from __future__ import annotations

import itertools
import re

import pytest

from gemmtune.build import compile_configs
from gemmtune.errors import ConfigError
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.mma.config import MmaConfig, candidates, fp8_emulated
from gemmtune.spec import GemmSpec

FAMILY = get_family("mma")
SCALINGS = ("tensor", "rowwise", "block")
# aligned; odd M and N with K a multiple of 16 but not of any slice (272 = 2·128 + 16); K a multiple of 4
# only (4-byte copies); one row; a large grid (the widest tiles).
SHAPES = ((512, 384, 256), (257, 1023, 272), (129, 131, 100), (1, 77, 48), (4096, 4096, 4096))
EPILOGUES = (None, "bias_col+gelu", "relu+add", "bias_row+relu", "alpha+beta")


def _cases(arch: str, shapes=SHAPES) -> list[GemmSpec]:
    """Every scaling × shape on `arch`, dtypes, epilogues and D's type rotating."""
    found = []
    for n, (scaling, shape) in enumerate(itertools.product(SCALINGS, shapes)):
        found.append(GemmSpec(*shape, "nt", ("e4m3", "e5m2")[n % 2], EPILOGUES[n % len(EPILOGUES)],
                              ("bf16", "fp16", "fp32")[n // 2 % 3], scaling=scaling))
    return found


def _compiled(jobs):
    kernels = compile_configs(jobs)
    failed = [(job[0].short(), job[2], str(k)) for job, k in zip(jobs, kernels) if isinstance(k, Exception)]
    assert not failed, failed[:3]
    return kernels


def _assert_clean(jobs, kernels):
    spilled = [(spec.short(), arch, config.describe(), k.resources.summary())
               for (spec, config, arch), k in zip(jobs, kernels)
               if k.resources.spills or k.resources.stack_bytes]
    assert not spilled, spilled


@pytest.mark.parametrize("arch", ["sm_89", "sm_120", "sm_100"])
def test_fp8_defaults_compile_without_spills(arch):
    """The registry's pick (mma on these archs) and its default config, every scaling and shape."""
    jobs = []
    for spec in _cases(arch, SHAPES if arch == "sm_89" else SHAPES[1:3] + SHAPES[-1:]):
        assert family_for(spec, arch).name == "mma"
        jobs.append((spec, FAMILY.default_config(spec, arch), arch))
    kernels = _compiled(jobs)
    _assert_clean(jobs, kernels)
    for (spec, _, _), k in zip(jobs, kernels):
        instruction = f"mma.sync.aligned.m16n8k32.row.col.f32.{spec.dtype}.{spec.dtype}.f32"
        assert instruction in k.ptx, spec.short()
        assert "const float* __restrict__ scale_a" in k.source.code


def test_fp8_candidates_compile_without_spills_on_sm_89():
    jobs = [(spec, config, "sm_89") for spec in (GemmSpec(257, 1023, 272, "nt", "e4m3", "bias_col+gelu", scaling=s)
                                                 for s in SCALINGS)
            for _, config in candidates(spec, "sm_89")]
    assert len(jobs) >= 12
    _assert_clean(jobs, _compiled(jobs))


def test_fp8_ladder_steps_compile_on_sm_89():
    """Every ladder step that the scaling allows: plain shared loads (fp8 words), one stage, the ring."""
    jobs = []
    for scaling, (name, config) in itertools.product(SCALINGS, FAMILY.ladder("sm_89")):
        spec = GemmSpec(129, 131, 100, "nt", "e5m2", "relu+add", scaling=scaling)
        if not FAMILY.rejections(config, spec, "sm_89"):
            jobs.append((spec, config, "sm_89"))
    # the multistage ring with plain fragment loads (one fragment set): the block hooks in that loop too
    plain_ring = MmaConfig(bm=64, bn=64, k_bytes=64, wm=32, wn=32, stages=3, ldmatrix=False)
    jobs += [(GemmSpec(129, 131, 272, "nt", "e4m3", scaling=s), plain_ring, "sm_89") for s in SCALINGS]
    assert len(jobs) >= 3 * 4 + 3
    _assert_clean(jobs, _compiled(jobs))


def test_fp8_routing_mma_on_sm_89_grouped_on_sm_90a():
    spec = GemmSpec(1024, 1024, 1024, "nt", "e4m3", scaling="rowwise")
    assert family_for(spec, "sm_89").name == "mma"
    assert family_for(spec, "sm_120").name == "mma"
    assert family_for(spec, "sm_100").name == "mma"
    assert family_for(spec, "sm_90a").name == "fp8_grouped"
    assert family_for(spec, "sm_90").name == "fp8_grouped"
    with pytest.raises(ConfigError, match="sm_89 or newer"):
        family_for(spec, "sm_86")
    # where the grouped kernel refuses an fp8 spec on sm_90 the registry does not fall back to mma ...
    with pytest.raises(ConfigError, match="multiple of 16.*grouped wgmma kernel"):
        family_for(GemmSpec(64, 64, 40, "nt", "e4m3", scaling="tensor"), "sm_90a")
    # ... which still runs it when asked by name
    assert family_for(GemmSpec(64, 64, 40, "nt", "e4m3", scaling="tensor"), "sm_90", "mma").name == "mma"
    # 16-bit specs are routed as before
    assert family_for(GemmSpec(1024, 1024, 1024, "nt", "bf16"), "sm_89").name == "mma"
    assert family_for(GemmSpec(4096, 4096, 4096, "nt", "bf16"), "sm_90").name == "wgmma"


def test_fp8_refusals_are_one_line():
    odd_k = GemmSpec(64, 64, 102, "nt", "e4m3", scaling="tensor")
    reason = FAMILY.supports(odd_k, "sm_89")
    assert reason and "multiple of 4" in reason and "\n" not in reason
    assert "sm_89 or newer" in FAMILY.supports(odd_k, "sm_80")
    block = GemmSpec(256, 256, 256, "nt", "e4m3", scaling="block")
    wide = MmaConfig(bm=128, bn=128, k_bytes=128, wm=64, wn=64, stages=3)
    assert "fp8" in FAMILY.rejections(wide, block, "sm_89")
    assert not FAMILY.rejections(wide.with_(wn=32), block, "sm_89")
    # where ptxas emulates fp8 mma.sync (f16 unpacks), 64x64 warps are refused for every scaling
    tensor = GemmSpec(4096, 4096, 4096, "nt", "e4m3", scaling="tensor")
    assert fp8_emulated("sm_100") and fp8_emulated("sm_90") and not fp8_emulated("sm_89")
    assert "fp8" in FAMILY.rejections(wide, tensor, "sm_100")
    assert not FAMILY.rejections(wide, tensor, "sm_89")


def test_fp8_kernel_takes_scales_after_b():
    spec = GemmSpec(100, 200, 128, "nt", "e4m3", "bias_col+add", scaling="block")
    source = FAMILY.render(spec, FAMILY.default_config(spec, "sm_89"), "sm_89")
    assert source.args == ("A", "B", "scale_a", "scale_b", "bias", "C", "D") or \
        source.args[:4] == ("A", "B", "scale_a", "scale_b")
    assert source.args[-1] == "D" and set(source.args) == {"A", "B", "scale_a", "scale_b", "bias", "C", "D"}
    assert "promote()" in source.code and "load_scales(" in source.code
    tensor = GemmSpec(100, 200, 128, "nt", "e4m3", scaling="tensor")
    code = FAMILY.render(tensor, FAMILY.default_config(tensor, "sm_89"), "sm_89").code
    assert "scale_a[0] * scale_b[0]" in code and "promote" not in code


def test_fp8_sass_is_one_qmma_per_mma_on_sm_89(tmp_path):
    from sass_dump import sass

    spec = GemmSpec(4096, 4096, 4096, "nt", "e4m3", scaling="tensor")
    config = FAMILY.default_config(spec, "sm_89")
    (kernel,) = _compiled([(spec, config, "sm_89")])
    text = sass(tmp_path, kernel.cubin)
    qmma = len(re.findall(r"QMMA\.16832\.F32\.E4M3\.E4M3", text))
    # one mma per 16x8 tile and k-step of the unrolled main loop: MT·NT per k-step, 2 k-steps a 64-byte slice
    assert qmma and qmma % (config.wm // 16 * config.wn // 8) == 0, qmma
    assert "HMMA" not in text and "F2FP.F16.E4M3.UNPACK" not in text
