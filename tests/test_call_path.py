"""The torch call path's launch plans without a GPU (issue 68): a plan binds a launch once per pointer
set and stream and reuses it, keeps at most BOUND_PER_PLAN of them (oldest out first), binds only the
arguments the kernel takes, and eager calls take the direct path only where the dispatcher is not needed."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ops = pytest.importorskip("gemmtune.torch.operators")


class FakeSource:
    args = ("A", "B", "D", "bias")
    tensor_maps = ()


class FakeLoaded:
    source = FakeSource()

    def __init__(self):
        self.binds, self.launched = [], 0

    def bind(self, bindings, stream):
        self.binds.append((dict(bindings), stream))
        return self._launch

    def _launch(self):
        self.launched += 1


def _plan() -> "ops._Plan":
    plan = ops._Plan.__new__(ops._Plan)
    plan.loaded, plan.launches = FakeLoaded(), ops.BoundLaunches(ops.BOUND_PER_PLAN)
    return plan


def test_a_pointer_set_is_bound_once_and_launched_every_call():
    plan = _plan()
    key = (0x1000, 0x2000, 0x3000, 0, 0x4000, 1.0, 1.0, 7)
    for _ in range(5):
        plan.launch(key, 7)
    assert len(plan.loaded.binds) == 1 and plan.loaded.launched == 5
    bindings, stream = plan.loaded.binds[0]
    assert bindings == {"A": 0x1000, "B": 0x2000, "D": 0x3000, "bias": 0x4000} and stream == 7  # no C, no scalars


def test_new_pointers_or_streams_bind_again_and_the_oldest_leaves_first():
    plan = _plan()
    keys = [(0x1000, 0x2000, 0x3000 + 256 * i, 0, 0, 1.0, 1.0, i % 2) for i in range(ops.BOUND_PER_PLAN + 1)]
    for key in keys:
        plan.launch(key, key[-1])
    assert len(plan.loaded.binds) == len(keys) and len(plan.launches) == ops.BOUND_PER_PLAN
    assert keys[0] not in plan.launches and keys[-1] in plan.launches


def test_the_direct_path_skips_the_dispatcher_only_for_plain_eager_cuda_calls():
    meta = torch.empty(4, 4, device="meta")
    assert not ops._direct(meta, meta)  # not CUDA: the fake implementation answers
    param = torch.nn.Parameter(torch.empty(4, 4, device="meta"))
    assert type(param) in ops._PLAIN and torch.Tensor in ops._PLAIN


# --- the plan's checks and keys ---------------------------------------------------------------------
BF16 = torch.bfloat16


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, device="meta", dtype=dtype)


class FakeKernel:
    def loaded(self, index):
        return FakeLoaded()


@pytest.fixture
def fake_kernels(monkeypatch):
    """kernel_for without NVRTC: every spec gets a FakeKernel; returns the specs asked for."""
    asked = []
    monkeypatch.setattr(ops, "kernel_for", lambda spec, index: asked.append((spec, index)) or FakeKernel())
    monkeypatch.setattr(ops, "_plans", {})
    return asked


def test_plans_are_kept_per_shape_layout_epilogue_dtype_and_gpu(fake_kernels):
    a, b = meta(8, 32), meta(16, 32)
    first = ops._checked_plan(a, b, None, None, "nt", "none", "bf16", 0)
    assert ops._checked_plan(a, b, None, None, "nt", "none", "bf16", 0) is first and len(fake_kernels) == 1
    others = [ops._checked_plan(a, b, None, None, "nt", "none", "bf16", 1),
              ops._checked_plan(a, b, None, None, "nt", "relu", "bf16", 0),
              ops._checked_plan(a, meta(32, 16), None, None, "nn", "none", "bf16", 0),
              ops._checked_plan(meta(9, 32), b, None, None, "nt", "none", "bf16", 0)]
    assert len({id(p) for p in [first, *others]}) == 5
    assert [(s.short(), i) for s, i in fake_kernels][1] == (first.spec.short(), 1)


def test_installing_a_kernel_drops_the_plans(fake_kernels, monkeypatch):
    monkeypatch.setattr(ops, "_kernels", {})
    ops._checked_plan(meta(8, 32), meta(16, 32), None, None, "nt", "none", "bf16", 0)
    ops.install_kernel(ops._spec(meta(8, 32), meta(16, 32), "nt", "none", "bf16"), 0, FakeKernel())
    assert ops._plans == {}


@pytest.mark.parametrize("c, bias, a_type, message", [
    (None, None, torch.float16, "cast one of them"),
    (None, None, None, "needs C"),
    (meta(8, 15), None, None, "must be"),
    (meta(8, 16, dtype=torch.float32), None, None, "must be"),
    (meta(8, 16), meta(16), None, "takes no bias"),
])
def test_a_misfit_on_a_known_plan_is_the_same_one_line_error(fake_kernels, c, bias, a_type, message):
    a, b = meta(8, 32), meta(16, 32)
    good = ops._checked_plan(a, b, meta(8, 16), None, "nt", "relu+add", "bf16", 0)
    assert good.fits(a, b, meta(8, 16), None)
    a = meta(8, 32, dtype=a_type) if a_type else a
    assert not good.fits(a, b, c, bias)
    with pytest.raises(ops.SpecError, match=message) as info:
        ops._checked_plan(a, b, c, bias, "nt", "relu+add", "bf16", 0)
    assert "\n" not in str(info.value)
    with pytest.raises(ops.SpecError, match=message):  # the fake implementation says the same
        ops._gemm_fake(a, b, c, bias, 1.0, 1.0, "nt", "relu+add", "bf16")


def test_the_context_is_made_current_once_per_thread_and_gpu(monkeypatch):
    import threading

    made = []
    monkeypatch.setattr(ops, "ensure_context", made.append)
    monkeypatch.setattr(ops, "_context_ready", threading.local())
    for index in (0, 0, 1, 0, 1):
        ops._on_device(index)
    assert made == [0, 1]
    worker = threading.Thread(target=ops._on_device, args=(0,))  # an autograd thread: its own current context
    worker.start()
    worker.join()
    assert made == [0, 1, 0]


def test_the_operator_is_a_library_definition_with_fake_and_autograd():
    a = torch.empty(8, 32, device="meta", dtype=BF16, requires_grad=True)
    b = torch.empty(16, 32, device="meta", dtype=BF16, requires_grad=True)
    out = ops.gemm(a, b, None, None, 1.0, 1.0, "nt", "none", "bf16")
    assert out.shape == (8, 16) and out.requires_grad
    with pytest.raises(ops.SpecError, match="runs on CUDA tensors"):  # CPU tensors: gemmtune's error
        ops.gemm(torch.zeros(8, 32, dtype=BF16), torch.zeros(16, 32, dtype=BF16), None, None, 1.0, 1.0, "nt",
                 "none", "bf16")


def test_linear_reads_a_row_major_weight_as_stored_b_like_as_stored():
    for weight in (meta(16, 32), meta(1, 32), meta(16, 1)):
        fast = (weight, "t") if weight.is_contiguous() and min(weight.shape) > 1 else ops._as_stored(weight.t())
        assert fast[1] == ops._as_stored(weight.t())[1]
    assert ops.linear(meta(2, 3, 32), meta(16, 32), meta(16)).shape == (2, 3, 16)


# --- gemmtune.build kernels called from Python ------------------------------------------------------
def _kernel(epilogue: str = "alpha+beta"):
    """A build.Kernel of the wgmma family's default config, rendered (not compiled) for sm_90a."""
    from types import SimpleNamespace

    from gemmtune import GemmSpec
    from gemmtune.build import Kernel
    from gemmtune.kernels import family_for

    spec = GemmSpec(64, 64, 64, layout="nt", dtype="bf16", epilogue=epilogue)
    family = family_for(spec, "sm_90a")
    source = family.render(spec, family.default_config(spec, "sm_90a"), "sm_90a")
    kernel = Kernel(SimpleNamespace(source=source), None, "given")
    kernel._loaded[0] = FakeLoaded()
    return kernel


