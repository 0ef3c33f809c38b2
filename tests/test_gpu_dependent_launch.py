"""On the GPU: gemv kernels launched with dependent launch (kernels/parts/dependent_launch.py) start
before the kernel ahead of them has finished, so they must wait for it before reading what it
writes. A chain in which each GEMV reads the D that the one before it has just written (poisoned
with NaN before every round; rows kernels in bf16, the columns kernel in fp32) checks that, back to back and inside a captured CUDA graph; a GEMV
launched after torch work on its input checks the case where the kernel ahead is not ours."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import gemmtune  # noqa: E402
from gemmtune.chooser.candidates import SPLIT_ARCHS, split_config  # noqa: E402
from gemmtune.device import query_device  # noqa: E402
from gemmtune.kernels.config_base import arch_number  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.verify import tolerance  # noqa: E402

pytestmark = pytest.mark.gpu
ROUNDS = 20
# (vectors, layer widths, layout, dtype): 16 vectors through three layers (tensor-core rows kernel), one
# vector (CUDA-core rows kernel); fp32 with B stored K×N (the CUDA-core columns kernel), 16 vectors (on sm_90
# the 4096-wide layers fed by TMA, chooser.candidates.ring_rule, the last launched plainly) and one; one vector
# of few outputs (the columns kernel with K split over a cluster of 16 on sm_90, asked for by name:
# chooser.candidates.split_config).
CHAINS = {"rows-16": (16, (4096, 4096, 1000), "nt", "bf16"), "rows-1": (1, (4096, 11008, 4096), "nt", "bf16"),
          "columns-16": (16, (4096, 4096, 1000), "nn", "fp32"), "columns-1": (1, (4096, 11008, 4096), "nn", "fp32"),
          "columns-split": (1, (1024, 2048, 1000), "nn", "fp32")}
TYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
WIDTH = 4096  # the chain's input width


def _chain(m: int, widths: tuple[int, ...], layout: str, dtype: str, split: bool = False):
    """The layers' kernels: layer i maps m×k vectors to m×n (B stored n×k for nt, k×n for nn). `split`: the
    columns kernel with K split over a cluster, by name (no pick takes it since b1ae38c: CLUSTER_SPLIT_UNTUNED)."""
    kernels, k = [], WIDTH
    device = query_device()
    for n in widths:
        spec = GemmSpec(m, n, k, layout, dtype)
        if split and arch_number(device.arch) in SPLIT_ARCHS:
            kernel = gemmtune.build(spec, family="gemv", config=split_config(spec, device.sm_count))
        else:
            kernel = gemmtune.build(spec)
        if kernel.family != "gemv":  # since c1487c9 the chooser gives 16-bit A of 4-16 rows to wgmma swap-AB
            kernel = gemmtune.build(spec, family="gemv")
        if arch_number(kernel.arch) >= 90 and not (layout == "nn" and m > 1):
            assert kernel.compiled.source.dependent_launch  # (register-fed columns kernels: one vector only)
        kernels.append(kernel)
        k = n
    return kernels


def _weights(widths: tuple[int, ...], seed: int, layout: str = "nt", dtype: str = "bf16") -> list:
    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes, k = [], WIDTH
    for n in widths:
        shapes.append((n, k) if layout == "nt" else (k, n))
        k = n
    # Scaled so the activations stay near 1 through the layers.
    return [torch.rand(s, generator=g, device="cuda").mul_(2).sub_(1).mul_(k_of(s, layout) ** -0.5).to(TYPES[dtype])
            for s in shapes]


def k_of(shape: tuple[int, int], layout: str) -> int:
    return shape[1] if layout == "nt" else shape[0]


def _check_layers(x, weights, outs, layout: str = "nt", dtype: str = "bf16") -> None:
    """Each layer's D against float64 products of the input it should have read (the D before it)."""
    inputs = [x] + outs[:-1]
    for i, (a, w, d) in enumerate(zip(inputs, weights, outs)):
        got = d.double().cpu()
        assert not torch.isnan(got).any(), f"layer {i}: NaN in D (read a poisoned input, or not written)"
        stored = w.double().cpu()
        ref = a.double().cpu() @ (stored.t() if layout == "nt" else stored)
        error = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        k = k_of(tuple(w.shape), layout)
        assert error <= tolerance(dtype, k, dtype), f"layer {i}: relative error {error:.3g}"


@pytest.mark.parametrize("chain", list(CHAINS))
def test_back_to_back_chain_reads_what_the_kernel_before_wrote(chain):
    m, widths, layout, dtype = CHAINS[chain]
    kernels = _chain(m, widths, layout, dtype, split=chain == "columns-split")
    x = torch.rand((m, WIDTH), device="cuda").mul_(2).sub_(1).to(TYPES[dtype])
    for round_ in range(ROUNDS):
        weights = _weights(widths, round_, layout, dtype)
        outs = [torch.full((m, n), float("nan"), device="cuda", dtype=TYPES[dtype]) for n in widths]
        a = x
        for kernel, w, d in zip(kernels, weights, outs):  # queued back to back, no sync between
            kernel(a, w, out=d)
            a = d
        torch.cuda.synchronize()
        _check_layers(x, weights, outs, layout, dtype)


@pytest.mark.parametrize("chain", ["rows-16", "columns-split", "columns-16"])
def test_chain_inside_a_cuda_graph(chain):
    m, widths, layout, dtype = CHAINS[chain]
    kernels = _chain(m, widths, layout, dtype, split=chain == "columns-split")
    if chain == "columns-split" and arch_number(kernels[0].arch) == 90:
        assert all(k.compiled.source.cluster_blocks == 16 for k in kernels)
    if chain == "columns-16" and arch_number(kernels[0].arch) == 90:
        assert [bool(k.compiled.source.tensor_maps) for k in kernels] == [True, True, False]
    x = torch.rand((m, WIDTH), device="cuda").mul_(2).sub_(1).to(TYPES[dtype])
    weights = _weights(widths, 0, layout, dtype)
    outs = [torch.empty((m, n), device="cuda", dtype=TYPES[dtype]) for n in widths]

    def forward():
        a = x
        for kernel, w, d in zip(kernels, weights, outs):
            d.fill_(float("nan"))  # a torch kernel between ours: the next GEMV waits for it too
            kernel(a, w, out=d)
            a = d

    forward()  # load the kernels before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    for round_ in range(5):
        fresh = _weights(widths, 100 + round_, layout, dtype)
        for w, f in zip(weights, fresh):
            w.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        _check_layers(x, weights, outs, layout, dtype)


def test_gemv_after_torch_writes_its_input():
    """The kernel ahead is torch's (it never lets ours start early): ours must still see its writes."""
    m, widths, layout, dtype = CHAINS["rows-16"]
    kernel = _chain(m, widths[:1], layout, dtype)[0]
    w = _weights(widths[:1], seed=7)[0]
    x = torch.empty((m, WIDTH), device="cuda", dtype=torch.bfloat16)
    for round_ in range(ROUNDS):
        out = torch.full((m, widths[0]), float("nan"), device="cuda", dtype=torch.bfloat16)
        x.fill_(float("nan"))
        x.copy_(torch.rand((m, WIDTH), device="cuda").mul_(2).sub_(1))  # the write ours must wait for
        kernel(x, w, out=out)
        torch.cuda.synchronize()
        _check_layers(x, [w], [out])
