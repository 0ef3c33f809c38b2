"""GPU: the gemv tensor-core path computes the right result (float64 reference, random inputs,
poisoned D) for 2-16 rows of bf16/fp16/tf32 A in layout nt, N not a multiple of 8, K with and without a
tail span, fused epilogues; K not a multiple of 8 falls back to the CUDA-core kernel; the chooser's
pick (built as a user gets it) is right."""
import pytest

from gemmtune.build import build
from gemmtune.chooser import choose
from gemmtune.evaluate import evaluate
from gemmtune.kernels import get_family
from gemmtune.kernels.gemv.config import GemvConfig
from gemmtune.spec import GemmSpec
from test_gpu_gemv_splitk import _all_right, _arch  # compile a batch, verify each, list the failures

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def untuned_tensor_cores(monkeypatch):
    """These tests verify the path the chooser gives untuned shapes: pinned on, whatever the default."""
    import importlib

    candidates_module = importlib.import_module("gemmtune.chooser.candidates")  # the package re-exports a function of that name

    monkeypatch.setattr(candidates_module, "GEMV_TENSOR_CORES_UNTUNED", True)

ROWS = (2, 7, 8, 16)
OUTPUTS = (8, 127, 1000, 4096, 14336)
DEPTHS = (64, 1000, 4096)  # 1000: K % 32 != 0, the last span is partly outside K
EPILOGUES = ("none", "bias_col+relu", "add", "alpha+beta+bias_row+gelu")
# Block shapes beside the chooser's pick: one warp per group (no shared-memory sum), 4 tiles per warp,
# 8 warps on one tile with a deep unroll, 2 warps per group with a short one.
CONFIGS = (GemvConfig(threads=128, warps_per_output=1, unroll=4, tensor_cores=True, mma_tiles=4),
           GemvConfig(threads=512, warps_per_output=8, unroll=8, tensor_cores=True, mma_tiles=1),
           GemvConfig(threads=256, warps_per_output=2, unroll=2, tensor_cores=True, mma_tiles=4),
           GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True, mma_tiles=2))


def _specs(layout: str, dtype: str, outputs, depths):
    """Every row count × output count × depth, the epilogues taken in turn."""
    shapes = [(m, n, k) for m in ROWS for n in outputs for k in depths]
    return [GemmSpec(m, n, k, layout, dtype, EPILOGUES[i % len(EPILOGUES)]) for i, (m, n, k) in enumerate(shapes)]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_tensor_core_kernels_are_right(dtype):
    arch = _arch()
    family = get_family("gemv")
    jobs = []
    for spec in _specs("nt", dtype, OUTPUTS, DEPTHS):
        # the gemv family's own pick (since c1487c9 the chooser gives 16-bit A of 4-16 rows to wgmma swap-AB)
        pick = choose(spec, arch, family="gemv").config
        assert pick.tensor_cores, spec.short()
        configs = [pick] + ([c for c in CONFIGS if not family.rejections(c, spec, arch)] if spec.n < 14336 else [])
        jobs += [(spec, c, arch) for c in dict.fromkeys(configs)]
    assert len(jobs) > 150
    assert _all_right(jobs) == []


WIDE_ROWS = (17, 31, 33, 48, 64)  # past 16 rows: blocks of 16 vectors, the last one partly padding
WIDE_CONFIGS = CONFIGS + (GemvConfig(threads=256, warps_per_output=8, unroll=2, tensor_cores=True, mma_tiles=2),
                          GemvConfig(threads=128, warps_per_output=4, unroll=2, tensor_cores=True, mma_tiles=2))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_tensor_core_kernels_past_16_rows_are_right(dtype):
    """17-64 rows (asked by name: family_for hands them to gemv only up to CHOSEN_TENSOR_CORE_ROWS)."""
    arch = _arch()
    family = get_family("gemv")
    shapes = [(m, n, k) for m in WIDE_ROWS for n in (8, 127, 1000, 4096) for k in (64, 1000)]
    jobs = []
    for i, (m, n, k) in enumerate(shapes):
        spec = GemmSpec(m, n, k, "nt", dtype, EPILOGUES[i % len(EPILOGUES)])
        jobs += [(spec, c, arch) for c in WIDE_CONFIGS if not family.rejections(c, spec, arch)]
    assert len(jobs) > 150
    assert _all_right(jobs) == []


def test_fp32_output_and_c_from_bf16():
    arch = _arch()
    jobs = [(GemmSpec(m, 1000, 4096, "nt", "bf16", epilogue, "fp32"), CONFIGS[-1], arch)
            for m in (7, 16) for epilogue in ("none", "bias_col+add")]
    assert _all_right(jobs) == []


