"""fp32 math options (GemmSpec.math): parsing and keys, what auto picks, and 3xtf32 kernels compiled
offline for every layout."""
import pytest

from gemmtune.cli import main
from gemmtune.compiler import compile_kernel
from gemmtune.errors import ConfigError, SpecError
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.mma.config import candidates
from gemmtune.precision import auto_math
from gemmtune.spec import GemmSpec


def test_math_is_part_of_the_spec_and_auto_keeps_old_keys():
    plain, split = GemmSpec(64, 64, 64), GemmSpec(64, 64, 64, math="3xtf32")
    assert "math" not in plain.to_json() and plain.key() == GemmSpec.from_json({"m": 64, "n": 64, "k": 64}).key()
    assert split.to_json()["math"] == "3xtf32" and split.key() != plain.key()
    assert GemmSpec.from_json(split.to_json()) == split
    assert "3xtf32" in split.short() and "3xtf32" in split.slug()
    assert GemmSpec(8, 8, 8, math="tf32").dtype == "tf32"  # one tf32 product is the tf32 dtype
    assert split.without_epilogue().math == "3xtf32"


@pytest.mark.parametrize("kwargs,words", [({"math": "fast"}, "unknown math"),
                                          ({"dtype": "bf16", "math": "3xtf32"}, "applies to fp32")])
def test_bad_math_is_a_one_line_spec_error(kwargs, words):
    with pytest.raises(SpecError, match=words):
        GemmSpec(8, 8, 8, **kwargs)


def test_auto_takes_3xtf32_where_measured_and_explicit_math_picks_the_family():
    for arch in ("sm_80", "sm_89"):
        assert auto_math(GemmSpec(4096, 4096, 4096), arch) == "simt"  # unmeasured off wgmma
        assert family_for(GemmSpec(4096, 4096, 4096), arch).name == "simt"
        assert family_for(GemmSpec(4096, 4096, 4096, math="3xtf32"), arch).name == "mma"
    for layout in ("nn", "nt", "tn", "tt"):  # wgmma transposes MN-major operands as it splits them
        spec = GemmSpec(4096, 4096, 4096, layout)
        assert auto_math(spec, "sm_90") == "3xtf32" and family_for(spec, "sm_90").name == "wgmma"
        assert auto_math(GemmSpec(512, 512, 512, layout), "sm_90") == "simt"  # simt measured faster
    nt = GemmSpec(4096, 4096, 4096, "nt")
    assert auto_math(nt, "sm_80") == "simt" and family_for(nt, "sm_80").name == "simt"
    assert auto_math(GemmSpec(4096, 4096, 4094, "nt"), "sm_90") == "3xtf32"  # rows of 8 bytes: staged
    assert auto_math(GemmSpec(4096, 4094, 4096, "nn"), "sm_90") == "3xtf32"  # B's rows (N values) likewise
    assert family_for(GemmSpec(4096, 4094, 4096, "nn", math="3xtf32"), "sm_90").name == "wgmma"  # B staged
    assert family_for(GemmSpec(4096, 4096, 4096, "nt", math="simt"), "sm_90").name == "simt"
    assert family_for(GemmSpec(1, 4096, 4096, math="3xtf32"), "sm_90").name == "wgmma"  # not gemv's fp32 FMA
    with pytest.raises(ValueError, match="fp32"):  # math is an fp32 matter
        auto_math(GemmSpec(8, 8, 8, dtype="bf16"), "sm_90")
    with pytest.raises(ConfigError, match="sm_80"):
        family_for(GemmSpec(4096, 4096, 4096, math="3xtf32"), "sm_75")
    with pytest.raises(ConfigError, match="simt"):
        family_for(GemmSpec(4096, 4096, 4096, math="simt"), "sm_90", "mma")


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_3xtf32_candidates_compile_without_spills(layout):
    family = get_family("mma")
    spec = GemmSpec(1000, 777, 333, layout, math="3xtf32", epilogue="bias_col+relu")
    for name, config in candidates(spec, "sm_90"):
        source = family.render(spec, config, "sm_90")
        assert "split_tf32" in source.code and "cvt.rna.tf32.f32" in source.code
        assert source.code.count("mma_tile(part,") == 3  # three products per 16x8 tile and k-step
        resources = compile_kernel(source, "sm_90").resources
        assert resources.spill_store_bytes == 0, (name, config.describe(), resources)


def test_cli_takes_math(capsys):
    assert main(["show", "MNK=256", "--math", "3xtf32", "--arch", "sm_80", "--no-code"]) == 0
    assert "mma" in capsys.readouterr().out
    assert main(["show", "MNK=256", "--math", "bogus", "--arch", "sm_80"]) == 2
    assert "unknown math" in capsys.readouterr().err
