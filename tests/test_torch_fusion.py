"""optimize()'s fused sites (fusion.py, fused_sites.py): residual adds and SwiGLU found in forward code with
torch.fx, on a Llama-like layer and an HF-style MLP; patterns that must not match; the rewritten model against
the original (on the CPU, the fused calls replaced by torch references); the plan saved and reloaded; a module
that does not trace left alone. On a GPU: a small Llama-like layer optimized end to end, compiled whole and
replayed in a CUDA graph."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from gemmtune.torch import fusion  # noqa: E402
from gemmtune.torch.fused_sites import FusedSite, find_fused  # noqa: E402
from gemmtune.torch.optimize_model import GpuBackend, SiteTiming, capture_sites, load_plan, optimize  # noqa: E402
from test_torch_optimize import FakeBackend as LinearFakeBackend  # noqa: E402

BF16 = torch.bfloat16


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight


class LlamaLike(nn.Module):
    """bench_blocks' LlamaLayer at small sizes: attention with a residual add after o_proj, a SwiGLU MLP with
    one after down_proj."""

    def __init__(self, hidden: int = 256, inter: int = 704, heads: int = 4, kv: int = 2):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, hidden // heads
        self.q_proj, self.o_proj = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv * self.hd, bias=False)
        self.v_proj = nn.Linear(hidden, kv * self.hd, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(hidden, inter, bias=False), nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2).repeat_interleave(self.heads // self.kv, 1)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2).repeat_interleave(self.heads // self.kv, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        h = self.norm2(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class HfMlp(nn.Module):
    """transformers' LlamaMLP: act_fn an nn.SiLU module, up(x) on the left of the product."""

    def __init__(self, hidden: int = 64, inter: int = 96):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(hidden, inter, bias=False), nn.Linear(hidden, inter, bias=False)
        self.down_proj, self.act_fn = nn.Linear(inter, hidden, bias=False), nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.up_proj(x) * self.act_fn(self.gate_proj(x)))


class Untraceable(nn.Module):
    """Control flow on a tensor's value: symbolic_trace fails here, so only its child is traced."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp, self.proj = HfMlp(), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > -1e9:
            return self.proj(x) + self.mlp(x)
        return x


class Unfusable(nn.Module):
    """No pattern may match: gate's output read twice, a gate with a bias, an add that broadcasts, one that
    promotes the type."""

    def __init__(self) -> None:
        super().__init__()
        self.g1, self.u1 = nn.Linear(64, 96, bias=False), nn.Linear(64, 96, bias=False)
        self.g2, self.u2 = nn.Linear(64, 96), nn.Linear(64, 96, bias=False)
        self.p, self.q = nn.Linear(96, 64, bias=False), nn.Linear(64, 1, bias=False)
        self.r = nn.Linear(64, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.g1(x)
        y = F.silu(g) * self.u1(x) + g  # g has a second user
        y = y + F.silu(self.g2(x)) * self.u2(x)  # g2 has a bias
        z = self.p(y) + x[:, :1, :]  # broadcasting residual (x's first token)
        z = self.q(z) + z  # broadcast (N = 1 against 64)
        return self.r(z) + z.float()  # promotes to float32


def _llama(seed: int = 0) -> LlamaLike:
    torch.manual_seed(seed)
    return LlamaLike().to(BF16)


X = torch.randn(1, 64, 256, dtype=BF16)
XS = torch.randn(2, 8, 64, dtype=BF16)


def _interleave(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    n, k = w_gate.shape
    return torch.stack([w_gate.view(n // 8, 8, k), w_up.view(n // 8, 8, k)], 1).reshape(2 * n, k)


def _gated_reference(x2: torch.Tensor, w_gu: torch.Tensor) -> torch.Tensor:
    y = F.linear(x2, w_gu)
    n = y.shape[-1] // 2
    y = y.view(-1, n // 8, 2, 8)
    return (F.silu(y[:, :, 0]) * y[:, :, 1]).reshape(-1, n)


@pytest.fixture
def torch_kernels(monkeypatch):
    """The fused calls as torch references (no GPU here), and a gated GEMM whether or not gated.py exists."""
    monkeypatch.setattr(fusion, "_kernel_linear_add", lambda x2, w, b, r2: F.linear(x2, w, b) + r2)
    monkeypatch.setattr(fusion, "_GATED", {"gated_linear": _gated_reference, "interleave_gate_up": _interleave})


@dataclass
class FakeBackend(LinearFakeBackend):
    """test_torch_optimize's fake, with fused sites timed by their name."""

    def time_fused(self, site):
        self.timed.append(site.name)
        return SiteTiming(*self.times.get(site.name, (1e-6, 2e-6)))


