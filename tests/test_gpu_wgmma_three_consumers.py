"""GPU (Hopper): 192-row wgmma tiles of 3 consumer warpgroups compute the right product, plain and with
every epilogue kind (bias, GELU, C read through the ring), on odd shapes (partial tile rows and columns,
a K tail), split tails and whole waves; and the chooser's wave-fit picks among them verify. Float64
reference, NaN-poisoned D (gemmtune.evaluate)."""
import pytest

from gemmtune.chooser import rank
from gemmtune.chooser.candidates import wave_fit_config
from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.spec import GemmSpec
from gpu_checks import check_picks, failed_jobs, hopper_arch

pytestmark = pytest.mark.gpu

BASE = WgmmaConfig(bm=192, bn=128, stages=5, consumers=3, specialized=True, persistent=True, group_m=8,
                   tma_store=True, store_slices=2, split_tail=True, serpentine=True, stmatrix=True)
SHAPES = [(193, 136, 72), (6336, 1024, 4096), (1000, 1000, 1000), (2112, 3072, 1024), (200, 2000, 8200)]
EPILOGUES = ["none", "bias_col", "bias_col+gelu", "add", "bias_col+add", "relu+add"]


def _config(spec: GemmSpec, bn: int) -> WgmmaConfig:
    """BASE at width `bn` with C through the ring where the epilogue reads it (as the chooser's picks), as
    the wave-fit rule adapts it (C in its own buffer where the ring cannot take it)."""
    from gemmtune.chooser.candidates import _c_through_ring, _wave_fit_variants
    from gemmtune.kernels import get_family

    config = BASE.with_(bn=bn)
    config = _c_through_ring(config, spec, 132).with_(bm=192, bn=bn, consumers=3) if spec.epilogue.reads_c else config
    family = get_family("wgmma")
    return next(c for c in _wave_fit_variants(config, spec) if not family.rejections(c, spec, "sm_90a"))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("bn", [128, 192])
def test_three_consumer_tiles_are_right(dtype, bn):
    arch = hopper_arch()
    from gemmtune.kernels import get_family

    family = get_family("wgmma")
    jobs = []
    for shape in SHAPES:
        for epilogue in EPILOGUES:
            spec = GemmSpec(*shape, layout="nt", dtype=dtype, epilogue=epilogue)
            config = _config(spec, bn)
            assert not family.rejections(config, spec, arch), (spec.short(), family.rejections(config, spec, arch))
            jobs.append((spec, config, arch))
    assert not failed_jobs(jobs, lambda spec: spec.m + spec.n + spec.k)


def test_wave_fit_picks_verify():
    arch = hopper_arch()
    specs = [GemmSpec(6304, 768, 3072, "nt", "bf16", epilogue="add"), GemmSpec(3000, 1024, 4096, "nt", "fp16"),
             GemmSpec(6304, 1024, 4096, "nt", "bf16", epilogue="bias_col+add"), GemmSpec(6336, 768, 2048, "nt", "bf16", epilogue="gelu"),
             GemmSpec(3000, 1536, 1000, "nt", "fp16", epilogue="bias_col+gelu"), GemmSpec(1500, 3070, 768, "nt", "bf16", epilogue="bias_col")]
    for spec in specs:
        assert rank(spec, arch)[0].config.consumers == 3, spec.short()
    check_picks(specs, arch, "wgmma", seed=3)
