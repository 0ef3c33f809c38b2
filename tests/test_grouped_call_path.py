"""GroupedLinear's gemmtune call path without a GPU (grouped_calls.py): the first call of a shape checks, makes the
spec, looks the config up and builds; a later call of that shape does none of it (counted), only binds where its
pointers are new and launches; the planned config reaches the kernel; the operator traces whole under
torch.compile with the config as a constant. gemmtune.torch.grouped_mm, grouped_mm_masked and bmm run the same
plans (their own per call shape), a b that is not a view of stored weights goes to the operator, and a new tuning
database drops the plans. CUDA is faked: CPU tensors, the eager test, stream and context. On an sm_90a GPU (marker
gpu): grouped_mm through the plans (the operators refuse) against a float loop and torch._grouped_mm with empty
and one-row groups, new pointers, a CUDA graph replayed with new offs, bmm and the masked layout."""
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

    def masked(*args, **kwargs):
        counts["spec"] += 1
        return GroupedSpec.masked(*args, **kwargs)
    spec.masked = masked

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


# --- gemmtune.torch.grouped_mm, grouped_mm_masked and bmm: the same plans ------------------------------------
def test_grouped_mm_builds_a_plan_once_and_writes_new_pointers_each_call(fake_cuda):
    import gemmtune.torch as gt

    a, weight, offs, _ = _operands(n=96)
    b = weight.transpose(1, 2)  # torch._grouped_mm's b: the view of weights stored (G, N, K)
    first = gt.grouped_mm(a, b, offs)
    assert first.shape == (16, 96) and first.dtype == BF16
    (plan,) = gc._plans.values()
    assert plan.spec == GroupedSpec(4, 16, 96, 64) and fake_cuda["spec"] == 1 and len(fake_cuda["build"]) == 1
    bindings = plan.loaded.binds[0][0]
    assert (bindings["A"], bindings["B"], bindings["offs"]) == (a.data_ptr(), weight.data_ptr(), offs.data_ptr())
    others = [torch.randn_like(a) for _ in range(3)]  # new pointers: each bound and launched, nothing else redone
    outs = [gt.grouped_mm(other, b, offs) for other in others]
    assert fake_cuda["spec"] == 1 and fake_cuda["config"] == 1 and len(fake_cuda["build"]) == 1 and len(gc._plans) == 1
    assert plan.loaded.launched == 4
    assert [binds["A"] for binds, _ in plan.loaded.binds[-3:]] == [o.data_ptr() for o in others]
    assert [binds["D"] for binds, _ in plan.loaded.binds[-3:]] == [o.data_ptr() for o in outs]
    binds = len(plan.loaded.binds)
    gt.grouped_mm(torch.randn(48, 64, dtype=BF16), b, offs)  # another total_m: a new plan
    assert fake_cuda["spec"] == 2 and len(gc._plans) == 2 and len(plan.loaded.binds) == binds
    assert list(gc._plans.values())[1].spec == GroupedSpec(4, 48, 96, 64)


def test_grouped_mm_and_grouped_linear_keep_their_own_plans_of_one_kernel(fake_cuda):
    import gemmtune.torch as gt

    x, weight, offs, bias = _operands(bias=True)
    gt.grouped_mm(x, weight.transpose(1, 2), offs, bias, "gelu")
    gc.grouped_linear(x, weight, offs, bias, "gelu")
    mm_plan, linear_plan = gc._plans.values()
    assert mm_plan.spec == linear_plan.spec and mm_plan.b_strides == (64 * 64, 1, 64) != linear_plan.b_strides
    assert set(mm_plan.loaded.binds[0][0]) == {"A", "B", "offs", "D", "bias"}


def test_a_b_that_is_not_a_view_of_stored_weights_goes_to_the_operator(fake_cuda):
    x, weight, offs, _ = _operands()
    copied = weight.transpose(1, 2).contiguous()  # (G, K, N) row-major: the kernel needs (G, N, K) rows
    assert gc._fast(gc.MM, x, copied, offs, None, None) is None
    assert gc._fast(gc.MM, x, weight.transpose(1, 2), offs, None, None) is not None
    assert len(gc._plans) == 1  # planned once, by the first call