def test_torch_operands_bind_in_binds_order_and_leave_other_arrays_to_bind():
    from gemmtune.invoke import TorchOperands, _bound_names

    source = _kernel().compiled.source
    plan = TorchOperands.of(source)
    assert plan.names == _bound_names(source, {"A", "B", "C", "D", "alpha", "beta"})
    assert [n for n, t in zip(plan.names, plan.dtypes) if t is None] == ["alpha", "beta"]
    cpu = {n: torch.zeros(64, 64, dtype=BF16) for n in ("A", "B", "C", "D")}
    assert plan.bindings({**cpu, "alpha": 1.0, "beta": 2.0}) is None  # not CUDA: bind() checks and says why


def test_a_build_kernel_binds_once_per_pointers_and_stream(monkeypatch):
    import sys

    from gemmtune.runtime import DeviceBuffer

    build_module = sys.modules["gemmtune.build"]  # gemmtune.build, the attribute, is the function

    launched = []
    monkeypatch.setattr(build_module, "launch_on", lambda bound, ordinal: launched.append(ordinal) or bound())
    kernel = _kernel("none")
    a, b, d, other = (DeviceBuffer(0x10000 * (i + 1), 64 * 64 * 2) for i in range(4))
    for stream in (5, 5, 6):
        kernel(a, b, out=d, stream=stream)
    kernel(a, b, out=other, stream=5)
    loaded = kernel._loaded[0]
    assert [(s, binding["D"]) for binding, s in loaded.binds] == [(5, d.ptr), (6, d.ptr), (5, other.ptr)]
    assert loaded.launched == 4 and launched == [0] * 4
    with pytest.raises(ops.SpecError, match="buffer holds"):  # a misfit still gets bind()'s one-line error
        kernel(a, DeviceBuffer(0x90000, 16), out=d, stream=5)


