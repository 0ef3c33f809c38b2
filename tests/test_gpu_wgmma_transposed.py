"""GPU: tf32 stored MN-major (layouts nn, tn, tt) on the wgmma family, each stage's MN-major chunks
transposed in shared memory by the consumers, is right on shapes cut at every edge, with every
epilogue, and the registry's pick for random tf32 shapes in every layout is right.

    pytest -q -p no:cacheprovider tests/test_gpu_wgmma_transposed.py
"""
import numpy as np
import pytest

import gemmtune
from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec
from gpu_checks import check_picks, failed_jobs, hopper_arch, tma_rows

pytestmark = pytest.mark.gpu

FAMILY = get_family("wgmma")
COOPERATIVE = ("warp_specialized", "persistent", "sliced_store", "cluster_multicast")
SHAPES = [(1, 4, 4), (7, 12, 5), (127, 132, 131), (128, 256, 32), (1000, 1000, 1000), (4093, 4092, 4097),
          (1, 4096, 4096), (3000, 5000, 704)]


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_cooperative_steps_right_on_edges(layout):
    arch = hopper_arch()
    steps = dict(FAMILY.ladder(arch))
    jobs = [(GemmSpec(*tma_rows(shape, layout), layout, "tf32"), steps[step], arch) for step in COOPERATIVE
            for shape in SHAPES]
    jobs = [job for job in jobs if not FAMILY.rejections(job[1], job[0], arch)]
    assert len(jobs) >= 3 * len(SHAPES)
    failed = failed_jobs(jobs, lambda spec: spec.m + spec.n)
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
def test_epilogues_on_odd_shapes(epilogue):
    cases = (((127, 132, 100), "nn"), ((124, 132, 131), "tn"), ((132, 129, 100), "tt"), ((2048, 2048, 2048), "nn"))
    check_picks([GemmSpec(*shape, layout, "tf32", epilogue) for shape, layout in cases], hopper_arch(), "wgmma", 5)


def test_registry_pick_on_random_shapes():
    """The registry's pick (wgmma where rows allow TMA, else mma or gemv) for 40 random tf32 shapes
    in every layout, aligned or not, verified."""
    from gemmtune.evaluate import evaluate

    arch = hopper_arch()
    rng = np.random.default_rng(2026)
    picked, failed = set(), []
    for i in range(40):
        m, n, k = (int(x) for x in rng.integers(1, 2500, size=3))
        if i % 2:
            m, n, k = (-(-x // 4) * 4 for x in (m, n, k))
        spec = GemmSpec(m, n, k, ("nn", "tn", "tt", "nt")[i % 4], "tf32")
        kernel = gemmtune.build(spec, arch=arch)
        picked.add(kernel.family)
        result = evaluate(kernel.compiled, verify_only=True, rng=rng)
        if not result.verify.ok:
            failed.append(f"{spec.short()} ({kernel.family}): {result.verify.message}")
    assert not failed, "\n".join(failed)
    assert "wgmma" in picked


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_named_candidates_right_on_edges(layout):
    from gemmtune.kernels.wgmma.config import tf32_candidates

    arch = hopper_arch()
    specs = [GemmSpec(*tma_rows(shape, layout), layout, "tf32") for shape in ((127, 132, 131), (1000, 1000, 1000),
                                                                            (300, 4092, 516))]
    jobs = [(spec, config, arch) for spec in specs for _, config in tf32_candidates(spec, arch)]
    failed = failed_jobs(jobs, lambda spec: spec.n)
    assert not failed, "\n".join(failed)
