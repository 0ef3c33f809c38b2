"""The device decides the geometry (gemmtune.arch): the arch table, a present device's numbers, the
chooser's grid equal to the grid the kernel launches, and no SM count written anywhere else."""
from __future__ import annotations

import importlib
import io
import math
import random
import tokenize
from dataclasses import replace
from pathlib import Path

import pytest

from gemmtune.arch import ARCH_TABLE, arch_limits, geometry
from gemmtune.chooser import rank
from gemmtune.chooser.candidates import candidates
from gemmtune.compiler import ARCHES
from gemmtune.device import DeviceInfo
from gemmtune.errors import ConfigError
from gemmtune.kernels import families, get_family
from gemmtune.spec import GemmSpec

features = importlib.import_module("gemmtune.chooser.features")  # the module (the package exports a function)

SRC = Path(__file__).resolve().parent.parent / "src" / "gemmtune"
H100_PCIE = DeviceInfo(ordinal=0, name="NVIDIA H100 PCIe", cc=(9, 0), sm_count=114, max_threads_per_block=1024,
                       smem_per_block=48 * 1024, smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024,
                       regs_per_block=65536, regs_per_sm=65536, l2_bytes=50 * 2**20, total_memory=80 * 2**30,
                       driver_version="12.8")


# --- the table and geometry() -----------------------------------------------------------------------
def test_every_compiler_arch_has_a_table_entry():
    for arch in ARCHES:
        limits = arch_limits(arch)
        assert limits.sm_count > 0 and limits.gpu
        assert 0 < limits.smem_per_block <= limits.smem_per_sm and limits.threads_per_sm >= 1024


def test_offline_geometry_is_the_tables_and_a_device_answers_for_itself():
    table = geometry(None, "sm_90a")
    assert table.sm_count == ARCH_TABLE["sm_90"].sm_count and table.source.startswith("arch table")
    assert table.cluster_grid(1) == table.sm_count and table.cluster_grid(2) <= table.sm_count
    gpu = geometry(H100_PCIE, "sm_90a")
    assert (gpu.sm_count, gpu.smem_per_block) == (114, 227 * 1024) and "H100 PCIe" in gpu.source
    # Cluster capacities measured on the table's GPU do not carry over to one with other SMs.
    assert gpu.cluster_grid(2) == 114 and gpu.cluster_grid(4) == 112
    assert geometry(None, "sm_90", sm_count=66).sm_count == 66


def test_unknown_arch_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="sm_90"):
        geometry(None, "sm_37")


def test_wgmma_persistent_grid_follows_the_gpu():
    spec = GemmSpec(8192, 8192, 8192, "nt", "bf16")
    wgmma = get_family("wgmma")
    config = dict(wgmma.ladder("sm_90a"))["persistent"]  # 128x256, 2048 tiles: every SM busy
    assert wgmma.render(spec, config, "sm_90a").grid[0] == min(geometry(None, "sm_90a").sm_count, 128)
    small = replace(geometry(None, "sm_90a"), sm_count=100)
    assert wgmma.render(spec, config, "sm_90a", small).grid[0] == 100


# --- the chooser's grid is the kernel's ------------------------------------------------------------
SHAPES = [(4096, 4096, 4096), (1024, 1024, 16384), (2048, 5120, 5120), (128, 4096, 14336), (512, 4096, 4096),
          (8192, 8192, 8192), (1000, 1000, 1000), (3072, 4096, 768), (8, 4096, 4096), (1, 4096, 4096),
          (4096, 1, 4096), (300, 200, 64), (6144, 6144, 1024), (33, 8200, 512), (3001, 2999, 776)]
KINDS = [("bf16", "nt", "none"), ("fp16", "nn", "relu+add"), ("tf32", "nt", "bias_row"), ("fp32", "nn", "none")]