def test_plan_stats_count_the_binds_calls_made():
    before = ops.plan_stats()["binds"]
    plan = _plan()
    for stream in (1, 1, 2):
        plan.launch((0x1000, 0x2000, 0x3000, 0, 0, 1.0, 1.0, stream), stream)
    assert ops.plan_stats()["binds"] - before == 2  # one per stream: the repeat was a hit


# --- eager calls seen before (ops._calls): CPU tensors dressed as CUDA, the launch faked ---------------
class RecordingLoaded(FakeLoaded):
    """Binds record their pointers; launches count."""


class RecordingKernel:
    def __init__(self):
        self.loaded_ = RecordingLoaded()

    def loaded(self, index):
        return self.loaded_


@pytest.fixture
def dressed(monkeypatch):
    """CPU tensors that say they are CUDA (torch.Tensor.is_cuda patched), torch's CUDA queries and the
    context faked, kernel_for recording each spec it is asked for: returns that list of (spec, kernel)."""
    built = []

    def kernel_for(spec, index):
        built.append((spec, RecordingKernel()))
        return built[-1][1]

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True), raising=False)
    monkeypatch.setattr(ops, "_current_device", lambda: -1)  # CPU tensors' get_device()
    monkeypatch.setattr(ops, "_raw_stream", lambda index: 7)
    monkeypatch.setattr(ops, "_on_device", lambda index: None)
    monkeypatch.setattr(ops, "kernel_for", kernel_for)
    monkeypatch.setattr(ops, "_plans", {})
    monkeypatch.setattr(ops, "_calls", {})
    return built


def _binds(built):
    return [b for _, kernel in built for b, _ in kernel.loaded_.binds]


def test_a_routed_layer_builds_once_per_shape_and_then_only_launches(dressed):
    from gemmtune.torch.optimize_model import RoutedLinear

    layer = RoutedLinear(torch.nn.Linear(32, 48, dtype=BF16), "gelu")
    x = torch.randn(2, 8, 32, dtype=BF16)
    with torch.no_grad():
        outs = [layer(x) for _ in range(4)]
    assert len(dressed) == 1 and dressed[0][0].short() == ops._spec(
        meta(16, 32), meta(48, 32), "nt", "bias_col+gelu", "bf16").short()
    assert all(o.shape == (2, 8, 48) and o.dtype == BF16 for o in outs)  # D made in the output's shape
    loaded = dressed[0][1].loaded_
    assert loaded.launched == 4 and len(ops._calls) == 1
    bound = loaded.binds[0][0]
    assert (bound["A"], bound["B"], bound["bias"]) == (x.data_ptr(), layer.weight.data_ptr(), layer.bias.data_ptr())
    assert loaded.binds[0][1] == 7  # torch's current stream


def test_a_new_shape_or_dtype_makes_a_new_plan_and_a_replaced_weight_a_new_bind(dressed):
    from gemmtune.torch.optimize_model import RoutedLinear

    layer = RoutedLinear(torch.nn.Linear(32, 48, dtype=BF16))
    with torch.no_grad():
        layer(torch.randn(16, 32, dtype=BF16))
        layer(torch.randn(24, 32, dtype=BF16))  # another batch: another GEMM
        assert [s.m for s, _ in dressed] == [16, 24]
        layer.weight = torch.nn.Parameter(torch.randn(48, 32, dtype=BF16))  # same shape: same plan, new pointer
        x = torch.randn(16, 32, dtype=BF16)
        layer(x)
        first = dressed[0][1].loaded_.binds
        assert len(dressed) == 2 and len(first) == 2 and first[-1][0]["B"] == layer.weight.data_ptr()
        layer.weight.data = layer.weight.data.half()  # the weight's type changed under the same Parameter
        with pytest.raises(ops.SpecError, match="cast one of them"):
            layer(x)
        layer.to(torch.float16)
        assert layer(x.half()).dtype == torch.float16 and dressed[-1][0].dtype == "fp16"


