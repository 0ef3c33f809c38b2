"""What several GPU test modules share: shapes whose stored rows suit TMA, and verifying a batch of
kernels (compiled in parallel) or the registry's picks against the float64 reference."""
from __future__ import annotations

from typing import Callable

import numpy as np

from gemmtune.spec import GemmSpec


def hopper_arch() -> str:
    """sm_90a on a Hopper GPU; skips the test on any other (the wgmma family runs on Hopper only)."""
    import pytest

    from gemmtune.device import query_device

    arch = query_device().arch
    if arch != "sm_90":
        pytest.skip(f"the wgmma family needs a Hopper GPU, this one is {arch}")
    return "sm_90a"


def tma_rows(shape: tuple[int, int, int], layout: str) -> tuple[int, int, int]:
    """The shape with each stored row of A and B a multiple of 4 values (TMA's 16 bytes for 4-byte
    types): M where A is stored K×M, N where B is stored K×N, K where either is K-major; the other
    extents stay as given (odd ones stay odd)."""
    from gemmtune.kernels.wgmma.config import k_major

    a_kmajor, b_kmajor = k_major(GemmSpec(1, 1, 1, layout))
    up = lambda x: -(-x // 4) * 4  # noqa: E731
    m, n, k = shape
    return (m if a_kmajor else up(m), n if b_kmajor else up(n), up(k) if a_kmajor or b_kmajor else k)


def failed_jobs(jobs: list, seed: Callable[[GemmSpec], int]) -> list[str]:
    """Compile every (spec, config, arch) job (each must compile), verify each with a poisoned D and
    inputs drawn from seed(spec); one line per wrong result."""
    from gemmtune.build import compile_configs
    from gemmtune.evaluate import evaluate

    failed = []
    for (spec, config, _), kernel in zip(jobs, compile_configs(jobs)):
        assert not isinstance(kernel, Exception), f"{spec.short()} {config.describe()}: {kernel}"
        result = evaluate(kernel, verify_only=True, rng=np.random.default_rng(seed(spec)))
        if not result.verify.ok:
            failed.append(f"{spec.short()} {config.describe()}: {result.verify.message}")
    return failed


def check_picks(specs: list[GemmSpec], arch: str, family: str, seed: int) -> None:
    """gemmtune.build's pick for each spec is `family`'s and verifies (inputs from `seed`)."""
    import gemmtune
    from gemmtune.evaluate import evaluate

    for spec in specs:
        kernel = gemmtune.build(spec, arch=arch)
        assert kernel.family == family, spec.short()
        result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(seed))
        assert result.verify.ok, f"{spec.short()}: {result.verify.message}"
