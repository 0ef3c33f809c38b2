"""GPU: the chooser's wgmma picks for untuned shapes, which carry the write-back options (store in
slices, stmatrix, serpentine K, write-back under the last wgmma: chooser.candidates
with_write_back_options), compute the right result (float64 reference, random inputs, poisoned D) on
odd and LLM shapes, in bf16, fp16 and tf32, plain and with epilogues that do and do not read C."""
import pytest

from gemmtune.chooser import choose
from gemmtune.kernels import family_for
from gemmtune.spec import GemmSpec
from test_gpu_gemv_splitk import _all_right, _arch  # compile a batch, verify each, list the failures

pytestmark = pytest.mark.gpu

SHAPES = ((1000, 1000, 1000), (512, 4096, 4096), (777, 3333, 1536), (257, 1023, 4104), (6144, 6144, 96),
          (3072, 3072, 3072), (1024, 1024, 16384), (200, 300, 504), (64, 8192, 8192), (4096, 128, 4096))
EPILOGUES = ("none", "bias_row+relu", "alpha+beta", "bias_col+gelu")


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32"])
def test_untuned_wgmma_picks_are_right(dtype):
    arch = _arch()
    if not arch.startswith("sm_90"):
        pytest.skip("the wgmma family runs on sm_90a")
    jobs = []
    for index, (m, n, k) in enumerate(SHAPES):
        for epilogue in (EPILOGUES[0], EPILOGUES[1 + index % 3]):
            spec = GemmSpec(m, n, k, "nt", dtype, epilogue)
            if family_for(spec, arch).name == "wgmma":
                jobs.append((spec, choose(spec, arch).config, arch))
    assert len(jobs) >= 16
    assert any(config.overlap_epilogue for _, config, _ in jobs)  # the options are in what runs here
    assert _all_right(jobs) == []
