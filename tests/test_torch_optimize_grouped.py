"""optimize() with GroupedLinear sites (MoE experts): capture with the rows each group held, routing by
(injected) measurements, the plan's grouped sites saved and reloaded; on a GPU (sm_90a), the gemmtune path
against torch's, an MoE block optimized end to end, compiled whole and replayed in a CUDA graph after its
routing changed."""
from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from gemmtune.grouped.config import default_config  # noqa: E402
from gemmtune.grouped.spec import GroupedSpec  # noqa: E402
from gemmtune.input_files import InputFileError  # noqa: E402
from gemmtune.torch import GroupedLinear  # noqa: E402
from gemmtune.torch.optimize_model import GpuBackend, SiteTiming, capture, load_plan, optimize  # noqa: E402
from test_torch_optimize import FakeBackend as LinearFakeBackend  # noqa: E402

BF16 = torch.bfloat16
ROWS = (5, 0, 1, 10)  # an empty expert, a one-row expert


class Experts(nn.Module):
    """A fixed routing (offs a buffer): proj -> gate/up (swiglu) -> down, the down with a bias."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64, bias=False)
        self.gate_up = GroupedLinear(4, 64, 32, activation="swiglu")
        self.down = GroupedLinear(4, 32, 64, bias=True)
        self.register_buffer("offs", torch.tensor(ROWS).cumsum(0).to(torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up(self.proj(x), self.offs), offs=self.offs)


def _experts() -> Experts:
    torch.manual_seed(0)
    return Experts().to(BF16)


X = torch.randn(sum(ROWS), 64, dtype=BF16)
CONFIG = {**default_config(GroupedSpec(4, 16, 64, 64)).to_json(), "stages": 2}  # a config the generator takes


@dataclass
class FakeBackend(LinearFakeBackend):
    """test_torch_optimize's fake (measurements by site name, what optimize asked of the GPU recorded), with the
    grouped sites' calls and a settable whole-model time."""

    model_s: float = 1e-3
    looked_up: list = field(default_factory=list)  # (spec, db_path, tuned) per grouped config asked

    def tune(self, workload, budget_s, db_path, show) -> None:
        self.tuned.append(("linear", budget_s))  # (what, seconds or tunes) per tune asked

    def grouped_config(self, spec, db_path, tuned) -> dict:
        self.looked_up.append((spec, db_path, tuned))
        return CONFIG

    def install_grouped(self, spec, config) -> None:
        self.installed.append(spec)

    def time_grouped(self, site, config):
        self.timed.append(site.name)
        return SiteTiming(*self.times.get(site.name, (2e-6, 1e-6)))

    def tune_grouped(self, tunes, db_path, show) -> None:
        self.tuned.append(("grouped", tuple(tunes)))

    def time_model(self, model, inputs) -> float:
        self.timed.append("model")
        return self.model_s


def test_capture_finds_grouped_sites_with_their_rows():
    linears, grouped = capture(_experts(), (X,))
    assert [s.name for s in linears] == ["proj"] and [g.name for g in grouped] == ["gate_up", "down"]
    up, down = grouped
    assert (up.spec.groups, up.spec.total_m, up.spec.n, up.spec.k, up.spec.swiglu) == (4, 16, 32, 64, True)
    assert up.rows == ROWS and up.offsets == (5, 5, 6, 16) and up.activation == "swiglu"
    assert down.spec.has_bias and down.activation is None and down.rows == ROWS  # offs passed by keyword
    assert "4 groups 16x32x64 bf16 swiglu (rows 0–10, 1 empty)" == up.short()
    fp32 = capture(Experts(), (X.float(),))[1]
    assert not fp32[0].routable and "takes bfloat16, float16" in fp32[0].note


def test_grouped_sites_route_only_where_faster(tmp_path):
    model = _experts()
    backend = FakeBackend({"gate_up": (1e-6, 2e-6), "down": (3e-6, 2e-6)})
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    assert model.gate_up.use_gemmtune and not model.gate_up.torch_under_compile and not model.down.use_gemmtune
    assert [(p.site.name, p.routed, p.reason) for p in report.grouped] == [("gate_up", True, "gemmtune faster"),
                                                                          ("down", False, "torch faster")]
    assert "| gate_up | 4 groups 16x32x64 bf16 swiglu" in report.table() and "| down |" in report.table()
    assert type(model.proj) is nn.Linear and backend.installed[-2:] == [p.site.spec for p in report.grouped]


