"""fp32 as 3xtf32 on the wgmma family, without a GPU: what it takes, its constraints, and that every
named config compiles for sm_90a without spills, with three wgmma per k-step into a fresh partial
(the residual products of all k-steps before big·big) and the exact path for values too small to
split."""
import pytest
from known_spills import allowed

from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError
from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.config import WgmmaConfig, default_config, rejections, split_candidates, supports
from gemmtune.spec import GemmSpec

FAMILY = get_family("wgmma")


def _split(m=1000, n=776, k=332, layout="nt", epilogue=None) -> GemmSpec:
    return GemmSpec(m, n, k, layout, "fp32", epilogue, math="3xtf32")


def test_what_the_family_takes():
    for layout in ("nt", "nn", "tn", "tt"):  # MN-major operands are transposed as they are split
        assert supports(_split(1000, 776, 332, layout), "sm_90a") is None, layout
    # TMA: 16-byte rows, else the operands are staged (copied into aligned rows first)
    for spec, reason in ((_split(k=333), "16"), (_split(1000, 777, 332, "nn"), "rows of B")):  # B stored K×N: rows of N
        assert supports(spec, "sm_90a") is None
        assert reason in rejections(default_config(spec).with_(stage_operands=False), spec)["staging"]
        assert not rejections(default_config(spec), spec) and default_config(spec).stage_operands
    assert "simt" in supports(GemmSpec(1000, 776, 332, "nt", math="simt"), "sm_90a")
    assert "Hopper" in supports(_split(), "sm_80")


def test_constraints_name_the_reason():
    spec = _split()
    assert "partial sum" in rejections(WgmmaConfig(bm=128, bn=256), spec)["registers"]
    assert "cooperative" in rejections(WgmmaConfig(bm=128, bn=128, pingpong=True), spec)["split"]
    assert "fp32" in rejections(WgmmaConfig(bm=128, bn=128, round_big=True), GemmSpec(64, 64, 64, "nt", "bf16"))["split"]
    assert "round_big" not in WgmmaConfig().to_json()  # older configs keep their JSON and keys
    with pytest.raises(ConfigError):
        FAMILY.render(spec, WgmmaConfig(bm=128, bn=256), "sm_90a")


@pytest.mark.parametrize("epilogue,layout", [(None, "nt"), ("relu+add", "nt"), ("bias_row+gelu", "nt"),
                                             ("relu+add", "nn"), (None, "tn"), ("bias_col+relu", "tt")])
def test_named_configs_compile_without_spills(epilogue, layout):
    spec = _split(layout=layout, epilogue=epilogue)
    named = split_candidates(spec)
    assert default_config(spec) == named[0][1] and len(named) >= 5
    for name, config in named:
        source = FAMILY.render(spec, config, "sm_90a")
        code = source.code
        assert code.count("wgmma_m64n%d(part[mb]" % config.bn) == 3, name  # small·big, big·small, big·big
        # every k-step's residual products before any big·big: 4 truncating sums at full size, not 12
        loop = code[code.index("void mma_stage_split("):]
        assert loop.index("// big·small") < loop.index("for (int ks", loop.index("// big·small")) < loop.index("// big·big")
        assert "split_stage(" in code and "acc[mb][i] += part[mb][i]" in code
        assert ("tf32_round(x.x - big.x)" in code) == config.round_big
        assert ("split_transposed(" in code) == (layout != "nt")  # an MN-major operand is transposed
        assert "if (named_barrier_or(" in code and "exact_piece(acc, A, B," in code  # the exact path
        resources = compile_kernel(source, "sm_90a").resources
        expected = allowed("wgmma", f"{spec.short()} sm_90a {name}")
        assert resources.spills == expected[0], (name, config.describe(), resources)


def test_transposed_operands_keep_to_128x128():
    """Transposing an operand as it is split holds 16 more values a thread beside the partial sums:
    the 128x192 tile would spill, so with an MN-major operand at most 64 accumulators a thread."""
    wide = WgmmaConfig(bm=128, bn=192, stages=3, consumers=2, tma_store=True, store_slices=6, split_tail=True)
    for layout in ("nn", "tn", "tt"):
        assert "MN-major" in rejections(wide, _split(layout=layout))["registers"]
        assert default_config(_split(layout=layout)).bn == 128
    assert "registers" not in rejections(wide, _split()) and default_config(_split()).bn == 192


def test_generated_source_is_deterministic():
    spec = _split(epilogue="relu+add")
    config = default_config(spec)
    assert FAMILY.render(spec, config, "sm_90a").code == FAMILY.render(spec, config, "sm_90a").code


@pytest.mark.parametrize("shape", [(300, 258, 100), (127, 129, 132), (1, 1, 4), (2048, 2048, 2048)])
def test_untuned_pick_exists_for_every_row_length(shape):
    """The chooser's 3xtf32 candidates fall back to direct stores where D's rows do not suit a TMA
    store (N·4 bytes not a multiple of 16), so every nt shape gets a kernel."""
    import gemmtune

    spec = _split(*shape, epilogue="relu+add")
    kernel = gemmtune.build(spec, arch="sm_90a")
    assert kernel.family == "wgmma"
    assert not rejections(kernel.config, spec)


def test_every_constraint_names_the_parameters_it_reads():
    """A constraint missing from the space's footprint table is checked over the whole product of
    the parameters (28 M configs, minutes per spec) instead of its own few."""
    from gemmtune.kernels.wgmma.config import CONSTRAINTS
    from gemmtune.kernels.wgmma.space import WGMMA_READS

    assert set(CONSTRAINTS) <= set(WGMMA_READS)
