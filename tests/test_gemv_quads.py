"""The gemv columns kernel walking K in quads, without a GPU: which specs take it, the block shape
the chooser gives them, and that those shapes compile without spills (the GPU correctness tests are
tests/test_gpu_gemv_splitk.py's (16, 1000, 4104) and (3, 4096, 1000) shapes)."""
from __future__ import annotations

import pytest

from gemmtune.chooser import choose
from gemmtune.chooser.candidates import quad_config, ring_rule
from gemmtune.compiler import compile_kernel
from gemmtune.kernels.gemv.config import GemvConfig, quads
from gemmtune.kernels.gemv.render import render
from gemmtune.spec import GemmSpec


@pytest.mark.parametrize("spec, expected", [
    (GemmSpec(16, 4096, 4096, "nn", "fp32"), True),
    (GemmSpec(2, 4096, 4096, "nn", "tf32"), True),
    (GemmSpec(1, 4096, 4096, "nn", "fp32"), False),  # one vector: nothing to share a load of x with
    (GemmSpec(16, 4096, 4098, "nn", "fp32"), False),  # rows of A not 16-byte aligned
    (GemmSpec(16, 4094, 4096, "nn", "fp32"), False),  # rows of B not 16-byte aligned: VEC = 1
    (GemmSpec(16, 4096, 4096, "tn", "fp32"), False),  # A stored K×M: a vector's k are not contiguous
    (GemmSpec(16, 4096, 4096, "nt", "fp32"), False),  # B stored N×K: the rows kind
    (GemmSpec(8, 4096, 4096, "nn", "bf16"), False),  # 16-bit: VEC = 8
])
def test_which_specs_walk_k_in_quads(spec, expected):
    assert quads(spec) is expected
    assert ("add_quad" in render(spec, GemvConfig(threads=256, threads_x=4, unroll=2), "sm_90").code) is expected


@pytest.mark.parametrize("m, n, threads, across, unroll", [
    (16, 4096, 512, 8, 1), (16, 14336, 512, 32, 1), (8, 4096, 256, 4, 1), (8, 14336, 256, 16, 1),
    (5, 4096, 256, 4, 1), (4, 11008, 512, 16, 4), (6, 11008, 256, 8, 1), (12, 4096, 512, 8, 1), (16, 1000, 512, 2, 1),
    (16, 11008, 512, 8, 1), (16, 5120, 512, 4, 1)])  # 16 across would leave 172 and 160 blocks on 132 SMs
def test_quad_block_shape_on_an_h100(m, n, threads, across, unroll):
    spec = GemmSpec(m, n, 4096, "nn", "fp32")
    config = quad_config(spec, 132)
    assert (config.threads, config.threads_x, config.unroll) == (threads, across, unroll)
    # (on sm_90, 8-16 vectors with strips enough take the TMA-fed kernel instead: test_gemv_ring.py)
    arch = "sm_90" if ring_rule(spec, "sm_90", 132) is None else "sm_80"
    assert choose(spec, arch, 132).config == config


def test_below_four_vectors_the_model_picks():
    spec = GemmSpec(2, 4096, 4096, "nn", "fp32")  # (sm_90: the TMA-fed kernel, test_gemv_ring.py)
    assert quads(spec) and choose(spec, "sm_80", 132).config != quad_config(spec, 132)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("m", [4, 7, 8, 16])
@pytest.mark.parametrize("n", [1000, 4096, 14336])
def test_quad_block_shapes_compile_without_spills(arch, m, n):
    spec = GemmSpec(m, n, 4096, "nn", "fp32", "bias_col+relu")
    resources = compile_kernel(render(spec, quad_config(spec, 132), arch), arch).resources
    assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0, resources