def _fused(model, x):
    return {s.name: s for s in find_fused(model, (x,), capture_sites(model, (x,)))}


# --- finding ----------------------------------------------------------------------------------------------
def test_llama_like_layer_has_two_residual_adds_and_swiglu(torch_kernels):
    found = _fused(_llama(), X)
    assert list(found) == ["o_proj +add", "down_proj +add", "gate_proj+up_proj swiglu"]
    add, swiglu = found["o_proj +add"], found["gate_proj+up_proj swiglu"]
    assert add.spec.epilogue.ops == ("add",) and (add.spec.m, add.spec.n, add.spec.k) == (64, 256, 256)
    assert swiglu.spec.gated and (swiglu.spec.m, swiglu.spec.n, swiglu.spec.k) == (64, 704, 256)
    assert swiglu.linears == ("gate_proj", "up_proj") and all(s.routable and s.owner == "" for s in found.values())


def test_hf_mlp_with_an_silu_module_and_up_on_the_left(torch_kernels):
    found = _fused(HfMlp().to(BF16), XS)
    assert list(found) == ["gate_proj+up_proj swiglu"] and found["gate_proj+up_proj swiglu"].spec.n == 96


def test_swiglu_without_the_gated_gemm_is_a_site_gemmtune_does_not_route(monkeypatch):
    monkeypatch.setattr(fusion, "_GATED", {})
    monkeypatch.setattr(fusion, "gated_available", lambda: "no gated GEMM in this gemmtune (test)")
    site = _fused(HfMlp().to(BF16), XS)["gate_proj+up_proj swiglu"]
    assert not site.routable and "no gated GEMM" in site.note


def test_patterns_that_must_not_match(torch_kernels):
    assert _fused(Unfusable().to(BF16), XS) == {}


def test_fp32_swiglu_is_not_fused_but_its_add_is(torch_kernels):
    found = _fused(LlamaLike(), X.float())
    assert sorted(found) == ["down_proj +add", "o_proj +add"]


def test_a_module_that_does_not_trace_is_left_alone_and_its_children_scanned(torch_kernels):
    model = Untraceable().to(BF16)
    scan = fusion.scan(model, (XS,))
    assert [p.key for p in scan.patterns] == [("mlp", "swiglu", ("gate_proj", "up_proj"))]
    assert scan.untraced and scan.untraced[0].startswith("(model): TraceError")
    site = _fused(model, XS)["mlp: gate_proj+up_proj swiglu"]
    assert site.linears == ("mlp.gate_proj", "mlp.up_proj") and site.owner == "mlp"


# --- routing ----------------------------------------------------------------------------------------------
def test_routed_rewrite_equals_the_model_and_keeps_its_state(torch_kernels, tmp_path):
    model = _llama()
    keys, want = sorted(model.state_dict()), model(X)
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)
    assert [(p.site.name, p.routed) for p in report.fused] == [
        ("o_proj +add", True), ("down_proj +add", True), ("gate_proj+up_proj swiglu", True)], report.table()
    linears = {p.site.name: p for p in report.layers}
    assert not linears["gate_proj"].routed and linears["gate_proj"].reason == "in fused site gate_proj+up_proj swiglu"
    assert "forward" in model.__dict__ and sorted(model.state_dict()) == keys
    assert "| gate_proj+up_proj swiglu | 64x704x256 nt bf16 gated |" in report.table()
    assert "| o_proj +add | 64x256x256 nt bf16 add |" in report.table()
    assert torch.allclose(model(X).float(), want.float(), rtol=1e-2, atol=1e-2)
    assert type(model.gate_proj) is nn.Linear and model.gate_proj_up_proj_gemmtune_gate_up.shape == (1408, 256)