def test_fp32_calls_follow_torchs_tf32_switch_after_the_first(dressed):
    x, w = torch.randn(8, 16), torch.randn(24, 16)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        ops.linear(x, w)
        torch.backends.cuda.matmul.allow_tf32 = False
        ops.linear(x, w)
        ops.mm(x, w.t())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert [s.dtype for s, _ in dressed] == ["tf32", "fp32"]  # mm's call is the same fp32 GEMM: its plan
    assert dressed[1][1].loaded_.launched == 2


def test_calls_that_need_the_operator_or_a_copy_still_get_it(dressed):
    from torch.utils._python_dispatch import TorchDispatchMode

    w = torch.nn.Parameter(torch.randn(48, 32, dtype=BF16))
    x = torch.randn(16, 32, dtype=BF16)
    with torch.no_grad():
        ops.linear(x, w)
    y = ops.linear(x, w)  # grad enabled and the weight needs it: through the operator's autograd
    assert y.requires_grad and y.grad_fn is not None
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        ops.linear(x, w)
        ops.mm(x, w.t())
    assert seen.count("gemmtune.gemm.default") == 2  # a dispatch mode sees the operator
    with torch.no_grad():
        wide = torch.randn(16, 64, dtype=BF16)[:, ::2]  # not row-major: the general path copies it
        assert ops.linear(wide, w).shape == (16, 48)
        assert ops.mm(wide, w.t()).shape == (16, 48)
        assert wide.data_ptr() not in [b["A"] for b in _binds(dressed)]


def test_mm_reads_a_transposed_view_in_place_and_checks_its_operands(dressed):
    a, w, c = torch.randn(16, 32, dtype=BF16), torch.randn(48, 32, dtype=BF16), torch.randn(16, 48, dtype=BF16)
    with torch.no_grad():
        for _ in range(2):
            assert ops.mm(a, w.t()).shape == (16, 48)
            assert ops.mm(a, w.t(), "relu+add", c=c).shape == (16, 48)
        assert [(s.layout, str(s.epilogue)) for s, _ in dressed] == [("nt", "none"), ("nt", "relu+add")]
        assert _binds(dressed)[0]["B"] == w.data_ptr()
        for call, message in ((lambda: ops.mm(a, w.t(), "relu+add"), "needs C"),
                              (lambda: ops.mm(a, w.t(), "relu+add", c=c[:, :40]), "must be"),
                              (lambda: ops.mm(a, w.t(), bias=c[0]), "takes no bias"),
                              (lambda: ops.mm(a, w[:, :16].t()), "inner dimensions differ")):
            with pytest.raises(ops.SpecError, match=message):
                call()


def test_installing_a_kernel_forgets_the_calls_seen(dressed, monkeypatch):
    monkeypatch.setattr(ops, "_kernels", {})
    with torch.no_grad():
        ops.linear(torch.randn(8, 32, dtype=BF16), torch.randn(16, 32, dtype=BF16))
    assert ops._calls
    ops.install_kernel(dressed[0][0], -1, RecordingKernel())
    assert ops._calls == {} and ops._plans == {}


def test_calls_seen_are_kept_up_to_a_bound(dressed, monkeypatch):
    monkeypatch.setattr(ops, "CALLS_KEPT", 3)
    w = torch.randn(16, 32, dtype=BF16)
    with torch.no_grad():
        for m in range(1, 6):
            ops.linear(torch.randn(m + 1, 32, dtype=BF16), w)
    assert len(ops._calls) == 3 and [k[0][0] for k in ops._calls] == [4, 5, 6]


@pytest.mark.parametrize("shape, strides", [((16, 32), (32, 1)), ((16, 32), (1, 16)), ((1, 32), (64, 2)),
                                            ((16, 1), (1, 5)), ((16, 32), (2, 64)), ((1, 1), (3, 3))])
def test_the_layout_letter_is_as_stored_s_without_the_view(shape, strides):
    x = torch.empty_strided(shape, strides, dtype=BF16)
    letter = ops._as_stored(x)[1] if x.is_contiguous() or x.t().is_contiguous() else None
    assert ops._letter(x) == letter


def test_dynamo_sees_compiling_so_it_traces_the_operator_not_the_fast_path():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1 if ops._is_compiling() else x - 1, fullgraph=True, backend="eager")
    assert compiled(torch.zeros(2)).tolist() == [1.0, 1.0]
