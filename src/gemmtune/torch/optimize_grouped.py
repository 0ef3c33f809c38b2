"""optimize()'s grouped sites: each GroupedLinear (an MoE layer's experts) captured with the offsets the example
run gave it, tuned within optimize()'s budget, timed against torch's grouped GEMM on those offsets, planned, saved
and reloaded.

A grouped site is one GroupedLinear: its GroupedSpec (groups, total_m, N, K, dtype, bias/relu/gelu epilogue or
swiglu) and the rows each group held in the example forward (the group-size distribution its tune and timing use).
Tuning: each distinct (spec, rows) gets a share of the budget in proportion to its FLOPs x calls, as the Linear
sites' GEMMs do (split_budget), spent by the grouped tuner (tune.grouped_tuner.tune_grouped: candidates in order,
the default first, at least that one) in the database optimize() was given. The config planned for a site is
that database's fastest for the spec's key (grouped.tuned.tuned_config with its path: no process-wide state
changes), else the default; the module then runs that config (GroupedLinear.gemmtune_config), eagerly and under
torch.compile. torch's side is what the module runs otherwise (torch_grouped_linear). Routing a site sets the
module's `use_gemmtune` and config (and `torch_under_compile` where its kernel lost inside CUDA graphs); the
end-to-end choice among unrouted / faster alone / every site is optimize_model's, over Linear and grouped sites
together.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import GemmtuneError, SpecError
from ..grouped.spec import GroupedSpec, group_sizes
from ..input_files import InputFileError
from .experts import GroupedLinear, torch_grouped_linear
from .site_timing import SiteTiming

__all__ = ["GroupedSite", "GroupedPlan", "GroupedTrace", "GroupedTune", "grouped_spec", "plan_grouped", "set_grouped",
           "check_grouped_fits", "time_grouped", "planned_config", "grouped_tunes", "split_budget", "tune_within",
           "run_grouped_tunes", "config_text"]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# --- the site ---------------------------------------------------------------------------------------
def _spec_json(spec: GroupedSpec) -> dict:
    return {"groups": spec.groups, "total_m": spec.total_m, "n": spec.n, "k": spec.k, "dtype": spec.dtype,
            "epilogue": str(spec.epilogue), "swiglu": spec.swiglu}


def _spec_from_json(data: dict) -> GroupedSpec:
    return GroupedSpec(data["groups"], data["total_m"], data["n"], data["k"], data["dtype"], data["epilogue"],
                       data["swiglu"])


@dataclass(frozen=True)
class GroupedSite:
    """One GroupedLinear of the model: the grouped GEMM it runs, the rows each group held in the example run,
    calls per forward and the module name."""

    name: str
    spec: Optional[GroupedSpec]  # None: not a grouped GEMM gemmtune runs (see note)
    rows: tuple[int, ...] = ()
    calls: int = 1
    routable: bool = True
    note: str = ""

    @property
    def activation(self) -> Optional[str]:
        """As gemmtune.torch.grouped_mm and GroupedLinear take it: swiglu, relu, gelu or None."""
        if self.spec is None:
            return None
        if self.spec.swiglu:
            return "swiglu"
        return next((op for op in self.spec.epilogue.ops if op in ("relu", "gelu")), None)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The cumulative row ends (offs) of `rows`."""
        return tuple(int(end) for end in np.cumsum(self.rows, dtype=np.int64))

    def short(self) -> str:
        """One cell of the report: groups, total_m×N×K, dtype, epilogue, and the spread of rows per group."""
        if self.spec is None:
            return "—"
        s, empty = self.spec, sum(r == 0 for r in self.rows)
        epi = " swiglu" if s.swiglu else ("" if s.epilogue.is_identity else f" {s.epilogue}")
        spread = f"rows {min(self.rows)}–{max(self.rows)}" + (f", {empty} empty" if empty else "") if self.rows else ""
        return f"{s.groups} groups {s.total_m}x{s.n}x{s.k} {s.dtype}{epi} ({spread})"

    def to_json(self) -> dict:
        return {"name": self.name, "grouped_spec": _spec_json(self.spec) if self.spec else None, "rows": list(self.rows),
                "calls": self.calls, "routable": self.routable, "note": self.note}

    @staticmethod
    def from_json(data: dict) -> "GroupedSite":
        spec = _spec_from_json(data["grouped_spec"]) if data["grouped_spec"] else None
        return GroupedSite(data["name"], spec, tuple(int(r) for r in data["rows"]), data["calls"], data["routable"],
                           data["note"])


