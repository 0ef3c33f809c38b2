"""On the GPU: gemmtune kernels inside PyTorch. CUDA-graph capture and replay of every family's kernel
gives the right D; a side stream with work queued before the call gives the right D; gemmtune.torch's
custom operator passes torch.library.opcheck, runs under torch.compile(fullgraph=True) and CUDA
graphs, and differentiates; a kernel with state of its own runs right on two streams at once. References
are float64 products of the same (rounded) inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

import gemmtune  # noqa: E402
import gemmtune.torch as gt  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.verify import tolerance  # noqa: E402

pytestmark = pytest.mark.gpu
TYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# One spec per kernel kind the registry picks on an H100 (gemv: M ≤ 3 in 16-bit nt; wgmma: 16-bit aligned; simt:
# fp32; wgmma with staged operands: 16-bit rows that are not 16-byte multiples, copied into aligned
# rows before each launch) and the mma family, forced, on the same unaligned shape.
UNALIGNED = GemmSpec(1000, 1001, 1003, layout="nn", dtype="bf16", epilogue="bias_row+gelu")
FAMILY_SPECS = {"gemv": GemmSpec(3, 1000, 512, layout="nt", dtype="bf16"),  # (4-128 rows: swap-AB wgmma)
                "wgmma": GemmSpec(520, 1032, 264, layout="nt", dtype="bf16", epilogue="relu+add"),
                "simt": GemmSpec(300, 200, 130, layout="nn", dtype="fp32", epilogue="bias_col"),
                "wgmma-staged": UNALIGNED, "mma": UNALIGNED}
FORCED = {"mma": "mma"}


def _build(kind: str):
    kernel = gemmtune.build(FAMILY_SPECS[kind], family=FORCED.get(kind))
    assert kernel.family == kind.split("-")[0]
    assert kernel.compiled.source.staged if kind == "wgmma-staged" else not kernel.compiled.source.staged
    return kernel


def _operands(spec: GemmSpec, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    kind = TYPES[spec.dtype]
    out = TYPES[spec.out_dtype]
    values = {"A": torch.rand(spec.a_shape, generator=g, device="cuda").mul_(2).sub_(1).to(kind),
              "B": torch.rand(spec.b_shape, generator=g, device="cuda").mul_(2).sub_(1).to(kind)}
    for op in spec.epilogue.operands():
        if op.kind == "scalar":
            values[op.name] = 1.5
        else:
            values[op.name] = torch.rand(op.shape(spec.m, spec.n), generator=g, device="cuda").mul_(2).sub_(1).to(out)
    return values


def _reference(spec: GemmSpec, values: dict) -> torch.Tensor:
    a = values["A"].double().t() if spec.a_trans else values["A"].double()
    b = values["B"].double().t() if spec.b_trans else values["B"].double()
    operands = {k: (v.double().cpu().numpy() if torch.is_tensor(v) else v) for k, v in values.items() if k not in ("A", "B")}
    return torch.from_numpy(spec.epilogue.reference((a @ b).cpu().numpy(), operands))


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.double().cpu()
    assert not torch.isnan(out).any(), "D has NaN: an element was not written"
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _check(spec: GemmSpec, out: torch.Tensor, ref: torch.Tensor) -> None:
    error = _rel_error(out, ref)
    assert error <= tolerance(spec.dtype, spec.k, spec.out_dtype), f"{spec.short()}: relative error {error:.3g}"


@pytest.mark.parametrize("family", list(FAMILY_SPECS))
def test_capture_and_replay_of_every_familys_kernel(family):
    spec = FAMILY_SPECS[family]
    kernel = _build(family)
    values = _operands(spec)
    operands = {k: v for k, v in values.items() if k not in ("A", "B")}
    out = torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=TYPES[spec.out_dtype])
    kernel(values["A"], values["B"], out=out, **operands)  # load before capture
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(values["A"], values["B"], out=out, **operands)
    torch.cuda.synchronize()
    assert torch.isnan(out).all(), "the launch ran during capture instead of being recorded"
    fresh = _operands(spec, seed=1)  # replay reads whatever the captured buffers hold now
    for name, value in fresh.items():
        if torch.is_tensor(value):
            values[name].copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    _check(spec, out, _reference(spec, fresh))


@pytest.mark.parametrize("family", list(FAMILY_SPECS))
def test_a_side_stream_with_work_queued_before_the_call(family):
    spec = FAMILY_SPECS[family]
    kernel = _build(family)
    values = _operands(spec)
    operands = {k: v for k, v in values.items() if k not in ("A", "B")}
    fresh = _operands(spec, seed=2)
    out = torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=TYPES[spec.out_dtype])
    kernel(values["A"], values["B"], out=out, **operands)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # tens of ms: a kernel on another stream would run first
        values["A"].copy_(fresh["A"])
        out.fill_(float("nan"))
        kernel(values["A"], values["B"], out=out, **operands)
    side.synchronize()
    _check(spec, out, _reference(spec, {**values}))


STATEFUL_SPECS = {"split-tail": GemmSpec(96, 96, 65536, layout="nt", dtype="bf16"), "staged": UNALIGNED}


@pytest.mark.parametrize("kind", list(STATEFUL_SPECS))
def test_a_stateful_kernel_on_two_streams_at_once(kind):
    """A kernel that keeps state between launches (a split tail's partial tiles and flags in module
    memory; a staged operand's workspace), launched alternately on two streams whose queues start
    together: each launch waits for the last one on the other stream (stream_order.py), so both Ds
    are right. Run at once, the two would add each other's partial sums (or read each other's
    staged copy)."""
    spec = STATEFUL_SPECS[kind]
    kernel = gemmtune.build(spec)
    source = kernel.compiled.source
    assert source.module_state if kind == "split-tail" else source.staged, kind
    values = [_operands(spec, seed=seed) for seed in (3, 4)]
    outs = [torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=TYPES[spec.out_dtype]) for _ in values]
    kernel(values[0]["A"], values[0]["B"], out=outs[0], **{k: v for k, v in values[0].items() if k not in ("A", "B")})
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.cuda._sleep(20_000_000)  # both queues held until every launch below is enqueued
    for _ in range(8):
        for stream, value, out in zip(streams, values, outs):
            with torch.cuda.stream(stream):
                kernel(value["A"], value["B"], out=out, **{k: v for k, v in value.items() if k not in ("A", "B")})
    torch.cuda.synchronize()
    for value, out in zip(values, outs):
        _check(spec, out, _reference(spec, value))


def test_explicit_stream_argument_wins():
    spec = FAMILY_SPECS["wgmma"]
    kernel = gemmtune.build(spec)
    values = _operands(spec)
    operands = {k: v for k, v in values.items() if k not in ("A", "B")}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        out = torch.full((spec.m, spec.n), float("nan"), device="cuda", dtype=TYPES[spec.out_dtype])
    kernel(values["A"], values["B"], out=out, stream=side, **operands)  # called from the default stream
    side.synchronize()
    _check(spec, out, _reference(spec, values))


def test_the_custom_operator_passes_opcheck():
    a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.gemmtune.gemm.default, (a, b, c, None, 1.0, 1.0, "nt", "relu+add", "bf16"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_mm_addmm_linear_match_torch(dtype):
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.rand(96, 200, generator=g, device="cuda").sub_(0.5).to(dtype)
    w = torch.rand(136, 200, generator=g, device="cuda").sub_(0.5).to(dtype)
    bias = torch.rand(136, generator=g, device="cuda").sub_(0.5).to(dtype)
    c = torch.rand(96, 136, generator=g, device="cuda").sub_(0.5).to(dtype)
    ref = x.double() @ w.double().t()
    tol = 3 * tolerance("fp32" if dtype == torch.float32 else {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype], 200)
    pairs = [(gt.mm(x, w.t()), ref),
             (gt.mm(x, w.t(), "relu+add", c=c), ref.relu() + c.double()),
             (gt.addmm(bias, x, w.t()), ref + bias.double()),
             (gt.addmm(c, x, w.t(), alpha=0.5, beta=2.0), 0.5 * ref + 2.0 * c.double()),
             (gt.linear(x, w, bias, activation="relu"), (ref + bias.double()).relu())]
    for i, (out, want) in enumerate(pairs):
        assert out.dtype == dtype
        assert _rel_error(out, want.cpu()) <= tol, f"case {i}"


def _mlp(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(gt.Linear(256, 512, activation="gelu", device="cuda", dtype=dtype),
                               gt.Linear(512, 128, device="cuda", dtype=dtype))


def test_torch_compile_fullgraph_mlp_matches_eager():
    mlp = _mlp(torch.bfloat16)
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    eager = mlp(x)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True)
    out = compiled(x)
    assert _rel_error(out, eager.double().cpu()) <= 2 * tolerance("bf16", 512)
    # and both against torch's own layers
    ref = torch.nn.functional.linear(torch.nn.functional.gelu(
        torch.nn.functional.linear(x.double(), mlp[0].weight.double(), mlp[0].bias.double()), approximate="tanh"),
        mlp[1].weight.double(), mlp[1].bias.double())
    assert _rel_error(out, ref.cpu()) <= 4 * tolerance("bf16", 512)


def test_gt_mm_inside_a_cuda_graph():
    a = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    gt.mm(a, b.t())  # build, load and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gt.mm(a, b.t())
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_error(out, (a.double() @ b.double().t()).cpu()) <= tolerance("bf16", 4096)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_autograd_matches_torch(activation):
    torch.manual_seed(1)
    x = torch.randn(48, 96, device="cuda", dtype=torch.float32, requires_grad=True)
    layer = gt.Linear(96, 40, activation=activation, device="cuda", dtype=torch.float32)
    ref_layer = torch.nn.Linear(96, 40, device="cuda", dtype=torch.float64)
    with torch.no_grad():
        ref_layer.weight.copy_(layer.weight)
        ref_layer.bias.copy_(layer.bias)
    x64 = x.detach().double().requires_grad_()
    act = {None: lambda t: t, "relu": torch.relu, "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}
    grad = torch.randn(48, 40, device="cuda")
    layer(x).backward(grad)
    act[activation](ref_layer(x64)).backward(grad.double())
    for got, want in ((x.grad, x64.grad), (layer.weight.grad, ref_layer.weight.grad), (layer.bias.grad, ref_layer.bias.grad)):
        assert _rel_error(got, want.cpu()) <= 1e-5


def test_cupy_arrays_run_on_cupys_current_stream():
    cupy = pytest.importorskip("cupy")
    import numpy as np

    spec = FAMILY_SPECS["simt"]
    kernel = gemmtune.build(spec)
    rng = np.random.default_rng(4)
    a, b, bias = (cupy.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
                  for shape in (spec.a_shape, spec.b_shape, (spec.n,)))
    fresh = rng.uniform(-1, 1, spec.a_shape).astype(np.float32)
    out = cupy.full((spec.m, spec.n), np.nan, dtype=cupy.float32)
    kernel(a, b, bias, out=out)
    cupy.cuda.Device().synchronize()
    spin = cupy.RawKernel(r'''extern "C" __global__ void spin(long long cycles) {
        long long start = clock64(); while (clock64() - start < cycles) { } }''', "spin")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        spin((1,), (1,), (np.int64(50_000_000),))  # tens of ms before the new A lands
        a.set(fresh, stream=stream)  # ordered after the spin on this stream
        kernel(a, b, bias, out=out)
    stream.synchronize()
    ref = fresh.astype(np.float64) @ cupy.asnumpy(b).astype(np.float64) + cupy.asnumpy(bias)[None, :]
    error = float(np.linalg.norm(cupy.asnumpy(out) - ref) / np.linalg.norm(ref))
    assert error <= tolerance(spec.dtype, spec.k), error


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The same kernel's output (a split kernel may add its partial sums in another order)."""
    return bool((got.float() - want.float()).abs().max() <= 1e-2 * want.float().abs().max())


