"""On the GPU: the code of GPUs we do not have (issue 66), run. Each family's pick for sm_75 (T4), sm_80
(A100), sm_86 (RTX 3090/A40) and sm_89 (L40S), chosen as without a GPU (that arch's table: its limits and
SM count, not the present GPU's), is compiled by NVRTC and loaded as its PTX (compute_XX:
compiler.ptx_image), which the H100/H200's driver JIT-compiles, then checked against the float64
reference on fresh random inputs with a poisoned D: every family and dtype the arch has, odd and aligned
shapes, two epilogues a shape, every layout.

What it proves: the PTX those GPUs' drivers would compile computes the right result. What it does not:
their speed, occupancy, or the SASS their own driver makes (the shared-memory and register limits are
checked by the configs' rules and ptxas's report for sm_XX, not by running there).

    PYTHONPATH=$PWD/src python -m pytest -q tests/test_gpu_ptx_archs.py     # H100/H200: about a minute
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gemmtune.spec import GemmSpec

ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89")
# family -> (dtypes on sm_75, dtypes from sm_80): mma runs 16-bit (and tf32 from sm_80) on tensor cores,
# simt fp32 on CUDA cores, gemv the decode shapes in every dtype (16-bit and tf32 on tensor cores at 8 rows).
FAMILY_DTYPES = {"mma": (("fp16",), ("fp16", "bf16", "tf32")), "simt": (("fp32",), ("fp32",)),
                 "gemv": (("fp32", "fp16"), ("fp32", "tf32", "fp16", "bf16"))}
# (shape, epilogue, layout): an odd and an aligned shape, two epilogues each (C read on the odd one), and
# every layout once a family and dtype (MN-major operands take other copy paths; gemv streams B by rows
# for nt/tt and by columns for nn/tn, on tensor cores or in quads at 8 rows).
GEMM_CASES = (((257, 1023, 520), None, "nt"), ((257, 1023, 520), "bias_col+gelu", "nn"),
              ((257, 1023, 520), "relu+add", "tn"), ((512, 512, 512), None, "tt"),
              ((512, 512, 512), "bias_col+gelu", "nt"))
GEMV_CASES = (((1, 1023, 2056), None, "nt"), ((1, 1023, 2056), "bias_col+gelu", "nn"),
              ((1, 1023, 2056), "relu+add", "tt"), ((8, 1024, 1024), None, "nt"),
              ((8, 1024, 1024), "bias_col+gelu", "nn"), ((8, 1024, 1024), "relu+add", "tn"))
FAMILY_CASES = {"mma": GEMM_CASES, "simt": GEMM_CASES, "gemv": GEMV_CASES}


def _cases() -> list[tuple[str, str, GemmSpec]]:
    found = []
    for arch, (family, (old, new)) in itertools.product(ARCHES, FAMILY_DTYPES.items()):
        for dtype, (shape, epilogue, layout) in itertools.product(old if arch == "sm_75" else new, FAMILY_CASES[family]):
            found.append((arch, family, GemmSpec(*shape, layout, dtype, epilogue)))
    return found


CASES = _cases()


@pytest.fixture(scope="module")
def images():
    """Every case's pick for its arch's table GPU, compiled (in parallel) and turned into its PTX image."""
    from gemmtune.build import compile_configs
    from gemmtune.compiler import ptx_image
    from gemmtune.export.config_source import choose_config

    jobs = [(spec, choose_config(spec, arch, None, family=family).config, arch) for arch, family, spec in CASES]
    return [result if isinstance(result, Exception) else ptx_image(result) for result in compile_configs(jobs)]


def _wrong(image, spec: GemmSpec) -> str | None:
    from gemmtune.errors import GemmtuneError
    from gemmtune.evaluate import evaluate

    try:
        result = evaluate(image, verify_only=True, rng=np.random.default_rng(66))
    except GemmtuneError as err:  # one kernel that cannot load must not hide the others' results
        return f"{type(err).__name__}: {err}"
    return None if result.verify.ok else result.verify.message


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHES)
def test_older_archs_ptx_runs_right_on_this_gpu(images, arch):
    failed = []
    for (case_arch, family, spec), image in zip(CASES, images):
        if case_arch != arch:
            continue
        problem = f"{image}" if isinstance(image, Exception) else _wrong(image, spec)
        if problem:
            failed.append(f"{family} {spec.short()}: {problem}")
    assert not failed, f"{arch}: " + "\n".join(failed)


@pytest.mark.slow
def test_every_case_compiles_to_its_archs_ptx(images):
    """No GPU: each pick compiles for its arch, and the image is that arch's PTX."""
    for (arch, family, spec), image in zip(CASES, images):
        assert not isinstance(image, Exception), f"{arch} {family} {spec.short()}: {image}"
        assert image.arch == arch.replace("sm_", "compute_") and f".target {arch}".encode() in image.cubin


def test_every_arch_family_dtype_and_layout_is_covered():
    covered = {(arch, family, spec.dtype, spec.layout) for arch, family, spec in CASES}
    for arch, (family, (old, new)) in itertools.product(ARCHES, FAMILY_DTYPES.items()):
        for dtype, layout in itertools.product(old if arch == "sm_75" else new, ("nn", "nt", "tn", "tt")):
            assert (arch, family, dtype, layout) in covered
    assert len(CASES) == 154
