"""GPU (Hopper): the wgmma kernel with swap_ab (it computes Dᵀ = B·Aᵀ and writes D transposed) is right
on decode-sized and odd shapes, with every epilogue kind, its split tail (finisher and shares), in both
16-bit types, launch after launch: float64 reference of the rounded inputs, NaN-poisoned D."""
import numpy as np
import pytest

from gemmtune.kernels import get_family
from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.spec import GemmSpec

pytestmark = pytest.mark.gpu

FAMILY = get_family("wgmma")
BASE = WgmmaConfig(bm=64, bn=64, stages=8, consumers=1, specialized=True, persistent=True, group_m=8, swap_ab=True)

# (M, N, K, dtype, epilogue): M = the tile's columns (a few tokens), N = its 64-row blocks (weights).
CASES = [
    (1, 1000, 520, "bf16", "bias_col+gelu"),      # one token, N not a multiple of 64
    (5, 5120, 1280, "fp16", "bias_col+gelu"),
    (33, 4104, 4096, "bf16", "bias_col+add"),     # M odd: the last column pair half outside
    (40, 5120, 5120, "bf16", "none"),
    (64, 200, 72, "fp16", "relu+add"),            # K under one k-block
    (17, 3000, 8200, "bf16", "bias_row+gelu+add"),  # a bias per row of D: per column of the kernel's tile
    (120, 136, 1000, "fp16", "alpha+beta"),
    (8, 512, 65536, "bf16", "add"),               # 8 tiles of 1024 k-blocks: many-way splits summed in shares
]


def _hopper() -> str:
    from gemmtune.device import query_device

    arch = query_device().arch
    if arch != "sm_90":
        pytest.skip(f"the wgmma family needs a Hopper GPU, this one is {arch}")
    return "sm_90a"


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_swap_ab_correct(case, split):
    from gemmtune.compiler import compile_kernel
    from gemmtune.evaluate import evaluate

    arch = _hopper()
    m, n, k, dtype, epilogue = CASES[case]
    spec = GemmSpec(m, n, k, "nt", dtype, epilogue=None if epilogue == "none" else epilogue)
    config = BASE.with_(bn=max(8, -(-m // 8) * 8), split_tail=split)
    assert not FAMILY.rejections(config, spec, arch), FAMILY.rejections(config, spec, arch)
    compiled = compile_kernel(FAMILY.render(spec, config, arch), arch)
    for seed in (3, 4):  # a second launch: the split tail's flags and counters reset themselves
        result = evaluate(compiled, verify_only=True, rng=np.random.default_rng(seed))
        assert result.verify.ok, f"{spec.short()} {config.describe()}: {result.verify.message}"


def test_swap_ab_through_torch():
    """A built swap_ab kernel called on torch tensors (x, w as torch.nn.Linear holds them) gives x·wᵀ."""
    torch = pytest.importorskip("torch")
    from gemmtune.build import build

    arch = _hopper()
    spec = GemmSpec(24, 3072, 1024, "nt", "bf16", epilogue="bias_col")
    kernel = build(spec, BASE.with_(bn=24), arch)
    x = torch.randn(24, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3072, 1024, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(3072, device="cuda", dtype=torch.bfloat16)
    d = kernel(x, w, bias)
    want = x.double() @ w.double().t() + bias.double()
    assert torch.allclose(d.double(), want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