@dataclass(frozen=True)
class GroupedPlan:
    """A grouped site's kernel config (JSON), both times on its rows, and the decision."""

    site: GroupedSite
    config: dict
    timing: SiteTiming
    routed: bool
    reason: str

    def to_json(self) -> dict:
        return {**self.site.to_json(), "config": self.config, **self.timing.decision_json(self.routed, self.reason)}

    @staticmethod
    def from_json(data: dict) -> "GroupedPlan":
        return GroupedPlan(GroupedSite.from_json(data), data["config"], SiteTiming.from_json(data), data["routed"],
                           data["reason"])


# --- capture ----------------------------------------------------------------------------------------
def grouped_spec(x: torch.Tensor, module: GroupedLinear) -> GroupedSpec:
    """The spec gemmtune.torch.grouped_mm builds its kernel for when `module` runs on `x`, or a SpecError
    saying why it would not run it."""
    if x.dtype not in _DTYPES:
        raise SpecError(f"{x.dtype} tokens (gemmtune's grouped kernel takes bfloat16, float16)")
    if x.dim() != 2 or not x.is_contiguous():
        raise SpecError(f"tokens {tuple(x.shape)} must be one contiguous (total_m, K) tensor")
    act = module.activation
    ops = (["bias"] if module.bias is not None else []) + ([act] if act in ("relu", "gelu") else [])
    return GroupedSpec(module.groups, x.shape[0], module.out_features, module.in_features, _DTYPES[x.dtype],
                       "+".join(ops) or "none", act == "swiglu")