def test_tune_many_tunes_the_fused_sites_gemms_the_gated_one_included(torch_kernels, tmp_path):
    """optimize()'s tuning workload holds each fused site's GEMM in place of its Linears': the add sites' GEMMs
    with the add epilogue and the SwiGLU site's gated spec (N the output width), which is then planned and
    installed as the Linear sites' GEMMs are."""
    backend = FakeBackend()
    report = optimize(_llama(), (X,), budget=5, plan=tmp_path / "p.json", backend=backend, progress=False)
    (workload, budget_s), = backend.tuned
    shapes = {s.spec.short(): s.count for s in workload.shapes}
    assert shapes["64x704x256 nt bf16 gated"] == 1 and shapes["64x256x256 nt bf16 add"] == 1
    assert not any(s.spec.n == 704 and not s.spec.gated for s in workload.shapes)  # gate_proj/up_proj superseded
    gated = next(s.spec for s in workload.shapes if s.spec.gated)
    assert gated in backend.installed and budget_s == pytest.approx(5, abs=1)
    swiglu = {p.site.name: p for p in report.fused}["gate_proj+up_proj swiglu"]
    assert swiglu.routed and swiglu.family == "wgmma" and swiglu.config == {"bm": 128}


def test_a_fused_site_slower_than_torch_leaves_its_linears_as_they_were(torch_kernels, tmp_path):
    model = _llama()
    backend = FakeBackend({"o_proj +add": (3e-6, 2e-6), "down_proj +add": (3e-6, 2e-6),
                           "gate_proj+up_proj swiglu": (3e-6, 2e-6)})
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    assert not any(p.routed for p in report.fused) and "forward" not in model.__dict__
    assert not hasattr(model, "gate_proj_up_proj_gemmtune_gate_up")


def test_a_rewrite_that_differs_is_refused_and_its_linears_are_sites_again(monkeypatch, tmp_path):
    monkeypatch.setattr(fusion, "_kernel_linear_add", lambda x2, w, b, r2: F.linear(x2, w, b) - r2)  # wrong
    monkeypatch.setattr(fusion, "_GATED", {"gated_linear": _gated_reference, "interleave_gate_up": _interleave})
    model = _llama()
    backend = FakeBackend({"down_proj": (1e-6, 2e-6)})  # (o_proj's GEMM is q_proj's: timed as q_proj's)
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    fused = {p.site.name: p for p in report.fused}
    assert not fused["down_proj +add"].routed and "rewritten model differs" in fused["down_proj +add"].reason
    assert fused["gate_proj+up_proj swiglu"].routed
    linears = {p.site.name: p for p in report.layers}
    assert linears["down_proj"].routed and linears["down_proj"].reason == "gemmtune faster"  # its own site again
    assert linears["o_proj"].reason == "torch faster"


def test_the_rewritten_model_compiles_whole_to_gemmtune_ops(monkeypatch, tmp_path):
    """The add sites with the real fused call (gemmtune::gemm, traced with its fake implementation): one graph."""
    monkeypatch.setattr(fusion, "_GATED", {})
    monkeypatch.setattr(fusion, "gated_available", lambda: "no gated GEMM (test)")
    model = _llama()
    with monkeypatch.context() as patch:  # the route-time check runs the model: torch references there
        patch.setattr(fusion, "_kernel_linear_add", lambda x2, w, b, r2: F.linear(x2, w, b) + r2)
        report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)
    assert [p.routed for p in report.fused] == [True, True, False]
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(1, 64, 256, dtype=BF16),)
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend=record)(X)
    ops = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert len(graphs) == 1 and sum("gemmtune.gemm" in op for op in ops) == 2


