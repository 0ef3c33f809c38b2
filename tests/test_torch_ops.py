"""gemmtune.torch without a GPU: the custom operator's fake implementation gives shapes and types on
meta tensors, checks its operands with one-line errors, traces under torch.compile(fullgraph=True)
and differentiates; and launches pick the caller's stream (gemmtune.invoke)."""
from __future__ import annotations

import pytest

from gemmtune.errors import SpecError
from gemmtune.invoke import launch_stream, stream_handle

torch = pytest.importorskip("torch")
gt = pytest.importorskip("gemmtune.torch.operators")

BF16 = torch.bfloat16


def meta(*shape, dtype=BF16, grad=False):
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (False, True), (True, False), (True, True)])
def test_mm_reads_transposed_views_in_place_and_gives_the_shape(transpose_a, transpose_b):
    a = meta(48, 64).t() if transpose_a else meta(64, 48)
    b = meta(80, 48).t() if transpose_b else meta(48, 80)
    assert gt._as_stored(a)[1] == ("t" if transpose_a else "n")
    assert gt._as_stored(b)[1] == ("t" if transpose_b else "n")
    out = gt.mm(a, b)
    assert out.shape == (64, 80) and out.dtype == BF16


def test_fp32_inputs_give_fp32_out_and_follow_torchs_tf32_switch():
    a, b = meta(8, 16, dtype=torch.float32), meta(16, 4, dtype=torch.float32)
    assert gt.mm(a, b).dtype == torch.float32
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        assert gt._dtype_of(a) == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = False
        assert gt._dtype_of(a) == "fp32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("call, message", [
    (lambda: gt.mm(meta(4, 8), meta(9, 4)), "inner dimensions differ"),
    (lambda: gt.mm(meta(4, 8), meta(8, 4, dtype=torch.float16)), "cast one of them"),
    (lambda: gt.mm(meta(4, 8), meta(8, 4), "relu+add"), "needs C"),
    (lambda: gt.mm(meta(4, 8), meta(8, 4), "relu+add", c=meta(4, 5)), "must be"),
    (lambda: gt.mm(meta(4, 8), meta(8, 4), bias=meta(4)), "takes no bias"),
    (lambda: gt.mm(meta(4, 8), meta(8, 4), "tanh"), "unknown epilogue op"),
    (lambda: gt.mm(meta(2, 4, 8), meta(8, 4)), "2-D"),
    (lambda: gt.mm(meta(4, 8, dtype=torch.float64), meta(8, 4, dtype=torch.float64)), "float64"),
    (lambda: gt.linear(meta(4, 8), meta(3, 8), activation="tanh"), "activation"),
])
def test_bad_operands_are_one_line_spec_errors(call, message):
    with pytest.raises(SpecError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_addmm_maps_torch_semantics_onto_epilogues():
    a, b = meta(16, 32), meta(32, 8)
    assert gt.addmm(meta(8), a, b).shape == (16, 8)  # bias per column
    assert gt.addmm(meta(1, 8), a, b, beta=0.5).shape == (16, 8)
    assert gt.addmm(meta(16, 1), a, b, alpha=2.0).shape == (16, 8)  # bias per row
    assert gt.addmm(meta(16, 8), a, b, alpha=0.5, beta=2.0).shape == (16, 8)  # alpha·AB + beta·C


def test_linear_keeps_leading_dimensions_and_differentiates():
    layer = gt.Linear(32, 16, activation="gelu", device="meta", dtype=BF16)
    x = meta(4, 8, 32, grad=True)
    y = layer(x)
    assert y.shape == (4, 8, 16) and y.dtype == BF16
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert layer.weight.grad.shape == (16, 32) and layer.bias.grad.shape == (16,)


@pytest.mark.parametrize("epilogue", ["relu+add", "alpha+beta", "bias_row+relu", "add+gelu"])
def test_every_epilogue_operand_gets_a_gradient(epilogue):
    a, b = meta(16, 32, grad=True), meta(32, 8, grad=True)
    c = meta(16, 8, grad=True)
    bias = meta(16, grad=True)
    kwargs = {"c": c if "add" in epilogue or "beta" in epilogue else None,
              "bias": bias if "bias" in epilogue else None, "alpha": 0.5, "beta": 2.0}
    gt.mm(a, b, epilogue, **kwargs).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    for name in ("c", "bias"):
        if kwargs[name] is not None:
            assert kwargs[name].grad.shape == kwargs[name].shape


def test_gelu_gradient_formula_matches_autograd():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.gelu(x, approximate="tanh").sum().backward()
    assert torch.allclose(gt._activation_grad("gelu", x.detach()), x.grad, atol=1e-12)


def test_torch_compile_fullgraph_traces_a_two_layer_mlp():
    mlp = torch.nn.Sequential(gt.Linear(32, 64, activation="relu", device="meta", dtype=BF16),
                              gt.Linear(64, 16, device="meta", dtype=BF16))
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True, backend="eager")  # a graph break would raise here
    assert compiled(meta(8, 32)).shape == (8, 16)


def test_the_operator_is_registered_with_a_schema():
    schema = str(torch.ops.gemmtune.gemm.default._schema)
    assert schema.startswith("gemmtune::gemm(Tensor a, Tensor b, Tensor? c, Tensor? bias, float alpha")


class _TorchLikeStream:
    cuda_stream = 0x1234


class _CupyLikeStream:
    ptr = 0x5678


def test_launches_take_the_callers_stream():
    assert stream_handle(_TorchLikeStream()) == 0x1234
    assert stream_handle(_CupyLikeStream()) == 0x5678
    assert stream_handle(7) == 7
    assert launch_stream(object(), _TorchLikeStream()) == 0x1234  # explicit beats current
    assert launch_stream(object()) == 0  # a DeviceBuffer or foreign array: the default stream
    with pytest.raises(SpecError, match="stream="):
        stream_handle("fast")
