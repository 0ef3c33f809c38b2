"""gemmtune.torch.optimize: capture of a model's Linear sites and fusable activations, the plan file,
routing by (injected) measurements, reload without tuning; on a GPU, the optimized model end to end."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gemmtune.input_files import InputFileError  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.torch.optimize_model import (GpuBackend, RoutedLinear, SiteTiming, capture_sites, flop_workload,  # noqa: E402
                                     load_plan, optimize)

BF16 = torch.bfloat16


class Block(nn.Module):
    """fc1 -> tanh GELU (fusable); fc2 -> ReLU whose input is read twice (not); fc3 -> erf GELU;
    fc4 and fc5 share one ReLU module (not fusable: Identity would drop the other's activation)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(64, 128), nn.GELU(approximate="tanh")
        self.fc2, self.act2 = nn.Linear(128, 96, bias=False), nn.ReLU()
        self.fc3, self.act3 = nn.Linear(96, 80), nn.GELU()
        self.fc4, self.fc5, self.shared = nn.Linear(80, 48), nn.Linear(80, 48), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(self.act1(self.fc1(x)))
        z = self.act3(self.fc3(self.act2(y) + y))
        return self.shared(self.fc4(z)) + self.shared(self.fc5(z))


def _block() -> Block:
    torch.manual_seed(0)
    return Block().to(BF16)


X = torch.randn(2, 8, 64, dtype=BF16)


@dataclass
class FakeBackend:
    """Measurements by layer name (gemmtune s, torch s); records what optimize asked of the GPU."""

    times: dict = field(default_factory=dict)
    tuned: list = field(default_factory=list)
    installed: list = field(default_factory=list)
    timed: list = field(default_factory=list)

    def device_name(self) -> str:
        return "Fake H200"

    def tune(self, workload, budget_s, db_path, show) -> None:
        self.tuned.append((workload, budget_s))

    def config(self, spec, db_path, tuned):
        return "wgmma", {"bm": 128}

    def install(self, spec, family, config) -> None:
        self.installed.append(spec)

    def time_site(self, site):
        self.timed.append(site.name)
        return SiteTiming(*self.times.get(site.name, (2e-6, 1e-6)))

    def time_model(self, model, inputs) -> float:
        self.timed.append("model")
        return 1e-3


def test_capture_finds_linear_sites_and_fusable_activations():
    sites = {s.name: s for s in capture_sites(_block(), (X,))}
    assert list(sites) == ["fc1", "fc2", "fc3", "fc4", "fc5"]
    assert (sites["fc1"].spec.m, sites["fc1"].spec.n, sites["fc1"].spec.k) == (16, 128, 64)
    assert sites["fc1"].spec.layout == "nt" and sites["fc1"].spec.dtype == "bf16"
    assert sites["fc1"].spec.epilogue.ops == ("bias_col", "gelu") and sites["fc1"].activation_module == "act1"
    assert sites["fc2"].spec.epilogue.ops == () and sites["fc2"].activation is None  # y is read twice
    assert sites["fc3"].spec.epilogue.ops == ("bias_col",) and "erf GELU not fused" in sites["fc3"].note
    assert all(sites[n].spec.epilogue.ops == ("bias_col",) for n in ("fc4", "fc5"))  # the shared ReLU stays


def test_erf_gelu_is_fused_only_within_the_given_tolerance():
    assert capture_sites(_block(), (X,), erf_gelu_atol=1e-4)[2].activation is None
    fused = capture_sites(_block(), (X,), erf_gelu_atol=1e-3)[2]
    assert fused.spec.epilogue.ops == ("bias_col", "gelu") and fused.activation == "gelu_erf"


def test_budget_is_split_by_flop_share():
    workload = flop_workload(capture_sites(_block(), (X,)))
    shares = {s.spec.short(): (s.count, share) for s, share in zip(workload.shapes, workload.shares())}
    assert sum(share for _, share in shares.values()) == pytest.approx(1.0)
    assert shares["16x48x80 nt bf16 bias_col"][0] == 2  # fc4 and fc5: one GEMM, called twice
    ratio = shares["16x128x64 nt bf16 bias_col+gelu"][1] / shares["16x48x80 nt bf16 bias_col"][1]
    assert ratio == pytest.approx((128 * 64) / (2 * 48 * 80))


def test_routing_keeps_a_layer_where_torch_is_faster(tmp_path):
    model = _block()
    backend = FakeBackend({"fc1": (1e-6, 2e-6), "fc2": (3e-6, 2e-6), "fc3": (1e-6, 1.5e-6)})
    report = optimize(model, (X,), budget=0, plan=tmp_path / "plan.json", backend=backend, progress=False)
    assert isinstance(model.fc1, RoutedLinear) and model.fc1.activation == "gelu"
    assert isinstance(model.act1, nn.Identity) and isinstance(model.act3, nn.GELU)  # erf GELU kept
    assert type(model.fc2) is nn.Linear and isinstance(model.act2, nn.ReLU)
    assert type(model.fc4) is nn.Linear  # default fake times: torch faster
    assert [p.routed for p in report.layers] == [True, False, True, False, False]
    assert report.layers[1].reason == "torch faster" and backend.tuned == []
    assert "| fc1 |" in report.table() and "2.00" in report.table()


def test_routed_layers_keep_their_parameters_and_trace_without_graph_breaks(tmp_path):
    model = _block()
    weight = model.fc1.weight
    optimize(model, (X,), budget=0, plan=tmp_path / "p.json", progress=False,
             backend=FakeBackend({n: (1e-6, 2e-6) for n in ("fc1", "fc2", "fc3", "fc4", "fc5")}))
    assert model.fc1.weight is weight and "fc1.bias" in model.state_dict()
    graphs = []

    def record(gm, example_inputs):  # look at the graph, run nothing (no GPU here)
        graphs.append(gm)
        return lambda *args: (torch.zeros(2, 8, 48, dtype=BF16),)
    torch.compile(model, fullgraph=True, backend=record)(X)
    ops = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert len(graphs) == 1 and sum("gemmtune.gemm" in op for op in ops) == 5


def test_plan_round_trips_and_reloads_without_tuning_or_timing(tmp_path):
    backend = FakeBackend({"fc1": (1e-6, 2e-6)})
    made = optimize(_block(), (X,), budget=5, plan=tmp_path / "plan.json", backend=backend, progress=False)
    assert len(backend.tuned) == 1 and backend.tuned[0][1] == 5.0
    loaded = load_plan(tmp_path / "plan.json")
    assert loaded.layers == made.layers and loaded.device == made.device and loaded.reloaded
    again, model = FakeBackend(), _block()
    report = optimize(model, (X,), budget=5, plan=tmp_path / "plan.json", backend=again, progress=False)
    assert again.tuned == [] and again.timed == [] and again.installed == [made.layers[0].site.spec]
    assert report.reloaded and isinstance(model.fc1, RoutedLinear) and type(model.fc2) is nn.Linear


def test_a_plan_for_another_model_or_gpu_is_refused(tmp_path):
    optimize(_block(), (X,), budget=0, plan=tmp_path / "p.json", backend=FakeBackend({"fc1": (1, 2)}), progress=False)
    other = nn.Sequential()
    other.add_module("fc1", nn.Linear(64, 7))
    with pytest.raises(InputFileError, match="does not fit this model"):
        optimize(other, (X,), plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)

    class Elsewhere(FakeBackend):
        def device_name(self) -> str:
            return "Fake A100"
    with pytest.raises(InputFileError, match="was made on Fake H200"):
        optimize(_block(), (X,), plan=tmp_path / "p.json", backend=Elsewhere(), progress=False)


def test_wrong_output_keeps_the_layer(tmp_path):
    class Wrong(FakeBackend):
        def time_site(self, site):
            return SiteTiming(None, 1e-6, "wrong output (relative error 1.0e+00)")
    model = _block()
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=Wrong(), progress=False)
    assert not any(p.routed for p in report.layers) and report.layers[0].reason.startswith("wrong output")