def test_grouped_mm_masked_plans_the_masked_spec_and_binds_counts_as_offs(fake_cuda):
    import gemmtune.torch as gt

    a3, weight = torch.randn(4, 8, 64, dtype=BF16), torch.randn(4, 128, 64, dtype=BF16)
    counts = torch.tensor([8, 0, 1, 5], dtype=torch.int32)
    for _ in range(2):
        out = gt.grouped_mm_masked(a3, weight.transpose(1, 2), counts, None, "swiglu")
    assert out.shape == (4, 8, 64)
    (plan,) = gc._plans.values()
    assert plan.spec == GroupedSpec.masked(4, 8, 64, 64, swiglu=True) and fake_cuda["spec"] == 1
    assert plan.loaded.binds[0][0]["offs"] == counts.data_ptr() and plan.loaded.launched == 2


def test_bmm_runs_equal_groups_through_one_plan(fake_cuda):
    import gemmtune.torch as gt

    x, w = torch.randn(3, 16, 64, dtype=BF16), torch.randn(3, 32, 64, dtype=BF16)
    assert gt.bmm(x, w.transpose(1, 2)).shape == (3, 16, 32)
    gt.bmm(x, w.transpose(1, 2))
    (plan,) = gc._plans.values()
    assert plan.spec == GroupedSpec(3, 48, 32, 64) and plan.loaded.launched == 2
    (offs,) = [o for key, o in gc._bmm_offsets.items() if key[:2] == (3, 16)]
    assert offs.tolist() == [16, 32, 48] and plan.loaded.binds[0][0]["offs"] == offs.data_ptr()


def test_a_new_tuning_database_drops_the_plans(fake_cuda):
    from gemmtune.grouped import tuned

    x, weight, offs, _ = _operands()
    gc.grouped_linear(x, weight, offs)
    assert len(gc._plans) == 1
    tuned.forget()
    assert not gc._plans
    gc.grouped_linear(x, weight, offs)
    assert fake_cuda["config"] == 2  # looked up again


def test_grouped_mm_misfits_name_its_operands_in_one_line():
    import gemmtune.torch as gt

    a, weight, offs, bias = _operands(bias=True)
    b = weight.transpose(1, 2)
    for call, message in ((lambda: gt.grouped_mm(a, b[:, :32], offs), "grouped_mm: a \\(16, 64\\), b \\(4, 32, 64\\)"),
                          (lambda: gt.grouped_mm(a, b, offs, bias, "swiglu"), "grouped_mm: swiglu takes no bias"),
                          (lambda: gt.grouped_mm_masked(a, b, offs), "expected a \\(G, capacity, K\\)"),
                          (lambda: gt.grouped_mm(a, b, offs), "gemmtune::grouped_mm runs on CUDA tensors")):
        with pytest.raises(SpecError, match=message) as info:
            call()
        assert "\n" not in str(info.value)


def test_grouped_mm_traces_as_one_operator():
    import gemmtune.torch as gt

    a, weight, offs, _ = _operands()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(16, 32, dtype=BF16),)
    torch._dynamo.reset()
    torch.compile(lambda a, b, offs: gt.grouped_mm(a, b, offs, None, "swiglu"), fullgraph=True, backend=record)(
        a, weight.transpose(1, 2), offs)
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("gemmtune.grouped_mm" in t for t in targets) and len(targets) == 1


# --- on an sm_90a GPU: gemmtune.torch.grouped_mm through the plans, against torch ------------------------------
SIZES = (100, 0, 1, 257, 0, 64, 1, 90)  # empty and one-row groups; 7 rows past offs[-1] stay unwritten


def _gpu_case(n: int = 384, k: int = 256, rows_after: int = 7):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("grouped kernels need sm_90a")
    gen = torch.Generator(device="cuda").manual_seed(0)
    total = sum(SIZES) + rows_after
    x = torch.randn(total, k, device="cuda", dtype=BF16, generator=gen) / 8
    weight = torch.randn(len(SIZES), n, k, device="cuda", dtype=BF16, generator=gen) / 8
    bias = torch.randn(len(SIZES), n, device="cuda", dtype=BF16, generator=gen)
    return x, weight, bias, _device_offs(SIZES)


def _device_offs(sizes) -> "torch.Tensor":
    return torch.tensor([sum(sizes[:g + 1]) for g in range(len(sizes))], device="cuda", dtype=torch.int32)