def sampled_pairs(arch: str = "sm_90a") -> list:
    """(family, spec, config): every chooser candidate of every shape above, plus valid configs drawn
    from the wgmma search space (clusters, non-persistent grids, split tails the chooser does not rank)."""
    pairs = []
    specs = [GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
             for shape in SHAPES for dtype, layout, epilogue in KINDS]
    for spec in specs:
        for family in families():
            if family.config_type in features.GEOMETRY and family.supports(spec, arch) is None:
                pairs += [(family, spec, c) for c in candidates(family.name, spec, arch, geometry(None, arch).sm_count)]
    wgmma, rng = get_family("wgmma"), random.Random(37)
    space, ok = wgmma.space(), [s for s in specs if wgmma.supports(s, arch) is None]
    for _ in range(3000):
        spec, config = rng.choice(ok), space.config_at([rng.randrange(n) for n in space.shape])
        try:
            if wgmma.rejections(config, spec, arch):
                continue
        except ZeroDivisionError:  # a grid point the space's structural rules drop
            continue
        pairs.append((wgmma, spec, config))
    return pairs


@pytest.mark.parametrize("sm_count", [None, 114])
def test_chooser_grid_is_the_grid_the_kernel_launches(sm_count):
    """4096^3 bf16 in 128x256 tiles: the kernel launches 128 blocks (IN_STEP_BLOCKS), which the chooser
    used to count as 132; before it asked the schedule, 404 of 1040 wgmma candidates disagreed."""
    gpu = geometry(None, "sm_90a", sm_count)
    pairs, wrong = sampled_pairs(), []
    assert len(pairs) > 2000 and {f.name for f, _, _ in pairs} == {"wgmma", "simt", "gemv"}
    for family, spec, config in pairs:
        kernel = family.render(spec, config, "sm_90a", gpu) if family.name == "wgmma" else \
            family.render(spec, config, "sm_90a")
        predicted = features.geometry(spec, config, gpu.sm_count).blocks
        if predicted != math.prod(kernel.grid):
            wrong.append((spec.short(), config.describe(), predicted, kernel.grid))
    assert not wrong, f"{len(wrong)} of {len(pairs)} differ, e.g. {wrong[:3]}"


def test_rank_without_sm_count_uses_the_arch_table():
    spec = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    table = ARCH_TABLE["sm_90"].sm_count
    assert [p.config for p in rank(spec, "sm_90a")] == [p.config for p in rank(spec, "sm_90a", table)]
    assert rank(spec, "sm_90a")[0].feature("sm_fill") <= 1.0


# --- no SM count outside arch.py ---------------------------------------------------------------------
# SM counts of 100 and more are unambiguous numbers; the table's smaller ones (T4's 40, GA102's 84)
# collide with ordinary constants (40 registers for the producer warpgroup, 40 boosting trees), so the
# scan skips them. Comments and strings are skipped too (tokenize: only number tokens), and only
# decimal literals count (0x84 is a mask, 1320 another number).
SM_COUNTS = {limits.sm_count for limits in ARCH_TABLE.values() if limits.sm_count >= 100} | {114}  # + H100 PCIe


def literal_sm_counts(text: str, name: str) -> list[str]:
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NUMBER and tok.string.isdigit() and int(tok.string) in SM_COUNTS:
            found.append(f"{name}:{tok.start[0]}: {tok.line.strip()}")
    return found


def test_no_literal_sm_count_outside_the_arch_table():
    assert 132 in SM_COUNTS and 108 in SM_COUNTS
    found = [hit for path in sorted(SRC.rglob("*.py")) if path != SRC / "arch.py"
             for hit in literal_sm_counts(path.read_text(), str(path.relative_to(SRC)))]
    assert not found, "SM counts belong in gemmtune/arch.py:\n" + "\n".join(found)


def test_the_scan_finds_a_literal_and_skips_comments_strings_and_other_numbers():
    text = 'SMS = 132  # 114 in a comment is fine\nMASK = 0x84\nOTHER = 1320\nDOC = "148 SMs"\nB = f(sm_count=108)\n'
    assert [hit.split(":")[1] for hit in literal_sm_counts(text, "probe.py")] == ["1", "5"]
