"""On the GPU: fp8 (e4m3, e5m2) mma.sync kernels for sm_89 (issue 70), run as their compute_89 PTX (as
test_gpu_ptx_archs.py runs the code of GPUs we do not have: an H100/H200's driver JIT-compiles it; there
ptxas emulates m16n8k32 fp8 with f16 unpacks, so this proves the PTX's result, not Ada's speed), checked by
the common verifier against the float64 product of the dequantized operands (fp8 values times their
scales, gemmtune.fp8.gemm_inputs) with a NaN-poisoned D: every scaling, both formats, odd shapes (K a
multiple of 16 but not of the slice, K a multiple of 4 only), epilogues, D in bf16 and fp16; the defaults
the registry picks for sm_89, every fp8 candidate, and the ladder steps (plain loads, one stage).

    PYTHONPATH=$PWD/src:$PWD/bench:$PWD/tests python -m pytest -q -p no:cacheprovider tests/test_gpu_mma_fp8.py
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gemmtune.kernels import get_family
from gemmtune.kernels.mma.config import candidates
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

ARCH = "sm_89"
FAMILY = get_family("mma")
SCALINGS = ("tensor", "rowwise", "block")
# (shape, epilogue, D's type): odd M and N with K = 2·128 + 16; K a multiple of 4 only; one row; aligned;
# a grid large enough for the widest default tiles.
DEFAULT_CASES = (((257, 1023, 272), "bias_col+gelu", "bf16"), ((129, 131, 100), "relu+add", "fp16"),
                 ((1, 77, 48), None, "bf16"), ((512, 384, 256), "alpha+beta", "bf16"),
                 ((2048, 2048, 2048), None, "bf16"), ((1000, 1000, 1040), "bias_row+relu", "fp16"))


def _jobs() -> list[tuple[str, GemmSpec, object]]:
    from gemmtune.export.config_source import choose_config

    jobs = []
    for n, (scaling, (shape, epilogue, out)) in enumerate(itertools.product(SCALINGS, DEFAULT_CASES)):
        spec = GemmSpec(*shape, "nt", ("e4m3", "e5m2")[n % 2], epilogue, out, scaling=scaling)
        choice = choose_config(spec, ARCH, None)
        assert choice.family == "mma", spec.short()
        jobs.append(("default", spec, choice.config))
    for scaling in SCALINGS:  # every named candidate on an odd shape
        spec = GemmSpec(257, 1023, 272, "nt", "e4m3", "relu+add", scaling=scaling)
        jobs += [(name, spec, config) for name, config in candidates(spec, ARCH)]
    for scaling, (name, config) in itertools.product(SCALINGS, FAMILY.ladder(ARCH)):  # plain loads, one stage
        spec = GemmSpec(129, 131, 272, "nt", "e5m2", "bias_col+relu", scaling=scaling)
        if not FAMILY.rejections(config, spec, ARCH):
            jobs.append((name, spec, config))
    return jobs


JOBS = _jobs()


@pytest.fixture(scope="module")
def images():
    from gemmtune.build import compile_configs
    from gemmtune.compiler import ptx_image

    compiled = compile_configs([(spec, config, ARCH) for _, spec, config in JOBS])
    return [result if isinstance(result, Exception) else ptx_image(result) for result in compiled]


def _wrong(image) -> str | None:
    from gemmtune.errors import GemmtuneError
    from gemmtune.evaluate import evaluate

    try:
        result = evaluate(image, verify_only=True, rng=np.random.default_rng(70))
    except GemmtuneError as err:  # one kernel that cannot load must not hide the others' results
        return f"{type(err).__name__}: {err}"
    return None if result.verify.ok else result.verify.message


@pytest.mark.parametrize("scaling", SCALINGS)
def test_fp8_mma_ptx_for_sm_89_is_right(images, scaling):
    failed = []
    for (name, spec, config), image in zip(JOBS, images):
        if spec.scaling != scaling:
            continue
        problem = str(image) if isinstance(image, Exception) else _wrong(image)
        if problem:
            failed.append(f"{name} {spec.short()} [{config.describe()}]: {problem}")
    assert not failed, "\n".join(failed)