def test_grouped_plan_round_trips_and_reloads_without_timing(tmp_path):
    made = optimize(_experts(), (X,), budget=0, plan=tmp_path / "p.json", progress=False,
                    backend=FakeBackend({"gate_up": (1e-6, 2e-6), "down": (1e-6, 2e-6)}))
    loaded = load_plan(tmp_path / "p.json")
    assert loaded.grouped == made.grouped and loaded.layers == made.layers
    again, model = FakeBackend(), _experts()
    report = optimize(model, (X,), plan=tmp_path / "p.json", backend=again, progress=False)
    assert report.reloaded and again.timed == [] and again.installed == [p.site.spec for p in made.grouped]
    assert model.gate_up.use_gemmtune and model.down.use_gemmtune


def test_a_grouped_plan_for_another_model_or_kernel_is_refused(tmp_path):
    optimize(_experts(), (X,), budget=0, plan=tmp_path / "p.json", progress=False,
             backend=FakeBackend({"gate_up": (1e-6, 2e-6)}))
    other = _experts()
    other.gate_up = GroupedLinear(4, 64, 48, activation="swiglu").to(BF16)
    with pytest.raises(InputFileError, match="gate_up is not a GroupedLinear"):
        optimize(other, (X,), plan=tmp_path / "p.json", backend=FakeBackend(), progress=False)

    class Unbuildable(FakeBackend):  # a config this gemmtune's generator no longer takes
        def grouped_config(self, spec, db_path, tuned) -> dict:
            return {**CONFIG, "bm": 96}
    optimize(_experts(), (X,), budget=0, plan=tmp_path / "q.json", progress=False,
             backend=Unbuildable({"gate_up": (1e-6, 2e-6)}))
    with pytest.raises(InputFileError, match="gate_up's grouped config is not one this gemmtune builds"):
        optimize(_experts(), (X,), plan=tmp_path / "q.json", backend=FakeBackend(), progress=False)


def test_a_block_slower_with_its_grouped_sites_routed_gets_torch_back(tmp_path):
    class SlowerWhenRouted(FakeBackend):
        def time_model(self, model, inputs) -> float:
            return 2e-3 if model.gate_up.use_gemmtune or model.down.use_gemmtune else 1e-3

    model = _experts()
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", progress=False,
                      backend=SlowerWhenRouted({"gate_up": (1e-6, 2e-6), "down": (1e-6, 2e-6)}))
    assert not model.gate_up.use_gemmtune and not model.down.use_gemmtune
    assert all(not p.routed and "kept as torch" in p.reason for p in report.grouped)
    assert report.model_after_s == report.model_before_s == 1e-3


def test_a_grouped_site_routed_for_host_time_runs_torch_under_compile(tmp_path):
    class HostBound(FakeBackend):
        def time_model(self, model, inputs) -> float:
            return 1e-3 - 1e-5 * (model.gate_up.use_gemmtune + model.down.use_gemmtune)

    model = _experts()
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", progress=False,
                      backend=HostBound({"gate_up": (1e-6, 2e-6), "down": (3e-6, 2e-6)}))
    assert model.down.use_gemmtune and model.down.torch_under_compile and not model.gate_up.torch_under_compile
    assert report.grouped[1].reason.startswith("routed with every layer")


def test_a_grouped_site_without_a_kernel_or_with_a_wrong_output_stays(tmp_path):
    from gemmtune.errors import LaunchError

    class NoKernel(FakeBackend):
        def install_grouped(self, spec, config) -> None:
            raise LaunchError("grouped GEMM kernels use wgmma and TMA (sm_90a)")

        def time_grouped(self, site):
            return SiteTiming(None, 1e-6, "wrong output (relative error 1.0e+00)")
    model = _experts()
    report = optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=NoKernel(), progress=False)
    assert not model.gate_up.use_gemmtune and report.grouped[0].reason.startswith("no kernel: grouped GEMM kernels")


