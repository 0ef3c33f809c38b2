"""GPU: every ladder step and all four layouts compute the right product on random data."""
import numpy as np
import pytest

from gemmtune.build import compile_configs
from gemmtune.compiler import compile_kernel
from gemmtune.kernels.simt.render import render
from gemmtune.kernels.simt.config import SimtConfig, ladder
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1000, 1000, 1000), (4092, 4092, 4092), (3000, 5000, 700)]
LAYOUTS = ("nn", "nt", "tn", "tt")


def _arch() -> str:
    from gemmtune.device import query_device

    return query_device().arch


def _compiled(jobs: list) -> dict:
    """Compile every job once, in parallel: NVRTC is the slow part of this file."""
    kernels = compile_configs(jobs)
    failed = [(job[0].short(), job[1].describe(), k) for job, k in zip(jobs, kernels) if isinstance(k, Exception)]
    assert not failed, failed[:3]
    return {(job[0], job[1]): kernel for job, kernel in zip(jobs, kernels)}


@pytest.fixture(scope="module")
def compiled_ladder():
    """Compile every (step, layout, shape) once, in parallel: NVRTC is the slow part of this file."""
    arch = _arch()
    jobs = [(GemmSpec(*shape, layout=layout), config, arch)
            for _, config in ladder(arch) for layout in LAYOUTS for shape in SHAPES]
    return _compiled(jobs)


@pytest.mark.parametrize("step", [name for name, _ in ladder()])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ladder_step_correct(compiled_ladder, step, layout):
    from gemmtune.evaluate import evaluate

    config = dict(ladder(_arch()))[step]
    rng = np.random.default_rng(hash((step, layout)) & 0xFFFF)
    for shape in SHAPES:
        spec = GemmSpec(*shape, layout=layout)
        result = evaluate(compiled_ladder[(spec, config)], verify_only=True, rng=rng)
        assert result.verify.ok, f"{step} {layout} {shape}: {result.verify.message}"


@pytest.mark.parametrize("prefetch_c", [False, True])
@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
def test_epilogues_on_odd_shapes(epilogue, prefetch_c):
    from gemmtune.evaluate import evaluate

    arch = _arch()
    config = ladder(arch)[-1][1].with_(prefetch_c=prefetch_c)
    for shape in [(7, 13, 5), (127, 129, 131), (1000, 999, 300)]:
        for layout in ("nn", "tt"):
            spec = GemmSpec(*shape, layout=layout, epilogue=epilogue)
            result = evaluate(compile_kernel(render(spec, config, arch), arch), verify_only=True)
            assert result.verify.ok, f"{epilogue} {layout} {shape}: {result.verify.message}"


STAGE_C_CONFIGS = {
    "double_buffer": dict(ladder())["double_buffer"],
    "128x128": SimtConfig(bm=128, bn=128, bk=16, tm=8, tn=4, wm=64, wn=64, wniter=4, pad=4),
    "128x256": SimtConfig(bm=128, bn=256, bk=16, tm=16, tn=4, wm=128, wn=32, wniter=2),
}


STAGE_C_SHAPES = [(7, 13, 5), (130, 260, 32), (127, 129, 131), (1000, 999, 300), (300, 1028, 1000)]
STAGE_C_EPILOGUES = ("relu+add", "alpha+beta")


@pytest.fixture(scope="module")
def compiled_stage_c():
    arch = _arch()
    jobs = [(GemmSpec(*shape, layout=layout, epilogue=epilogue), config.with_(stage_c=True), arch)
            for config in STAGE_C_CONFIGS.values() for epilogue in STAGE_C_EPILOGUES
            for shape in STAGE_C_SHAPES for layout in LAYOUTS]
    return _compiled(jobs)


@pytest.mark.parametrize("name", list(STAGE_C_CONFIGS))
@pytest.mark.parametrize("epilogue", STAGE_C_EPILOGUES)
def test_staged_c_on_odd_shapes(compiled_stage_c, name, epilogue):
    """C copied to shared memory by cp.async: one k-slice (K=5), exactly two (K=32), many; N % 4 != 0 (4-byte
    copies) and partial tiles at every edge; every layout."""
    from gemmtune.evaluate import evaluate

    config = STAGE_C_CONFIGS[name].with_(stage_c=True)
    for shape in STAGE_C_SHAPES:
        for layout in LAYOUTS:
            spec = GemmSpec(*shape, layout=layout, epilogue=epilogue)
            kernel = compiled_stage_c[(spec, config)]
            assert kernel.source.dynamic_smem > 0
            result = evaluate(kernel, verify_only=True)
            assert result.verify.ok, f"{name} {epilogue} {layout} {shape}: {result.verify.message}"


def test_build_call_on_torch_arrays():
    torch = pytest.importorskip("torch")
    import gemmtune

    spec = gemmtune.GemmSpec(300, 200, 100, layout="nt", epilogue="relu+add")
    kern = gemmtune.build(spec)
    A = torch.randn(300, 100, device="cuda")
    B = torch.randn(200, 100, device="cuda")
    C = torch.randn(300, 200, device="cuda")
    D = kern(A, B, C)
    expected = torch.relu(A.double() @ B.double().T) + C.double()
    torch.cuda.synchronize()
    assert torch.linalg.norm(D.double() - expected) / torch.linalg.norm(expected) < 1e-5
    out = torch.full((300, 200), float("nan"), device="cuda")
    assert kern(A, B, C=C, out=out) is out and not torch.isnan(out).any()