@dataclass
class GroupedTrace:
    """Each GroupedLinear's calls in one forward: (spec or why not, rows per group)."""

    calls: dict = field(default_factory=lambda: defaultdict(list))

    def hook(self, name: str) -> Callable:
        def hook(module: GroupedLinear, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
            x = args[0] if args else kwargs["x"]
            offs = args[1] if len(args) > 1 else kwargs["offs"]
            try:
                spec: Any = grouped_spec(x, module)
            except GemmtuneError as err:
                spec = str(err)
            sizes = group_sizes(offs.detach().cpu().numpy(), x.shape[0])  # a host read: capture only
            self.calls[name].append((spec, tuple(int(r) for r in sizes)))
        return hook

    def register(self, model: nn.Module) -> list:
        return [module.register_forward_hook(self.hook(name), with_kwargs=True)
                for name, module in model.named_modules() if isinstance(module, GroupedLinear)]

    def sites(self) -> tuple[GroupedSite, ...]:
        return tuple(_site(name, calls) for name, calls in self.calls.items())


def _site(name: str, calls: list) -> GroupedSite:
    (spec, rows), count = calls[0], len(calls)
    if isinstance(spec, str):
        return GroupedSite(name, None, rows, count, routable=False, note=f"not a gemmtune grouped GEMM: {spec}")
    if any(s != spec for s, _ in calls):
        return GroupedSite(name, spec, rows, count, routable=False, note="called with several shapes in one forward")
    if any(r != rows for _, r in calls):
        return GroupedSite(name, spec, rows, count, note="timed on the first call's offsets of several")
    return GroupedSite(name, spec, rows, count)


# --- tuning within the budget -------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupedTune:
    """One grouped tune of optimize()'s budget: a site's spec on the rows it held, the FLOPs of a forward of
    the sites that share them (x calls) and the seconds it may take."""

    spec: GroupedSpec
    rows: tuple[int, ...]
    flops: float
    seconds: float = 0.0
    label: str = ""


def site_flops(site: GroupedSite) -> float:
    """The FLOPs of the site's calls in one forward: 2 x the rows the groups held x the weight's rows x K."""
    return 2.0 * sum(site.rows) * site.spec.weight_rows * site.spec.k * site.calls


def grouped_tunes(sites: Sequence[GroupedSite]) -> list[GroupedTune]:
    """The distinct (spec, rows) of the routable sites, each with the FLOPs of every site that has them."""
    flops: dict[tuple, float] = defaultdict(float)
    labels: dict[tuple, str] = {}
    for site in sites:
        if site.routable and sum(site.rows):
            flops[(site.spec, site.rows)] += site_flops(site)
            labels.setdefault((site.spec, site.rows), f"{site.name}: {site.short()}")
    return [GroupedTune(spec, rows, f, label=labels[(spec, rows)]) for (spec, rows), f in flops.items()]


def split_budget(budget_s: float, linear_flops: float, tunes: Sequence[GroupedTune]) -> tuple[float, list[GroupedTune]]:
    """(the Linear sites' seconds, each grouped tune with its seconds): `budget_s` shared in proportion to FLOPs."""
    total = linear_flops + sum(t.flops for t in tunes)
    if total <= 0:
        return budget_s, list(tunes)
    return budget_s * linear_flops / total, [replace(t, seconds=budget_s * t.flops / total) for t in tunes]


def tune_within(tune: GroupedTune, measurer: Any, db: Any, on_trial: Optional[Callable[[Any], None]] = None,
                clock: Callable[[], float] = time.monotonic) -> Any:
    """The grouped tuner on `tune`'s spec and rows, one more candidate at a time (its default first), until its
    seconds are spent or every candidate is measured: at least the default. A tune of the same context earlier
    (this database) counts: its configs are not measured again. Returns the last GroupedTuneOutcome."""
    from ..grouped.config import candidates
    from ..tune.grouped_tuner import tune_grouped

    started, total, outcome = clock(), len(candidates(tune.spec)), None
    for limit in range(1, total + 1):
        report = (lambda p: on_trial(p) if p.done == limit else None) if on_trial is not None else None
        outcome = tune_grouped(tune.spec, tune.rows, measurer, db, limit, report)
        if clock() - started >= tune.seconds:
            break
    return outcome


class _GroupedBars:
    """The project's trial progress bar (cli.tune_cmds.trial_progress, as tune-many's per-shape bars): one task a
    grouped tune, candidates measured of all, failures, the best so far against torch."""

    def __init__(self, show: bool):
        from ..cli.tune_cmds import trial_progress

        self.bar = trial_progress() if show else None
        if self.bar is not None:
            self.bar.start()

    def start(self, tune: GroupedTune, share: float) -> Optional[Callable[[Any], None]]:
        if self.bar is None:
            return None
        from ..grouped.config import candidates

        task = self.bar.add_task(f"{tune.label} (grouped, {100 * share:.1f}%)", total=len(candidates(tune.spec)),
                                 failures=0, best="—")
        state = {"failures": 0, "best": None}

        def show(progress: Any) -> None:
            trial = progress.trial
            state["failures"] += not trial.ok
            if trial.ok and (state["best"] is None or trial.median_s < state["best"].median_s):
                state["best"] = trial
            best = state["best"]
            text = "—" if best is None else f"{best.median_s * 1e6:.1f} µs" + (
                f", {best.speedup:.2f}x torch" if best.speedup else "")
            self.bar.update(task, completed=progress.done, failures=state["failures"], best=text)
        return show

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def run_grouped_tunes(tunes: Sequence[GroupedTune], measurer: Any, db_path: Path, show: bool,
                      clock: Callable[[], float] = time.monotonic) -> list[Any]:
    """Each tune within its seconds (tune_within), its trials in the grouped_trials table of `db_path`; the
    measurer is closed after. Returns the outcomes."""
    from ..tune.grouped_db import GroupedTuningDB

    total = sum(t.seconds for t in tunes) or 1.0
    bars, outcomes = _GroupedBars(show), []
    try:
        with GroupedTuningDB(db_path) as db:
            for tune in tunes:
                outcomes.append(tune_within(tune, measurer, db, bars.start(tune, tune.seconds / total), clock))
    finally:
        bars.close()
        measurer.close()
    return outcomes


# --- planning ---------------------------------------------------------------------------------------
class GroupedBackend(Protocol):
    def grouped_config(self, spec: GroupedSpec, db_path: Path, tuned: bool) -> dict: ...
    def install_grouped(self, spec: GroupedSpec, config: dict) -> None: ...
    def time_grouped(self, site: GroupedSite, config: dict) -> SiteTiming: ...
    def tune_grouped(self, tunes: Sequence[GroupedTune], db_path: Path, show: bool) -> None: ...


def config_text(config: dict) -> str:
    """A config's JSON as GroupedLinear.gemmtune_config and grouped_linear take it."""
    return json.dumps(config, sort_keys=True)


def plan_grouped(site: GroupedSite, backend: GroupedBackend, memo: dict, db_path: Path, tuned: bool) -> GroupedPlan:
    """Time one grouped site on its rows with its planned config (the same spec and rows are not timed again)
    and decide: gemmtune only where faster."""
    if not site.routable:
        return GroupedPlan(site, {}, SiteTiming(None, None), False, site.note)
    key = (site.spec, site.rows)
    if key not in memo:
        try:
            config = backend.grouped_config(site.spec, db_path, tuned)
            backend.install_grouped(site.spec, config)
            memo[key] = (config, backend.time_grouped(site, config))
        except GemmtuneError as err:
            memo[key] = ({}, SiteTiming(None, None, f"no kernel: {err}"))
    config, timing = memo[key]
    reason = timing.error or ("gemmtune faster" if timing.gemmtune_faster else "torch faster")
    return GroupedPlan(site, config, timing, timing.gemmtune_faster, reason + (f"; {site.note}" if site.note else ""))


def set_grouped(module: GroupedLinear, plan: GroupedPlan, routed: bool) -> None:
    """Route the module to gemmtune with the plan's config (torch's path under torch.compile where its kernel
    lost in CUDA graphs), or back."""
    module.use_gemmtune = routed
    module.torch_under_compile = routed and not plan.timing.gemmtune_faster
    module.gemmtune_config = config_text(plan.config) if routed and plan.config else None


def check_grouped_fits(model: nn.Module, plans: Sequence[GroupedPlan], path: Path) -> None:
    """Each routed grouped site of the plan is a GroupedLinear of the model with the plan's sizes, and its config
    is one today's generator takes for the spec (one line if not)."""
    from ..grouped.config import rejections
    from ..tune.grouped_records import config_from_json

    modules = dict(model.named_modules())
    for plan in (p for p in plans if p.routed):
        spec, module = plan.site.spec, modules.get(plan.site.name)
        sizes = (spec.groups, spec.k, spec.n, plan.site.activation, spec.has_bias)
        if not isinstance(module, GroupedLinear) or (module.groups, module.in_features, module.out_features,
                                                     module.activation, module.bias is not None) != sizes:
            raise InputFileError(f"plan {path} does not fit this model: {plan.site.name} is not a GroupedLinear "
                                 f"of {spec.groups} groups {spec.k} -> {spec.n}; optimize again with another plan path")
        try:
            problems = rejections(config_from_json(plan.config), spec)
        except (TypeError, ValueError) as err:
            problems = {"config": str(err)}
        if problems:
            raise InputFileError(f"plan {path}: {plan.site.name}'s grouped config is not one this gemmtune builds "
                                 f"({'; '.join(problems.values())}): optimize again")


# --- on the GPU -------------------------------------------------------------------------------------
def _grouped_operands(site: GroupedSite, index: int) -> tuple:
    """x (total_m, K) uniform in ±1, weight (G, rows, K) in ±1/sqrt(K) as nn.Linear's, offs on the device, bias."""
    spec, kind = site.spec, _TORCH_DTYPES[site.spec.dtype]
    make = lambda *shape, scale=1.0: (torch.rand(*shape, device=f"cuda:{index}").mul_(2).sub_(1)  # noqa: E731
                                      .mul_(scale).to(kind))
    x = make(spec.total_m, spec.k)
    weight = make(spec.groups, spec.weight_rows, spec.k, scale=spec.k ** -0.5)
    offs = torch.tensor(site.offsets, device=f"cuda:{index}", dtype=torch.int32)
    return x, weight, offs, (make(spec.groups, spec.n) if spec.has_bias else None)


def time_grouped(site: GroupedSite, config: dict, index: int,
                 graph_seconds: Callable[[Callable[[], Any]], float]) -> SiteTiming:
    """GroupedLinear's gemmtune path with `config` against torch_grouped_linear on the site's rows, each checked
    (rows the groups hold) and timed by `graph_seconds` (optimize_model's: inside CUDA graphs)."""
    from ..verify import tolerance
    from .grouped_calls import grouped_linear

    x, weight, offs, bias = _grouped_operands(site, index)
    act, held, text = site.activation, sum(site.rows), config_text(config)
    ours = lambda: grouped_linear(x, weight, offs, bias, act, text)  # noqa: E731
    theirs = lambda: torch_grouped_linear(x, weight, offs, bias, act)  # noqa: E731
    got, want = ours()[:held].float(), theirs()[:held].float()
    error = float((got - want).norm() / want.norm().clamp_min(1e-30)) if held else 0.0
    roundings = 3 if act == "swiglu" else 2  # torch's chain rounds after the product, each op after it
    if not error <= 2 * tolerance(site.spec.dtype, site.spec.k, roundings=roundings):
        return SiteTiming(None, graph_seconds(theirs), f"wrong output (relative error {error:.2e})")
    return SiteTiming(graph_seconds(ours), graph_seconds(theirs))


def planned_config(spec: GroupedSpec, index: int, db_path: Path, tuned: bool) -> dict:
    """The config a site of `spec` is planned with (JSON): the fastest for the spec's key in `db_path` on GPU
    `index` (tuned: after optimize()'s tunes), else the default. The database is passed down, never made
    process-wide (grouped.tuned.use_database), so other callers' lookups are as they were."""
    from ..grouped.config import default_config
    from ..grouped.tuned import tuned_config

    found = tuned_config(spec, index, db_path) if tuned else None
    return (found or default_config(spec)).to_json()


def build_planned(spec: GroupedSpec, config: dict, index: int) -> None:
    """Build (a disk-cached compile) and keep the kernel of `config` on GPU `index`, so that the first routed
    call does not build it."""
    from ..grouped.launch import build
    from ..tune.grouped_records import config_from_json

    build(spec, config_from_json(config), index)


def gpu_tunes(tunes: Sequence[GroupedTune], index: int, db_path: Path, show: bool) -> None:
    """run_grouped_tunes with the grouped tuner's watched worker on GPU `index` (tune-grouped's measurer)."""
    from ..tune.grouped_measure import WorkerMeasurer

    from ..grouped.tuned import forget
    from .grouped_calls import forget_plans

    run_grouped_tunes(tunes, WorkerMeasurer(rounds=30, timeout_s=60.0, ordinal=index), db_path, show)
    forget()  # grouped_mm's lookups in this process (the default database's) see the new trials
    forget_plans()
