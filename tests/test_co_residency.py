"""Kernels whose blocks wait on each other (wgmma split_tail) load only where every block fits at once.

The decision is a pure function; the driver's occupancy answers come from the fake driver (no GPU),
and one `gpu` test asks a real Hopper GPU about a real split-tail kernel.
"""
from __future__ import annotations

import dataclasses

import pytest

from fake_driver import FakeDriver, installed
from gemmtune.compiler import CompiledKernel, ResourceUsage
from gemmtune.errors import ResourceError
from gemmtune.kernel_source import KernelSource
from gemmtune.kernels.wgmma.config import default_config
from gemmtune.kernels.wgmma.render import render
from gemmtune.kernels.wgmma.schedule import schedule_for
from gemmtune.runtime import LoadedKernel, co_residency_problem
from gemmtune.spec import GemmSpec

SPLIT = GemmSpec(1024, 1024, 16384, "nt", "bf16")  # 32 tiles on 132 SMs: the tail is split along K
WHOLE = GemmSpec(1536, 2816, 4096, "nt", "bf16")  # 12 x 11 = 132 tiles: one whole wave, nothing split


# --- the decision ------------------------------------------------------------------------------
def test_enough_resident_blocks_is_no_problem() -> None:
    assert co_residency_problem(132, 132, "k") is None
    assert co_residency_problem(128, 264, "k") is None


def test_too_few_resident_blocks_is_one_clear_line() -> None:
    problem = co_residency_problem(128, 114, "wgmma_1024x1024x16384_nt_bf16")
    assert problem is not None and "\n" not in problem
    assert problem.startswith("wgmma_1024x1024x16384_nt_bf16: its 128 blocks")
    assert "holds 114 at once" in problem and "without split_tail" in problem


# --- the wgmma family marks its split schedules ----------------------------------------------------
def test_split_tail_render_is_co_resident() -> None:
    config = default_config(SPLIT)
    assert config.split_tail and schedule_for(SPLIT, config).split_units > 0
    assert render(SPLIT, config).co_resident


def test_unsplit_renders_are_not_co_resident() -> None:
    config = default_config(WHOLE)
    assert config.split_tail and schedule_for(WHOLE, config).split_units == 0  # asked for, nothing to split
    assert not render(WHOLE, config).co_resident
    plain = default_config(SPLIT).with_(split_tail=False)
    assert not render(SPLIT, plain).co_resident


def test_split_tail_with_clusters_is_co_resident() -> None:
    config = default_config(SPLIT).with_(cluster_m=2)
    source = render(SPLIT, config)
    assert schedule_for(SPLIT, config).split_units > 0 and source.co_resident
    assert "__cluster_dims__(2, 1, 1)" in source.code


# --- KernelSource keeps it ---------------------------------------------------------------------------
def test_co_resident_survives_the_json_round_trip() -> None:
    source = render(SPLIT, default_config(SPLIT))
    assert KernelSource.from_json(source.to_json()) == source
    old = {k: v for k, v in source.to_json().items() if k != "co_resident"}  # written before the field
    assert not KernelSource.from_json(old).co_resident


def test_co_resident_does_not_change_the_binary_hash() -> None:
    source = render(SPLIT, default_config(SPLIT))
    assert dataclasses.replace(source, co_resident=False).content_hash() == source.content_hash()


# --- LoadedKernel asks the driver (fake: 132 SMs) --------------------------------------------------
@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    with installed(monkeypatch, FakeDriver({"waits": lambda params: None})) as driver:
        yield driver


def compiled(blocks: int, co_resident: bool = True) -> CompiledKernel:
    source = KernelSource("// python", "waits", (blocks, 1, 1), (384, 1, 1), ("A", "B", "D"), SPLIT, "fake", "1",
                          dynamic_smem=200 * 1024, co_resident=co_resident)
    return CompiledKernel(source, "sm_90", b"cubin", "", ResourceUsage(168, 0, 0, 0, 0), "", 0.0, "13.0")


def test_load_passes_when_every_block_fits(fake: FakeDriver) -> None:
    with LoadedKernel(compiled(132)):
        pass
    assert "occupancy threads=384 smem=204800" in fake.calls


def test_load_refuses_more_blocks_than_fit(fake: FakeDriver) -> None:
    with pytest.raises(ResourceError, match=r"waits: its 133 blocks .* holds 132 at once"):
        LoadedKernel(compiled(133))
    assert fake.modules_alive == 0  # unloaded on the way out


def test_load_counts_clusters_that_fit(fake: FakeDriver) -> None:
    fake.cluster_dims, fake.active_clusters = (2, 1, 1), 64
    with LoadedKernel(compiled(128)):
        pass
    assert "cluster occupancy grid=128 smem=204800" in fake.calls
    fake.active_clusters = 57  # an H100 PCIe's 114 SMs
    with pytest.raises(ResourceError, match="holds 114 at once"):
        LoadedKernel(compiled(128))


def test_load_skips_the_check_when_blocks_do_not_wait(fake: FakeDriver) -> None:
    fake.blocks_per_sm = 0
    with LoadedKernel(compiled(1000, co_resident=False)):
        pass
    assert not any("occupancy" in call for call in fake.calls)


# --- a real Hopper GPU ---------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_split_tail_kernel_fits_on_this_gpu(cluster_m: int) -> None:
    """On an H100 SXM (what the schedule is sized for) a split-tail kernel loads: all its blocks fit."""
    from gemmtune.compiler import compile_kernel
    from gemmtune.device import query_device
    from gemmtune.runtime import resident_blocks

    info = query_device()
    if info.arch != "sm_90" or info.sm_count < 132:
        pytest.skip(f"needs a Hopper GPU with 132 SMs, this one is {info.arch} with {info.sm_count}")
    source = render(SPLIT, default_config(SPLIT).with_(cluster_m=cluster_m))
    assert source.co_resident
    with LoadedKernel(compile_kernel(source, "sm_90a")) as kernel:
        assert resident_blocks(kernel.function, source, info.sm_count) >= source.grid[0]
