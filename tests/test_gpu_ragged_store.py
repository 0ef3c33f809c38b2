"""GPU (Hopper): wgmma tiles whose TMA-stored slices are not whole 128-byte rows (widths fitted to N, 128x224:
3.5 boxes) store a last box that overlaps the one before it (WgmmaConfig.ragged_slice, writeback.LAST_BOX).
Right on odd shapes (partial tiles across N, so the last box is clipped at D's edge; a K tail), in one and two
slices, with epilogues that stage a bias; float64 reference, NaN-poisoned D (gemmtune.evaluate)."""
import pytest

from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.spec import GemmSpec
from gpu_checks import failed_jobs, hopper_arch

pytestmark = pytest.mark.gpu

BASE = WgmmaConfig(bm=128, bn=224, stages=4, consumers=2, specialized=True, persistent=True, group_m=8,
                   tma_store=True, store_slices=2, split_tail=True, serpentine=True, stmatrix=True)
# (width, slices): 224 in 2 slices of 112 (1.75 boxes), 176 in one (2.75), 240 in one (3.75), 80 in one (1.25).
WIDTHS = [(224, 2), (176, 1), (240, 1), (80, 1), (160, 2)]
SHAPES = [(200, 1000, 264), (257, 3000, 1000), (130, 14336, 512)]
EPILOGUES = ["none", "bias_col+gelu", "bias_row+relu"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_ragged_slices_store_right(dtype):
    from gemmtune.kernels import get_family

    arch = hopper_arch()
    family = get_family("wgmma")
    jobs = []
    for (bn, slices), shape in zip(WIDTHS, SHAPES * 2):
        for epilogue in EPILOGUES:
            spec = GemmSpec(*shape, layout="nt", dtype=dtype, epilogue=epilogue)
            config = next(BASE.with_(bn=bn, store_slices=slices, stages=s) for s in (5, 4, 3)
                          if not family.rejections(BASE.with_(bn=bn, store_slices=slices, stages=s), spec, arch))
            assert config.ragged_slice(spec)
            jobs.append((spec, config, arch))
    assert not failed_jobs(jobs, lambda spec: spec.m + spec.n)