def test_the_budget_is_shared_by_flops_between_linear_and_grouped_sites(tmp_path):
    """proj 16x64x64 (131072 FLOPs), gate_up 16 rows x 64 weight rows x 64 (131072), down 16 x 64 x 32 (65536):
    100 s go 40 / 40 / 20; each grouped config is then the database's, looked up with optimize()'s db."""
    from gemmtune.torch.optimize_grouped import config_text

    model, backend = _experts(), FakeBackend({"gate_up": (1e-6, 2e-6), "down": (1e-6, 2e-6)})
    optimize(model, (X,), budget=100, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", backend=backend,
             progress=False)
    (what, linear_s), (grouped, tunes) = backend.tuned
    assert what == "linear" and grouped == "grouped" and linear_s == pytest.approx(40)
    assert [(t.spec.n, t.rows, round(t.seconds, 6)) for t in tunes] == [(32, ROWS, 40), (64, ROWS, 20)]
    assert "gate_up" in tunes[0].label
    assert [(db, tuned) for _, db, tuned in backend.looked_up] == [(tmp_path / "db.sqlite", True)] * 2
    assert model.gate_up.gemmtune_config == model.down.gemmtune_config == config_text(CONFIG)


def test_budget_zero_tunes_nothing_and_plans_the_default(tmp_path):
    backend = FakeBackend({"gate_up": (1e-6, 2e-6)})
    model = _experts()
    optimize(model, (X,), budget=0, plan=tmp_path / "p.json", backend=backend, progress=False)
    assert backend.tuned == [] and {tuned for _, _, tuned in backend.looked_up} == {False}
    assert model.gate_up.gemmtune_config is not None and model.down.gemmtune_config is None  # down: not routed


def test_a_reload_tunes_nothing_and_routes_with_the_planned_config(tmp_path):
    from gemmtune.torch.optimize_grouped import config_text

    optimize(_experts(), (X,), budget=30, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", progress=False,
             backend=FakeBackend({"gate_up": (1e-6, 2e-6), "down": (1e-6, 2e-6)}))
    again, model = FakeBackend(), _experts()
    optimize(model, (X,), budget=30, plan=tmp_path / "p.json", backend=again, progress=False)
    assert again.tuned == [] and again.looked_up == [] and again.timed == []
    assert model.gate_up.use_gemmtune and model.gate_up.gemmtune_config == config_text(CONFIG)


@dataclass
class FakeMeasurer:
    """The grouped tuner's measurer without a GPU: each candidate takes a second of the fake clock."""

    clock: list = field(default_factory=lambda: [0.0])
    measured: list = field(default_factory=list)
    closed: bool = False

    @property
    def environment(self):
        from gemmtune.tune.trial import Environment

        return Environment("Fake H200", "9.0", 132, "sm_90a", "575.00", "12.9")

    def measure(self, spec, rows, config):
        from gemmtune.tune.grouped_records import GroupedTrial
        from gemmtune.tune.trial import Status

        self.clock[0] += 1.0
        self.measured.append(config)
        median = 10e-6 - 1e-6 * len(self.measured)
        return GroupedTrial(config, Status.OK, median, (median,), 12e-6, (12e-6,))

    def close(self) -> None:
        self.closed = True


def test_a_grouped_tune_measures_candidates_in_order_until_its_seconds_are_spent_and_resumes(tmp_path):
    from gemmtune.grouped.config import candidates
    from gemmtune.torch.optimize_grouped import GroupedTune, run_grouped_tunes, tune_within
    from gemmtune.tune.grouped_db import GroupedTuningDB

    spec = GroupedSpec(4, 16, 64, 64)
    fake = FakeMeasurer()
    clock = lambda: fake.clock[0]  # noqa: E731
    with GroupedTuningDB(tmp_path / "db.sqlite") as db:
        shown = []
        outcome = tune_within(GroupedTune(spec, ROWS, 1.0, seconds=2.5), fake, db, shown.append, clock)
        assert fake.measured == candidates(spec)[:3] and len(outcome.trials) == 3
        assert [p.done for p in shown] == [1, 2, 3]  # one line a candidate, not one a pass
        again = tune_within(GroupedTune(spec, ROWS, 1.0, seconds=0.0), fake, db, None, clock)
        assert len(fake.measured) == 3 and again.new_trials == 0  # at least the default: in the database already
        assert tune_within(GroupedTune(spec, ROWS, 1.0, seconds=0.0), FakeMeasurer(), db, None, clock).trials
    everything = run_grouped_tunes([GroupedTune(spec, ROWS, 1.0, seconds=1e9, label="gate_up")], fake,
                                   tmp_path / "db.sqlite", show=False, clock=clock)
    assert len(everything[0].trials) == len(candidates(spec)) and fake.closed
    assert fake.measured == candidates(spec)  # each candidate once over the three runs