def _expected(x, weight, offs, bias=None, activation=None):
    """A loop of float32 products over the groups (rows past offs[-1]: NaN)."""
    ends = offs.tolist()
    columns = weight.shape[1] // (2 if activation == "swiglu" else 1)
    out = torch.full((x.shape[0], columns), float("nan"), device="cuda")
    for g, (begin, end) in enumerate(zip([0, *ends[:-1]], ends)):
        y = x[begin:end].float() @ weight[g].float().T + (0 if bias is None else bias[g].float())
        if activation == "swiglu":
            y = torch.nn.functional.silu(y[:, :columns]) * y[:, columns:]
        elif activation == "relu":
            y = torch.relu(y)
        elif activation == "gelu":
            y = torch.nn.functional.gelu(y, approximate="tanh")
        out[begin:end] = y
    return out


def _no_operator(monkeypatch):
    """The eager calls must take the plans' fast path: the operators fail if reached."""
    def refuse(*args):
        raise AssertionError("the call went through the operator")
    for name in ("grouped_mm_op", "grouped_mm_masked_op"):
        monkeypatch.setattr(gc, name, refuse)


@pytest.mark.gpu
@pytest.mark.parametrize("with_bias,activation", [(False, None), (True, "relu"), (True, "gelu"), (False, "swiglu")])
def test_gpu_grouped_mm_matches_torch_through_the_plans(monkeypatch, with_bias, activation):
    import gemmtune.torch as gt

    x, weight, bias, offs = _gpu_case()
    bias = bias if with_bias else None
    if activation == "swiglu":
        weight = torch.cat([weight, weight.flip(1)], dim=1)
    _no_operator(monkeypatch)
    rows, want = sum(SIZES), _expected(x, weight, offs, bias, activation)
    for _ in range(2):  # the first call plans, the second only launches
        got = gt.grouped_mm(x, weight.transpose(1, 2), offs, bias, activation)
        torch.testing.assert_close(got[:rows].float(), want[:rows], rtol=2e-2, atol=2e-2)
    if activation is None and hasattr(torch, "_grouped_mm"):
        torch.testing.assert_close(got[:rows], torch._grouped_mm(x, weight.transpose(1, 2), offs=offs)[:rows],
                                   rtol=2e-2, atol=2e-2)
    other = torch.randn_like(x) / 8  # new pointers: the same plan, bound again
    torch.testing.assert_close(gt.grouped_mm(other, weight.transpose(1, 2), offs, bias, activation)[:rows].float(),
                               _expected(other, weight, offs, bias, activation)[:rows], rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_graph_of_grouped_mm_replays_with_new_offs(monkeypatch):
    import gemmtune.torch as gt

    x, weight, _, offs = _gpu_case()
    _no_operator(monkeypatch)
    gt.grouped_mm(x, weight.transpose(1, 2), offs)  # planned and bound before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gt.grouped_mm(x, weight.transpose(1, 2), offs)
    for sizes in (SIZES, (0,) * 7 + (sum(SIZES),), (1,) * 8, (0, 1, 0, 1, 0, 1, 0, 500)):
        offs.copy_(_device_offs(sizes))  # on the device: the replay reads them there
        out.fill_(float("nan"))
        graph.replay()
        rows = sum(sizes)
        torch.testing.assert_close(out[:rows].float(), _expected(x, weight, offs)[:rows], rtol=2e-2, atol=2e-2)
        assert out[rows:].isnan().all(), "rows past offs[-1] were written"


@pytest.mark.gpu
def test_gpu_bmm_and_masked_match_torch_through_the_plans(monkeypatch):
    import gemmtune.torch as gt

    x, weight, _, _ = _gpu_case()
    _no_operator(monkeypatch)
    a = x[:6 * 64].view(6, 64, -1)
    torch.testing.assert_close(gt.bmm(a, weight[:6].transpose(1, 2)), torch.bmm(a, weight[:6].transpose(1, 2)),
                               rtol=2e-2, atol=2e-2)
    counts = torch.tensor([64, 0, 1, 17, 64, 3], device="cuda", dtype=torch.int32)
    got = gt.grouped_mm_masked(a, weight[:6].transpose(1, 2), counts)
    for g, c in enumerate(counts.tolist()):
        torch.testing.assert_close(got[g, :c], a[g, :c] @ weight[g].T, rtol=2e-2, atol=2e-2)