@pytest.mark.parametrize("m", ROWS)
def test_k_not_a_multiple_of_8_falls_back_to_cuda_cores(m, tmp_path):
    spec = GemmSpec(m, 1000, 1004, "nt", "bf16", "bias_col+relu")
    assert "not a multiple of 8" in " ".join(get_family("gemv").rejections(CONFIGS[-1], spec, _arch()).values())
    kern = build(spec, db_path=tmp_path / "empty.sqlite")
    assert kern.family == "gemv" and not kern.config.tensor_cores
    assert evaluate(kern.compiled, verify_only=True).ok, kern


@pytest.mark.parametrize("spec", [GemmSpec(16, 4096, 4096, "nt", "bf16"), GemmSpec(16, 14336, 4096, "nt", "fp16"),
                                  GemmSpec(8, 4096, 4096, "nt", "bf16"), GemmSpec(16, 4096, 14336, "nt", "bf16"),
                                  GemmSpec(3, 4096, 4096, "nt", "bf16", "bias_col+gelu+add"),
                                  GemmSpec(16, 4096, 4096, "nt", "tf32"), GemmSpec(7, 1000, 4100, "nt", "tf32", "add")],
                         ids=lambda s: s.short())
def test_chooser_picks_are_right_and_repeatable(spec, tmp_path):
    """As a user builds it (empty tuning database), and the gemv family's own pick; each verified, timed over
    many launches, verified again. (16-bit A of 4-16 rows goes to wgmma swap-AB since c1487c9.)"""
    kern = build(spec, db_path=tmp_path / "empty.sqlite")
    assert kern.family == "gemv" or (kern.family == "wgmma" and kern.config.swap_ab), kern
    gemv = kern if kern.family == "gemv" else build(spec, family="gemv", db_path=tmp_path / "empty.sqlite")
    assert gemv.config.tensor_cores, gemv
    for k in (kern,) if gemv is kern else (kern, gemv):
        result = evaluate(k.compiled)
        assert result.ok and result.measurement is not None, k


# Layout nn (B stored K×N): the columns kernel on tensor cores, fp32 as 3xtf32 and tf32. N = 127
# takes only one-tile groups (a lane loads mma_tiles neighbouring outputs, aligned).
NN_CONFIGS = (GemvConfig(threads=256, warps_per_output=8, unroll=4, tensor_cores=True, mma_tiles=4),
              GemvConfig(threads=128, warps_per_output=1, unroll=2, tensor_cores=True, mma_tiles=2),
              GemvConfig(threads=512, warps_per_output=4, unroll=1, tensor_cores=True, mma_tiles=1),
              GemvConfig(threads=256, warps_per_output=2, unroll=4, tensor_cores=True, mma_tiles=4))
NN_OUTPUTS = (8, 127, 1000, 4096)
NN_DEPTHS = (4, 64, 1000, 4100)  # 1000 and 4100: the last span is partly outside K


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_columns_tensor_core_kernels_are_right(dtype):
    arch = _arch()
    family = get_family("gemv")
    jobs = [(spec, c, arch) for spec in _specs("nn", dtype, NN_OUTPUTS, NN_DEPTHS)
            for c in NN_CONFIGS if not family.rejections(c, spec, arch)]
    assert len(jobs) > 150
    assert _all_right(jobs) == []


def test_columns_tensor_cores_keep_fp32_accuracy():
    """3xtf32 on the columns kernel is within 1.5x cuBLAS SGEMM's worst per-element error on every class
    of the accuracy report, the values too small to split included (their chunks are summed on CUDA
    cores); tf32 on the same kernel is far outside it (the comparison can fail)."""
    import gemmtune
    from gemmtune.accuracy import INPUT_CLASSES, run_report

    arch = _arch()
    spec = GemmSpec(16, 1000, 4096, "nn", "fp32")
    config = NN_CONFIGS[0]
    kernels = [("3xtf32", gemmtune.build(spec, arch=arch, family="gemv", config=config)),
               ("tf32", gemmtune.build(GemmSpec(16, 1000, 4096, "nn", "tf32"), arch=arch, family="gemv", config=config))]
    rows = run_report(spec, kernels, INPUT_CLASSES)
    split = {r.input_class: r.ratio for r in rows if r.method == "3xtf32"}
    tf32 = {r.input_class: r.ratio for r in rows if r.method == "tf32"}
    print(split, tf32)
    assert tf32["uniform"] > 20, tf32
    bad = {name: ratio for name, ratio in split.items() if not ratio <= 1.5}
    assert not bad, bad


def test_math_simt_keeps_cuda_cores(tmp_path):
    spec = GemmSpec(16, 1000, 4096, "nn", "fp32", math="simt")
    assert "math simt" in " ".join(get_family("gemv").rejections(NN_CONFIGS[0], spec, _arch()).values())
    kern = build(spec, db_path=tmp_path / "empty.sqlite")
    assert kern.family == "gemv" and not kern.config.tensor_cores
    assert evaluate(kern.compiled, verify_only=True).ok, kern