# --- on the GPU -------------------------------------------------------------------------------------
class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.act, self.down = nn.Linear(512, 2048), nn.GELU(approximate="tanh"), nn.Linear(2048, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


@dataclass(frozen=True)
class EveryLayer(GpuBackend):
    """Times each layer as the GPU says, but routes every one, and times the model the same routed or
    not, so that the end-to-end guard (which un-routes a model that runs slower eagerly, as a slow host
    makes it) keeps the routing: the test is of a routed model's outputs, compile and capture."""

    def time_site(self, site):
        timing = super().time_site(site)
        return SiteTiming(timing.gemmtune_s, timing.gemmtune_s * 2 if timing.gemmtune_s else None, timing.error)

    def time_model(self, model, inputs) -> float:
        return 1e-3


def _gpu_mlp():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    torch.manual_seed(0)
    return Mlp().cuda().to(BF16), torch.randn(4, 64, 512, device="cuda", dtype=BF16)


def _close(got, want):
    return float((got.float() - want.float()).norm() / want.float().norm()) < 2e-2


@pytest.mark.gpu
def test_gpu_optimized_mlp_matches_compiles_and_captures(tmp_path):
    model, x = _gpu_mlp()
    with torch.no_grad():
        want = model(x)
        report = optimize(model, (x,), budget=0, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite",
                          backend=EveryLayer(), progress=False)
        assert len(report.layers) == 2 and all(p.routed for p in report.layers), report.table()
        assert isinstance(model.up, RoutedLinear) and isinstance(model.act, nn.Identity)
        assert isinstance(model.down, RoutedLinear) and model.up.activation == "gelu"
        assert _close(model(x), want)
        assert _close(torch.compile(model, fullgraph=True)(x), want)
        graph, static = torch.cuda.CUDAGraph(), x.clone()
        model(static)  # warm: kernels built and loaded before capture
        with torch.cuda.graph(graph):
            out = model(static)
        graph.replay()
        torch.cuda.synchronize()
        assert _close(out, want)


@pytest.mark.gpu
def test_gpu_optimize_with_real_timing_then_reload_under_10_s(tmp_path):
    model, x = _gpu_mlp()
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        want = model(x)
        made = optimize(model, (x,), budget=0, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", progress=False)
        assert all(p.timing.torch_s for p in made.layers) and made.model_after_s, made.table()
        # routed where the plan says so, whatever this host's speed decided (the guard may route nothing)
        assert [isinstance(model.get_submodule(p.site.name), RoutedLinear) for p in made.layers] == \
            [p.routed for p in made.layers], made.table()
        assert _close(model(x), want)
        started = time.monotonic()
        again = optimize(fresh, (x,), budget=600, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", progress=False)
        assert time.monotonic() - started < 10 and again.reloaded
        assert [type(m) for m in fresh.modules()] == [type(m) for m in model.modules()]
        assert _close(fresh(x), want)


def test_a_model_slower_end_to_end_with_its_routed_layers_gets_them_back(tmp_path):
    """Each layer faster alone (the injected times), the whole slower once routed: optimize swaps the
    original modules back, so the model is never slower than without it, and the plan says why."""

    class SlowerWhenRouted(FakeBackend):
        def time_model(self, model, inputs) -> float:
            self.timed.append("model")
            return 2e-3 if any(isinstance(m, RoutedLinear) for m in model.modules()) else 1e-3

    model = _block()
    kinds = [type(m) for m in model.modules()]
    backend = SlowerWhenRouted({n: (1e-6, 2e-6) for n in ("fc1", "fc2", "fc3", "fc4", "fc5")})
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    assert [type(m) for m in model.modules()] == kinds  # every original module back in place, activations too
    assert not any(p.routed for p in report.layers) and all("kept as torch" in p.reason for p in report.layers)
    assert report.model_after_s == report.model_before_s == 1e-3
    assert not any(p.routed for p in optimize(_block(), (X,), plan=tmp_path / "p.json", backend=backend,
                                               progress=False).layers)  # the plan reloads as it was saved


def test_a_host_bound_model_faster_with_every_layer_routed_gets_every_layer(tmp_path):
    """Two layers faster alone, three slower on the GPU; the model runs faster the more layers are routed
    (an eager block whose host cost each routed call lowers): optimize routes all five and says why, and
    the variants were timed in alternating rounds, not one after another."""

    class HostBound(FakeBackend):
        def time_model(self, model, inputs) -> float:
            routed = sum(isinstance(m, RoutedLinear) for m in model.modules())
            self.timed.append(routed)
            return 1e-3 - routed * 1e-5

    times = {"fc1": (1e-6, 2e-6), "fc2": (1e-6, 2e-6), "fc3": (3e-6, 2e-6), "fc4": (3e-6, 2e-6), "fc5": (3e-6, 2e-6)}
    model = _block()
    backend = HostBound(times)
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    assert all(p.routed for p in report.layers), report.table()
    assert all(isinstance(model.get_submodule(n), RoutedLinear) for n in times)
    assert report.layers[2].reason.startswith("routed with every layer") and report.layers[0].reason == "gemmtune faster"
    assert report.model_before_s == 1e-3 and report.model_after_s == pytest.approx(1e-3 - 5e-5)
    counts = [t for t in backend.timed if isinstance(t, int)]
    assert len(counts) == 15 and counts[:3] == [0, 2, 5] and counts[3:6] == [2, 5, 0]  # rotated each round


def test_a_layer_routed_for_host_time_runs_torchs_ops_under_compile(monkeypatch):
    """routed_linear: a layer whose kernel lost inside CUDA graphs runs F.linear and the activation as
    torch ran it while torch.compile traces (inductor fuses them); one whose kernel won keeps gemmtune."""
    from gemmtune.torch import optimize_model as om

    lin = nn.Linear(64, 32).to(BF16)
    site = om.Site("fc", GemmSpec(16, 32, 64, "nt", "bf16", epilogue="bias_col+gelu"), activation="gelu_erf")
    slower = om.LayerPlan(site, "wgmma", {}, SiteTiming(3e-6, 2e-6), True, "routed with every layer")
    faster = om.LayerPlan(site, "wgmma", {}, SiteTiming(1e-6, 2e-6), True, "gemmtune faster")
    assert om.routed_linear(lin, slower).compiled_by_torch and not om.routed_linear(lin, faster).compiled_by_torch
    calls = []
    monkeypatch.setattr(om, "_linear", lambda *args: calls.append(args) or torch.zeros(16, 32, dtype=BF16))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = torch.randn(16, 64, dtype=BF16)
    with torch.no_grad():
        assert torch.equal(om.routed_linear(lin, slower)(x), nn.functional.gelu(nn.functional.linear(x, lin.weight, lin.bias)))
        assert not calls
        om.routed_linear(lin, faster)(x)
    assert len(calls) == 1 and calls[0][3] == "gelu"