def test_the_planned_config_is_read_from_optimizes_database_and_nothing_process_wide_changes(tmp_path, monkeypatch):
    import gemmtune.grouped.tuned as tuned
    from gemmtune.torch.optimize_grouped import planned_config

    spec, asked = GroupedSpec(4, 16, 64, 64), []
    monkeypatch.setattr(tuned, "tuned_config", lambda s, index, path: asked.append((s, index, path)) or None)
    before = list(tuned._database)
    assert planned_config(spec, 0, tmp_path / "db.sqlite", True) == default_config(spec).to_json()
    assert asked == [(spec, 0, tmp_path / "db.sqlite")] and tuned._database == before
    assert planned_config(spec, 0, tmp_path / "db.sqlite", False) == default_config(spec).to_json() and len(asked) == 1


def _bench_moe_block(hidden: int = 64, ffn: int = 32, experts: int = 4, top_k: int = 2):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_blocks import MoeBlock
    from model_shapes import Experts as Config

    torch.manual_seed(0)
    return MoeBlock(Config("test", "-", hidden, ffn, experts, top_k)).to(BF16)


def test_bench_moe_block_matches_a_loop_over_tokens_and_experts():
    """bench_blocks' MoE block: each token's top-k experts' SwiGLU MLPs, weighted by the softmax of their
    router logits, added to the token; its router is a Linear site and its experts two grouped sites."""
    block, x = _bench_moe_block(), torch.randn(1, 16, 64, dtype=BF16)
    with torch.no_grad():
        got, h = block(x).float(), block.norm(x).reshape(-1, 64)
        weights, chosen = block.router(h).topk(2, dim=-1)
        want = x.float().reshape(-1, 64).clone()
        for t in range(16):
            for w, g in zip(weights[t].float().softmax(-1), chosen[t]):
                y = h[t].float() @ block.gate_up.weight[g].float().t()
                want[t] += w * ((nn.functional.silu(y[:32]) * y[32:]) @ block.down.weight[g].float().t())
        linears, grouped = capture(block, (x,))
    assert float((got.reshape(-1, 64) - want).norm() / want.norm()) < 1e-2
    assert [s.name for s in linears] == ["router"] and [g.name for g in grouped] == ["gate_up", "down"]
    assert sum(grouped[0].rows) == 32 and grouped[0].rows == grouped[1].rows


# --- on the GPU (sm_90a: the grouped kernel is wgmma + TMA) --------------------------------------------
def _sm90() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90a GPU (H100/H200)")


def _close(got, want, rows=None, limit=2e-2) -> bool:
    got, want = got.float()[:rows], want.float()[:rows]
    return float((got - want).norm() / want.norm().clamp_min(1e-30)) < limit


