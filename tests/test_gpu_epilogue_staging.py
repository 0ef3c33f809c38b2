"""GPU: the epilogue's cheaper forms (issue 67) give the right answer everywhere they run.

- wgmma's write-back reads the bias once per column (row) into registers: through shared memory, a
  pair per load where the slice lies inside D and the vector is aligned, single clamped loads where
  the slice crosses N (columns past it read bias[N - 1], their outputs clipped by the TMA store) or
  the vector is not aligned; from registers (store_tile), clamped loads before the guarded stores;
  rows past M read bias[M - 1]. Cases reach each path, with and without C.
- GELU by tanh.approx.f32 for 16-bit outputs, tanhf for fp32 ones, in every family.
Each result is checked against the float64 reference (verify: per-dtype tolerance, NaN-poisoned D).
"""
from __future__ import annotations

import numpy as np
import pytest

from gemmtune.kernels import get_family
from gemmtune.spec import GemmSpec

from gpu_checks import failed_jobs, hopper_arch

pytestmark = pytest.mark.gpu

WGMMA = get_family("wgmma")
# (spec, changes to the ladder's sliced_store step (or to "step"), or None for the chooser's pick). N = 1000 cuts
# the last slice of 128 columns at 104 (the clamped path), N = 768 and 3072 fill every slice (pairs);
# M = 1001 leaves rows past M in the last tile.
STAGED_CASES = [
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "bias_col+gelu"), None),
    (GemmSpec(1001, 768, 256, "nt", "fp16", "bias_col+gelu"), None),
    (GemmSpec(6304, 3072, 768, "nt", "bf16", "bias_col+gelu"), None),  # issue 67's shape, the pick
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "bias_row+gelu"), None),
    (GemmSpec(1000, 1000, 512, "nt", "bf16", "bias_col+gelu", out_dtype="fp32"), None),  # in place, tanhf
    (GemmSpec(1000, 1000, 256, "tn", "fp16", "bias_col+relu"), {"stmatrix": True, "store_slices": 4}),
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "bias_col+gelu"),
     {"stmatrix": True, "store_slices": 2, "overlap_epilogue": True, "persistent": True}),
    (GemmSpec(1001, 1000, 1000, "nt", "bf16", "bias_col+gelu"), {"stmatrix": True, "bm": 256, "bn": 128, "store_slices": 2}),  # 4 rows a column
    (GemmSpec(1001, 1000, 256, "nt", "fp16", "bias_col+gelu"), {"stmatrix": True, "bm": 64, "consumers": 1}),
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "bias_col+gelu+add"),
     {"store_slices": 2, "c_ring": True, "stmatrix": True, "d_over_c": True}),
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "alpha+beta+bias_row+relu"),
     {"store_slices": 2, "c_ring": True, "stmatrix": True, "d_over_c": True, "c_first_buffer": True}),
    (GemmSpec(1001, 1000, 256, "nt", "bf16", "bias_col+gelu"), {"stmatrix": False, "store_slices": 2}),  # in place
    (GemmSpec(1001, 1000, 256, "nt", "fp16", "bias_row+gelu+add"), {"stmatrix": False, "c_ring": True}),
    # stores from registers (store_tile): N odd (single stores), and with C
    (GemmSpec(1001, 1001, 256, "nt", "bf16", "bias_col+gelu"), {"step": "persistent"}),
    (GemmSpec(1001, 1000, 256, "nt", "fp16", "bias_row+gelu+add"), {"step": "persistent"}),
    (GemmSpec(1000, 300, 1000, "nt", "bf16", "bias_col+relu"), {"step": "persistent", "bn": 152}),  # fitted width
]


def _config(spec: GemmSpec, changes: dict | None, arch: str):
    from gemmtune.chooser import choose

    if changes is None:
        return choose(spec, arch).config
    changes = dict(changes)
    config = dict(WGMMA.ladder(arch))[changes.pop("step", "sliced_store")].with_(**changes)
    assert not WGMMA.rejections(config, spec, arch), WGMMA.rejections(config, spec, arch)
    return config


