"""gemmtune.torch.GroupedLinear without a GPU: its torch path against a loop of F.linear over the experts (empty
and one-row groups included), the group of each row, its checks, and both paths traced by torch.compile."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gemmtune.errors import SpecError  # noqa: E402
from gemmtune.torch import GroupedLinear  # noqa: E402
from gemmtune.torch.experts import group_of_rows  # noqa: E402

ROWS = (3, 0, 1, 5)  # an empty group and a one-row group
OFFS = torch.tensor([3, 3, 4, 9], dtype=torch.int32)


def _loop(module: GroupedLinear, x: torch.Tensor) -> torch.Tensor:
    """Each group's rows through F.linear with its weight (and bias), then the activation, in float32."""
    out, start, w = [], 0, module.weight.float()
    for g, rows in enumerate(ROWS):
        y = nn.functional.linear(x[start:start + rows].float(), w[g],
                                 None if module.bias is None else module.bias[g].float())
        if module.activation == "swiglu":
            y = nn.functional.silu(y[:, :module.out_features]) * y[:, module.out_features:]
        elif module.activation == "relu":
            y = torch.relu(y)
        elif module.activation == "gelu":
            y = nn.functional.gelu(y, approximate="tanh")
        out.append(y)
        start += rows
    return torch.cat(out)


@pytest.mark.parametrize("bias,activation", [(False, None), (True, None), (True, "relu"), (False, "gelu"),
                                             (False, "swiglu")])
def test_torch_path_matches_a_loop_of_f_linear(bias, activation):
    torch.manual_seed(0)
    module = GroupedLinear(4, 32, 16, bias=bias, activation=activation, dtype=torch.bfloat16)
    x = torch.randn(sum(ROWS), 32, dtype=torch.bfloat16)
    with torch.no_grad():
        got, want = module(x, OFFS).float(), _loop(module, x)
    assert got.shape == (9, 16) and module.weight.shape == (4, 32 if activation == "swiglu" else 16, 32)
    assert float((got - want).norm() / want.norm()) < 1e-2


def test_each_row_finds_its_group_and_rows_past_the_last_end_the_last():
    assert group_of_rows(OFFS, 11).tolist() == [0, 0, 0, 2, 3, 3, 3, 3, 3, 3, 3]
    assert group_of_rows(torch.tensor([0, 2], dtype=torch.int32), 2).tolist() == [1, 1]


def test_swiglu_takes_no_bias_and_activations_are_checked():
    with pytest.raises(SpecError, match="swiglu takes no bias"):
        GroupedLinear(2, 8, 8, bias=True, activation="swiglu")
    with pytest.raises(SpecError, match="unsupported"):
        GroupedLinear(2, 8, 8, activation="silu")


def _traced_ops(module: GroupedLinear, x: torch.Tensor) -> list[str]:
    graphs = []

    def record(gm, example_inputs):  # look at the graph, run nothing
        graphs.append(gm)
        return lambda *args: (torch.zeros(x.shape[0], module.out_features, dtype=x.dtype),)
    torch._dynamo.reset()
    torch.compile(module, fullgraph=True, backend=record)(x, OFFS)
    assert len(graphs) == 1
    return [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("activation", [None, "swiglu"])
def test_both_paths_trace_whole_under_torch_compile(activation):
    module = GroupedLinear(4, 32, 16, activation=activation, dtype=torch.bfloat16).requires_grad_(False)
    x = torch.randn(9, 32, dtype=torch.bfloat16)
    assert any("_grouped_mm" in op for op in _traced_ops(module, x))
    module.use_gemmtune = True
    ops = _traced_ops(module, x)
    assert any("gemmtune.grouped_linear" in op for op in ops) and not any("aten._grouped_mm" in op for op in ops)
    module.torch_under_compile = True  # routed for host time alone: torch's ops while compiling
    ops = _traced_ops(module, x)
    assert not any("gemmtune" in op for op in ops) and any("_grouped_mm" in op for op in ops)
    assert "gemmtune, torch under torch.compile" in repr(module)