# --- the plan -----------------------------------------------------------------------------------------------
def test_plan_reloads_fused_sites_without_timing(torch_kernels, tmp_path):
    made = optimize(_llama(), (X,), budget=0, plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)
    assert load_plan(tmp_path / "p.json").fused == made.fused
    again, model = FakeBackend(), _llama()
    want = model(X)
    report = optimize(model, (X,), plan=tmp_path / "p.json", backend=again, progress=False)
    assert report.reloaded and again.timed == [] and not report.warnings
    assert [p.routed for p in report.fused] == [True, True, True] and "forward" in model.__dict__
    assert again.installed[:3] == [p.site.spec for p in made.fused]
    assert torch.allclose(model(X).float(), want.float(), rtol=1e-2, atol=1e-2)


def test_a_reloaded_plan_whose_pattern_is_gone_routes_nothing_of_it_and_says_so(torch_kernels, tmp_path):
    optimize(_llama(), (X,), budget=0, plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)

    class NoResidual(LlamaLike):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attention(self.norm1(x))
            h = self.norm2(x)
            return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    torch.manual_seed(0)
    model = NoResidual().to(BF16)
    report = optimize(model, (X,), plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)
    fused = {p.site.name: p.routed for p in report.fused}
    assert fused == {"o_proj +add": True, "down_proj +add": False, "gate_proj+up_proj swiglu": True}
    assert report.warnings == ("warning: fused site down_proj +add not routed: its pattern no longer matches the model",)
    assert report.warnings[0] in report.table()


def test_fused_site_json_round_trip():
    site = FusedSite("layers.0", "swiglu", ("layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"), None, routable=False,
                     note="why")
    assert FusedSite.from_json(site.to_json()) == site and site.name == "layers.0.mlp: gate_proj+up_proj swiglu"
    assert site.pattern_key() == ("layers.0", "swiglu", ("mlp.gate_proj", "mlp.up_proj"))


# --- on the GPU -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EverySite(GpuBackend):
    """Times each site as the GPU says but routes every one (torch's side timed 2x gemmtune's), and times the
    model the same routed or not: the test is of the routed model's outputs, compile and capture."""

    def time_site(self, site):
        t = super().time_site(site)
        return SiteTiming(t.gemmtune_s, t.gemmtune_s * 2 if t.gemmtune_s else None, t.error)

    def time_fused(self, site):
        t = super().time_fused(site)
        return SiteTiming(t.gemmtune_s, t.gemmtune_s * 2 if t.gemmtune_s else None, t.error)

    def time_model(self, model, inputs) -> float:
        return 1e-3


def _close(got, want, limit=2e-2):
    return float((got.float() - want.float()).norm() / want.float().norm()) < limit


@pytest.mark.gpu
def test_gpu_llama_like_layer_fused_matches_compiles_and_captures(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    torch.manual_seed(0)
    model, x = LlamaLike().cuda().to(BF16), torch.randn(1, 64, 256, device="cuda", dtype=BF16)
    gated = fusion.gated_available() is None
    with torch.no_grad():
        want = model(x)
        report = optimize(model, (x,), budget=0, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite",
                          backend=EverySite(), progress=False)
        routed = {p.site.name: p.routed for p in report.fused}
        assert routed == {"o_proj +add": True, "down_proj +add": True, "gate_proj+up_proj swiglu": gated}, \
            report.table()
        assert _close(model(x), want)
        torch._dynamo.reset()
        assert _close(torch.compile(model, fullgraph=True)(x), want)
        graph, static = torch.cuda.CUDAGraph(), x.clone()
        model(static)
        with torch.cuda.graph(graph):
            out = model(static)
        graph.replay()
        torch.cuda.synchronize()
        assert _close(out, want)
        fresh = LlamaLike().cuda().to(BF16)
        fresh.load_state_dict(model.state_dict())
        again = optimize(fresh, (x,), plan=tmp_path / "p.json", progress=False)
        assert again.reloaded and not again.warnings and _close(fresh(x), want), again.table()