def test_eager_fast_path_matches_the_operator_and_takes_another_gpu():
    """gt.linear / gt.mm / RoutedLinear on calls seen before (operators._calls: one lookup, then the
    launch) give what the gemmtune::gemm operator gives, repeated calls included; with two GPUs, a
    layer on GPU 1 while GPU 0 is current runs there and leaves GPU 0 current."""
    from gemmtune.torch import operators as ops
    from gemmtune.torch.optimize_model import RoutedLinear

    devices = ["cuda:0"] + (["cuda:1"] if torch.cuda.device_count() > 1 else [])
    for device in devices:
        torch.manual_seed(5)
        lin = torch.nn.Linear(256, 384, device=device, dtype=torch.bfloat16)
        x = torch.randn(2, 48, 256, device=device, dtype=torch.bfloat16)
        routed = RoutedLinear(lin, "gelu")
        with torch.no_grad():
            want = ops.gemm(x.reshape(-1, 256), lin.weight, None, lin.bias, 1.0, 1.0, "nt", "bias_col+gelu", "bf16")
            for _ in range(3):
                got = routed(x)
                assert got.shape == (2, 48, 384) and got.device == x.device
                assert _same(got.reshape(-1, 384), want)
            a = x[0]
            assert _same(gt.mm(a, lin.weight.t()), ops.gemm(a, lin.weight, None, None, 1.0, 1.0, "nt", "none", "bf16"))
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize()
