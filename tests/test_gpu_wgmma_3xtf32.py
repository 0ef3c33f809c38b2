"""GPU: fp32 as 3xtf32 on the wgmma family (sm_90a, every layout: MN-major operands are transposed as
they are split) is right at fp32's tolerance for every named config, on shapes cut at every edge
and with every epilogue kind.

    pytest -q -p no:cacheprovider tests/test_gpu_wgmma_3xtf32.py
"""
import pytest

import gemmtune
from gemmtune.kernels import family_for
from gemmtune.kernels.wgmma.config import split_candidates
from gemmtune.spec import GemmSpec
from gpu_checks import check_picks, failed_jobs, tma_rows

pytestmark = pytest.mark.gpu

# K a multiple of 4 (TMA: 16-byte rows); N not always (D then takes direct stores).
SHAPES = [(1, 1, 4), (7, 13, 8), (127, 129, 132), (1, 515, 300), (300, 1, 256), (1000, 1000, 1000),
          (4093, 4091, 4096), (96, 96, 16384)]


def _arch() -> str:
    from gemmtune.device import query_device

    arch = query_device().arch
    if arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs sm_90a, this GPU is {arch}")
    return "sm_90a"


def _split(*shape, epilogue=None, layout="nt") -> GemmSpec:
    return GemmSpec(*shape, layout=layout, dtype="fp32", epilogue=epilogue, math="3xtf32")


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_every_candidate_right_at_fp32_tolerance(layout):
    """Every named 3xtf32 config on every shape, verified against float64 with the fp32 tolerance
    (16·eps·√K), poisoned output first (evaluate)."""
    arch = _arch()
    specs = [_split(*tma_rows(shape, layout), layout=layout) for shape in SHAPES]
    jobs = [(spec, config, arch) for spec in specs for _, config in split_candidates(spec, arch)]
    failed = failed_jobs(jobs, lambda spec: spec.m + spec.k)
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+gelu", "bias_col+relu"])
def test_epilogues_on_odd_shapes(epilogue):
    cases = (((127, 129, 132), "nt"), ((300, 256, 100), "nt"), ((1, 512, 300), "nt"), ((2048, 2048, 2048), "nt"),
             ((127, 132, 100), "nn"), ((124, 132, 131), "tn"), ((132, 129, 100), "tt"), ((1000, 1000, 1000), "nn"))
    check_picks([_split(*shape, epilogue=epilogue, layout=layout) for shape, layout in cases], _arch(), "wgmma", 11)


def test_16_byte_rows_go_to_wgmma_others_staged():
    """Aligned rows go to wgmma as they are; rows that are not 16-byte multiples go to wgmma too, with
    the operands staged into aligned rows first (they went to mma.sync before the staging kernel)."""
    from gemmtune.chooser import choose

    arch = _arch()
    for layout in ("nt", "nn", "tn", "tt"):
        assert family_for(_split(2048, 2048, 2048, layout=layout), arch).name == "wgmma"
    odd = _split(2048, 2047, 2048, layout="nn")  # B's rows: 8188 bytes
    assert family_for(odd, arch).name == "wgmma" and choose(odd, arch).config.stage_operands


@pytest.mark.parametrize("layout,round_big", [("nt", False), ("nt", True), ("nn", False), ("tn", False), ("tt", False)])
def test_error_within_sgemm_on_the_report_inputs(layout, round_big):
    """The worst per-element error stays within 1.5x cuBLAS SGEMM's on every class of the accuracy
    report, those with values too small to split included (their pieces are summed again on CUDA
    cores); tf32 alone is far outside, so the comparison can fail."""
    from gemmtune.accuracy import INPUT_CLASSES, run_report
    from gemmtune.kernels.wgmma.config import default_config

    arch = _arch()
    spec = _split(512, 384, 4096, layout=layout)
    config = default_config(spec, arch).with_(round_big=round_big)
    kernels = [("3xtf32", gemmtune.build(spec, config=config, arch=arch, family="wgmma")),
               ("tf32", gemmtune.build(GemmSpec(512, 384, 4096, layout, "tf32"), arch=arch))]
    rows = run_report(spec, kernels, INPUT_CLASSES)
    split = {r.input_class: r.ratio for r in rows if r.method == "3xtf32"}
    tf32 = {r.input_class: r.ratio for r in rows if r.method == "tf32"}
    assert tf32["uniform"] > 20 and tf32["huge×tiny"] > 20, tf32
    assert not {name: ratio for name, ratio in split.items() if not ratio <= 1.5}, split


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_values_too_small_to_split_on_every_config_and_edge(layout):
    """Every named config, on shapes cut at every edge and one whose tail tiles are split along K:
    the report's classes with values too small to split (all of B, or a few among ordinary ones)
    stay within 1.5x SGEMM's worst error on the same inputs. Without the exact path such a piece loses
    2^-11 of its products (hundreds of times SGEMM's error)."""
    torch = pytest.importorskip("torch")
    from gemmtune.accuracy import INPUT_CLASSES, TOO_SMALL_TO_SPLIT, Reference, cublas_fp32

    arch = _arch()
    classes = [c for c in INPUT_CLASSES if c.name in TOO_SMALL_TO_SPLIT]
    failed = []
    for shape in ((127, 129, 132), (1000, 776, 1028), (96, 96, 16384)):
        spec = _split(*tma_rows(shape, layout), layout=layout)
        for name, config in split_candidates(spec, arch):
            kernel = gemmtune.build(spec, config=config, arch=arch, family="wgmma")
            for input_class in classes:
                a, b = input_class.draw(torch, spec, torch.Generator(device="cuda").manual_seed(7))
                reference = Reference.of(torch, spec, a, b)
                worst = reference.errors(torch, kernel(a, b))[1]
                sgemm = reference.errors(torch, cublas_fp32(torch, spec, a, b, tf32=False))[1]
                if not worst <= 1.5 * sgemm:
                    failed.append(f"{spec.short()} {name} {input_class.name}: {worst:.3g} against SGEMM {sgemm:.3g}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("layout", ["nt", "nn"])
def test_export_builds_and_its_harness_passes(tmp_path, layout):
    """The exported folder of a fused 3xtf32 kernel builds with nvcc and its own check passes, and
    `load` runs it from torch like the in-process build."""
    import subprocess

    from gemmtune.device import query_device
    from gemmtune.export import export_spec
    from gemmtune.export.toolchain import build_harness, find_nvcc

    arch = _arch()
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("no nvcc (pip install the test extra)")
    spec = _split(1000, 776, 332, epilogue="relu+add", layout=layout)
    folder = export_spec(spec, tmp_path / "gemm", arch=arch, device=query_device()).path
    done = subprocess.run([str(build_harness(folder, nvcc)), "5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stdout + done.stderr
    torch = pytest.importorskip("torch")
    a = torch.rand(spec.a_shape, device="cuda") * 2 - 1
    b = torch.rand(spec.b_shape, device="cuda") * 2 - 1
    c = torch.rand((spec.m, spec.n), device="cuda") * 2 - 1
    d = gemmtune.load(folder)(a, b, c)
    torch.cuda.synchronize()
    b_kn = b.double() if spec.b_shape == (spec.k, spec.n) else b.double().t()
    expected = torch.relu(a.double() @ b_kn) + c.double()
    assert torch.allclose(d.double(), expected, rtol=1e-5, atol=1e-5), (d.double() - expected).abs().max()
