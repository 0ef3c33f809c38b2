"""On the GPU: the code of GPUs we do not have (issue 66), run. Each family's pick for sm_75 (T4), sm_80
(A100), sm_86 (RTX 3090/A40) and sm_89 (L40S), with that arch's limits in the config, is compiled by
NVRTC and loaded as its PTX (compute_XX: compiler.ptx_image), which the H100/H200's driver JIT-compiles,
then checked against the float64 reference on fresh random inputs with a poisoned D: every family and
dtype the arch has, odd and aligned shapes, two epilogues.

What it proves: the PTX those GPUs' drivers would compile computes the right result. What it does not:
their speed, occupancy, or the SASS their own driver makes (the shared-memory and register limits are
checked by the configs' rules and ptxas's report for sm_XX, not by running there)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gemmtune.spec import GemmSpec

ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89")
# (family, dtypes on sm_75, dtypes from sm_80): the mma family runs 16-bit (and tf32 from sm_80), simt
# fp32 on CUDA cores, gemv the decode shapes.
FAMILIES = (("mma", ("fp16",), ("fp16", "bf16", "tf32")), ("simt", ("fp32",), ("fp32",)),
            ("gemv", ("fp32", "fp16"), ("fp32", "bf16")))
SHAPES = {"mma": ((257, 1023, 520), (512, 512, 512)), "simt": ((257, 1023, 520), (512, 512, 512)),
          "gemv": ((1, 1023, 2056), (8, 1024, 1024))}
EPILOGUES = (None, "bias_col+gelu", "relu+add")


def _cases() -> list[tuple[str, str, GemmSpec]]:
    cases = []
    for arch, (family, old, new) in itertools.product(ARCHES, FAMILIES):
        for dtype, shape, epilogue in itertools.product(old if arch == "sm_75" else new, SHAPES[family], EPILOGUES):
            if epilogue == "relu+add" and shape != SHAPES[family][0]:
                continue  # C on the odd shape only: two epilogues a shape, three in all
            cases.append((arch, family, GemmSpec(*shape, "nt" if dtype != "fp32" else "nn", dtype, epilogue)))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def images():
    """Every case's pick for its arch, compiled (in parallel) and turned into its PTX image."""
    from gemmtune.build import chosen_config, compile_configs
    from gemmtune.compiler import ptx_image

    jobs = []
    for arch, family, spec in CASES:
        _, chosen = chosen_config(spec, None, arch, family)
        jobs.append((spec, chosen.config, arch))
    return [result if isinstance(result, Exception) else ptx_image(result) for result in compile_configs(jobs)]


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHES)
def test_older_archs_ptx_runs_right_on_this_gpu(images, arch):
    from gemmtune.evaluate import evaluate

    failed = []
    for (case_arch, family, spec), image in zip(CASES, images):
        if case_arch != arch:
            continue
        if isinstance(image, Exception):
            failed.append(f"{family} {spec.short()}: {image}")
            continue
        assert image.arch == arch.replace("sm_", "compute_")
        result = evaluate(image, verify_only=True, rng=np.random.default_rng(66))
        if not result.verify.ok:
            failed.append(f"{family} {spec.short()}: {result.verify.message}")
    assert not failed, f"{arch}: " + "\n".join(failed)


def test_every_arch_family_and_dtype_is_covered():
    covered = {(arch, family, spec.dtype) for arch, family, spec in CASES}
    for arch, (family, old, new) in itertools.product(ARCHES, FAMILIES):
        assert all((arch, family, d) in covered for d in (old if arch == "sm_75" else new))