@pytest.mark.gpu
@pytest.mark.parametrize("bias,activation", [(False, None), (True, "relu"), (False, "swiglu")])
def test_gpu_gemmtune_path_matches_torch_path_with_empty_and_one_row_groups(bias, activation):
    _sm90()
    torch.manual_seed(0)
    module = GroupedLinear(6, 256, 192, bias=bias, activation=activation, device="cuda", dtype=BF16)
    rows = (0, 1, 130, 0, 1, 77)
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    x = torch.randn(sum(rows), 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        want = module(x, offs)
        module.use_gemmtune = True
        got = module(x, offs)
    assert got.shape == want.shape == (sum(rows), 192) and _close(got, want)


def _moe(tokens: int = 512):
    _sm90()
    block = _bench_moe_block(1024, 512, 8, 2).cuda()
    return block, torch.randn(1, tokens, 1024, device="cuda", dtype=BF16)


@pytest.mark.gpu
def test_gpu_optimized_moe_block_routes_only_where_faster_matches_and_reloads(tmp_path):
    model, x = _moe()
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        want = model(x)
        report = optimize(model, (x,), budget=0, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", progress=False)
        assert len(report.grouped) == 2 and all(p.timing.torch_s and p.timing.gemmtune_s for p in report.grouped), \
            report.table()
        for p in report.grouped:  # routed: faster alone, or the whole block faster with every site routed
            assert p.routed == model.get_submodule(p.site.name).use_gemmtune, report.table()
            assert not p.routed or p.timing.gemmtune_faster or p.reason.startswith("routed with every"), report.table()
        assert report.model_after_s <= report.model_before_s, report.table()
        assert _close(model(x), want)
        started = time.monotonic()
        again = optimize(fresh, (x,), budget=600, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite", progress=False)
        assert time.monotonic() - started < 10 and again.reloaded
        assert [fresh.get_submodule(p.site.name).use_gemmtune for p in again.grouped] == [p.routed for p in report.grouped]
        assert _close(fresh(x), want)


@dataclass(frozen=True)
class EverySite(GpuBackend):
    """Times each site as the GPU says but routes every one (gemmtune 'faster', the model the same either way):
    the tests below are of a routed block's compile and capture, not of this GPU's decision."""

    def time_site(self, site):
        t = super().time_site(site)
        return SiteTiming(t.gemmtune_s, t.gemmtune_s * 2 if t.gemmtune_s else None, t.error)

    def time_grouped(self, site, config):
        t = super().time_grouped(site, config)
        return SiteTiming(t.gemmtune_s, t.gemmtune_s * 2 if t.gemmtune_s else None, t.error)

    def time_model(self, model, inputs) -> float:
        return 1e-3


@pytest.mark.gpu
def test_gpu_routed_moe_block_compiles_whole_and_replays_a_cuda_graph_after_its_routing_changes(tmp_path):
    model, x = _moe()
    with torch.no_grad():
        want = model(x)
        report = optimize(model, (x,), budget=0, plan=tmp_path / "p.json", db=tmp_path / "db.sqlite",
                          backend=EverySite(), progress=False)
        assert all(p.routed for p in report.grouped) and model.gate_up.use_gemmtune and model.down.use_gemmtune
        assert _close(model(x), want)
        assert _close(torch.compile(model, fullgraph=True)(x), want)
        static = x.clone()
        model(static)  # warm: kernels built and bound before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(static)
        other = torch.randn_like(x)  # other tokens: other experts, other offsets (on the device only)
        _, _, offs_before = model.route(model.norm(x).reshape(-1, 1024))
        _, _, offs_after = model.route(model.norm(other).reshape(-1, 1024))
        assert not torch.equal(offs_before, offs_after)
        static.copy_(other)
        graph.replay()
        torch.cuda.synchronize()
        for m in (model.gate_up, model.down):
            m.use_gemmtune = False
        assert _close(out, model(other))


@pytest.mark.gpu
def test_gpu_optimize_tunes_grouped_sites_in_its_database_within_the_budget(tmp_path):
    """A budget with grouped sites: grouped trials in optimize()'s database (not the default one), each routed
    module running the fastest config of its key there, the whole within the budget and a little more (worker
    start, compiles of the timing after)."""
    import sqlite3

    from gemmtune.grouped.tuned import tuned_config
    from gemmtune.torch.optimize_grouped import config_text

    model, x = _moe()
    db = tmp_path / "db.sqlite"
    with torch.no_grad():
        want = model(x)
        started = time.monotonic()
        report = optimize(model, (x,), budget=40, plan=tmp_path / "p.json", db=db, backend=EverySite(), progress=False)
        assert time.monotonic() - started < 40 + 120, report.table()
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM grouped_trials WHERE status = 'ok'").fetchone()[0] >= 2
        for p in report.grouped:
            module = model.get_submodule(p.site.name)
            assert module.use_gemmtune and module.gemmtune_config == config_text(p.config)
            assert p.config == tuned_config(p.site.spec, torch.cuda.current_device(), db).to_json()
        assert _close(model(x), want)
