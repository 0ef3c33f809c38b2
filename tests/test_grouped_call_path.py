"""GroupedLinear's gemmtune call path without a GPU (grouped_calls.py): the first call of a shape checks, makes the
spec, looks the config up and builds; a later call of that shape does none of it (counted), only binds where its
pointers are new and launches; the planned config reaches the kernel; the operator traces whole under
torch.compile with the config as a constant. CUDA is faked: CPU tensors, the eager test, stream and context."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from gemmtune.errors import SpecError  # noqa: E402
from gemmtune.grouped.config import default_config  # noqa: E402
from gemmtune.grouped.spec import GroupedSpec  # noqa: E402
from gemmtune.torch import GroupedLinear  # noqa: E402
from gemmtune.torch import grouped_calls as gc  # noqa: E402
from test_call_path import FakeLoaded  # noqa: E402 - records binds and launches

BF16 = torch.bfloat16


class FakeKernel:
    def __init__(self, config):
        self.config, self.loaded = config, FakeLoaded()


@pytest.fixture
def fake_cuda(monkeypatch):
    """CPU tensors taken as CUDA ones by the fast path; counts what a call does once per shape."""
    counts = {"spec": 0, "config": 0, "build": []}

    def spec(*args, **kwargs):
        counts["spec"] += 1
        return GroupedSpec(*args, **kwargs)

    def chosen(spec, index):
        counts["config"] += 1
        return default_config(spec)

    def build(spec, config, index):
        counts["build"].append((spec, config, index))
        return FakeKernel(config)

    monkeypatch.setattr(gc, "_eager_ok", lambda *tensors: True)
    monkeypatch.setattr(gc, "GroupedSpec", spec)
    monkeypatch.setattr(gc, "chosen_config", chosen)
    monkeypatch.setattr(gc, "build", build)
    monkeypatch.setattr(gc, "_current_device", lambda: -1)  # a CPU tensor's get_device()
    monkeypatch.setattr(gc, "_on_device", lambda index: None)
    monkeypatch.setattr(gc, "_raw_stream", lambda index: 7)
    monkeypatch.setattr(gc, "_plans", {})
    return counts


def _operands(rows: int = 16, groups: int = 4, k: int = 64, n: int = 64, bias: bool = False):
    x = torch.randn(rows, k, dtype=BF16)
    weight = torch.randn(groups, n, k, dtype=BF16)
    offs = torch.tensor([rows // groups * (g + 1) for g in range(groups)], dtype=torch.int32)
    return x, weight, offs, (torch.randn(groups, n, dtype=BF16) if bias else None)


def test_a_second_call_of_a_shape_makes_no_spec_looks_no_config_up_and_binds_nothing(fake_cuda):
    x, weight, offs, _ = _operands(n=128)
    first = gc.grouped_linear(x, weight, offs, None, "swiglu")
    assert first.shape == (16, 64) and first.dtype == BF16
    assert fake_cuda["spec"] == 1 and fake_cuda["config"] == 1 and len(fake_cuda["build"]) == 1
    outputs = {first.data_ptr()}
    del first
    for _ in range(3):
        out = gc.grouped_linear(x, weight, offs, None, "swiglu")
        assert out.shape == (16, 64)
        outputs.add(out.data_ptr())
        del out  # (torch's CUDA allocator hands D's block back next call; malloc here may not)
    assert fake_cuda["spec"] == 1 and fake_cuda["config"] == 1 and len(fake_cuda["build"]) == 1
    (plan,) = gc._plans.values()
    assert plan.loaded.launched == 4 and len(plan.loaded.binds) == len(outputs)  # bound once per D address
    bindings, stream = plan.loaded.binds[0]
    assert stream == 7 and set(bindings) == {"A", "B", "offs", "D"}  # no bias bound
    assert bindings["A"] == x.data_ptr() and bindings["B"] == weight.data_ptr() and bindings["offs"] == offs.data_ptr()
    other = torch.randn_like(x)  # the same shape at another address: bound once more, nothing else
    gc.grouped_linear(other, weight, offs, None, "swiglu")
    assert fake_cuda["spec"] == 1 and fake_cuda["config"] == 1 and len(plan.loaded.binds) == len(outputs) + 1
    assert plan.loaded.binds[-1][0]["A"] == other.data_ptr()
    gc.grouped_linear(torch.randn(32, 64, dtype=BF16), weight, offs, None, "swiglu")  # another total_m: a new plan
    assert fake_cuda["spec"] == 2 and fake_cuda["config"] == 2 and len(gc._plans) == 2


def test_the_plan_is_per_activation_bias_and_config(fake_cuda):
    x, weight, offs, bias = _operands(bias=True)
    gc.grouped_linear(x, weight, offs, bias, "relu")
    gc.grouped_linear(x, weight, offs, None, "relu")
    gc.grouped_linear(x, weight, offs, None, None)
    planned = default_config(GroupedSpec(4, 16, 64, 64)).with_(stages=2)
    text = json.dumps(planned.to_json(), sort_keys=True)
    gc.grouped_linear(x, weight, offs, None, None, text)
    gc.grouped_linear(x, weight, offs, None, None, text)
    assert len(gc._plans) == 4 and fake_cuda["config"] == 3  # the planned config is not looked up
    assert fake_cuda["build"][-1][1] == planned
    (with_bias, *_) = gc._plans.values()
    assert set(with_bias.loaded.binds[0][0]) == {"A", "B", "offs", "D", "bias"}
    assert with_bias.spec.has_bias and "relu" in with_bias.spec.epilogue.ops


def test_a_planned_config_that_does_not_fit_the_shape_gives_way_to_its_own(fake_cuda):
    x, weight, offs, _ = _operands()
    gc.grouped_linear(x, weight, offs, None, None, json.dumps({**default_config(GroupedSpec(4, 16, 64, 64)).to_json(),
                                                                 "bm": 96}))
    assert fake_cuda["config"] == 1 and fake_cuda["build"][-1][1] == default_config(GroupedSpec(4, 16, 64, 64))
    with pytest.raises(SpecError, match="not a GroupedConfig"):
        gc.grouped_linear(x, weight, offs, None, None, '{"tile": 1}')


def test_misfits_raise_one_line_errors_and_cpu_tensors_are_refused_by_the_operator():
    x, weight, offs, bias = _operands(bias=True)
    for call, message in ((lambda: gc.grouped_linear(x, weight, offs, bias, "swiglu"), "swiglu takes no bias"),
                          (lambda: gc.grouped_linear(x, weight[:, :, :32], offs), "expected x"),
                          (lambda: gc.grouped_linear(x, weight, offs.long()), "int32"),
                          (lambda: gc.grouped_linear(x, weight, offs, bias.float()), "expected \\(G, N\\)"),
                          (lambda: gc.grouped_linear(x, weight, offs), "runs on CUDA tensors")):
        with pytest.raises(SpecError, match=message) as info:
            call()
        assert "\n" not in str(info.value)


def test_the_operator_has_a_fake_for_shapes():
    meta = lambda *shape, dtype=BF16: torch.empty(*shape, device="meta", dtype=dtype)  # noqa: E731
    out = gc.grouped_linear_op(meta(9, 64), meta(4, 128, 64), meta(4, dtype=torch.int32), None, "swiglu", "")
    assert out.shape == (9, 64) and out.device.type == "meta"


def test_a_routed_module_runs_its_planned_config(fake_cuda):
    module = GroupedLinear(4, 64, 32, activation="swiglu", dtype=BF16).requires_grad_(False)
    planned = default_config(GroupedSpec(4, 16, 32, 64, swiglu=True)).with_(stages=3)
    module.use_gemmtune, module.gemmtune_config = True, json.dumps(planned.to_json(), sort_keys=True)
    x, _, offs, _ = _operands()
    assert module(x, offs).shape == (16, 32)
    assert fake_cuda["config"] == 0 and fake_cuda["build"][0][1] == planned
    (plan,) = gc._plans.values()
    assert plan.loaded.binds[0][0]["B"] == module.weight.data_ptr()  # the stored weight: no view, no copy


def test_a_routed_module_traces_as_one_operator_with_its_config():
    module = GroupedLinear(4, 32, 16, activation="swiglu", dtype=BF16).requires_grad_(False)
    module.use_gemmtune, module.gemmtune_config = True, '{"bm": 64}'
    x, offs = torch.randn(9, 32, dtype=BF16), torch.tensor([3, 3, 4, 9], dtype=torch.int32)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(9, 16, dtype=BF16),)
    torch._dynamo.reset()
    torch.compile(module, fullgraph=True, backend=record)(x, offs)
    (node,) = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "grouped_linear" in str(n.target)]
    assert node.args[4:] == ("swiglu", '{"bm": 64}')