def test_staged_bias_on_every_path():
    arch = hopper_arch()
    jobs = [(spec, _config(spec, changes, arch), arch) for spec, changes in STAGED_CASES]
    assert not failed_jobs(jobs, seed=lambda spec: spec.m + spec.n + spec.k)


@pytest.mark.parametrize("epilogue", ["bias_col+gelu", "bias_row+relu"])
def test_a_bias_vector_off_its_pair_alignment(epilogue):
    """gemmtune.torch and build() take 16-byte-aligned tensors only, but an exported kernel takes any
    pointer: a bias one element past an allocation reads single values (the pairs' loads would fault)."""
    torch = pytest.importorskip("torch")
    import gemmtune
    from gemmtune.runtime import LoadedKernel
    from gemmtune.verify import compare

    arch = hopper_arch()
    spec = GemmSpec(1001, 768, 256, "nt", "bf16", epilogue)
    kernel = gemmtune.build(spec, arch=arch)
    assert kernel.family == "wgmma"
    generator = torch.Generator(device="cuda").manual_seed(67)
    uniform = lambda *shape: (torch.rand(shape, generator=generator, device="cuda") * 2 - 1).bfloat16()  # noqa: E731
    a, b = uniform(spec.m, spec.k), uniform(spec.n, spec.k)
    length = spec.n if "bias_col" in epilogue else spec.m
    bias = uniform(length + 1)[1:]  # 2 bytes past a 256-byte-aligned allocation
    d = torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=torch.bfloat16)
    loaded = LoadedKernel(kernel.compiled)
    try:
        loaded.bind({"A": a.data_ptr(), "B": b.data_ptr(), "bias": bias.data_ptr(), "D": d.data_ptr()})()
        torch.cuda.synchronize()
    finally:
        loaded.unload()
    product = a.double() @ b.double().t()
    operands = {"bias": bias.double().cpu().numpy()}
    expected = spec.epilogue.reference(product.cpu().numpy(), operands)
    result = compare(d.float().cpu().numpy(), expected, spec.dtype, spec.k, spec.out_dtype)
    assert result.ok, result.message


# Every family with GELU: the hardware tanh for 16-bit D, tanhf for fp32 D; odd shapes (edges).
FAMILY_CASES = [
    ("wgmma", GemmSpec(1001, 1000, 1000, "tn", "fp16", "bias_row+gelu")),
    ("wgmma", GemmSpec(1001, 1000, 1000, "nt", "bf16", "gelu+add", out_dtype="fp32")),
    ("mma", GemmSpec(127, 129, 131, "tn", "bf16", "bias_col+gelu")),
    ("mma", GemmSpec(127, 129, 131, "nt", "fp16", "bias_row+gelu+add")),
    ("mma", GemmSpec(127, 129, 131, "nn", "bf16", "bias_col+gelu", out_dtype="fp32")),
    ("gemv", GemmSpec(3, 4095, 1023, "nt", "bf16", "bias_col+gelu")),
    ("gemv", GemmSpec(1, 1001, 777, "nn", "fp16", "alpha+bias_col+gelu")),
    ("simt", GemmSpec(67, 45, 33, "nt", "fp32", "bias_col+gelu")),
]


@pytest.mark.parametrize("family,spec", FAMILY_CASES, ids=[f"{f}-{s.short()}" for f, s in FAMILY_CASES])
def test_gelu_in_every_family(family, spec):
    import gemmtune
    from gemmtune.device import query_device
    from gemmtune.evaluate import evaluate

    if family == "wgmma":
        hopper_arch()
    kernel = gemmtune.build(spec, family=family, arch=query_device().arch + ("a" if family == "wgmma" else ""))
    result = evaluate(kernel.compiled, verify_only=True, rng=np.random.default_rng(67))
    assert result.verify.ok, f"{family} {spec.short()}: {result.verify.message}"
