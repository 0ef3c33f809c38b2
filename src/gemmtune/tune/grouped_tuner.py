"""The grouped-GEMM tune (issue 69): every candidate of grouped.config.candidates for one spec and one set of
group sizes, measured through a GroupedMeasurer (the GPU worker, or a fake in tests), each trial recorded as it
comes. The candidates are few (a dozen), so no search strategy: the first `limit` of them, in the order
candidates() gives (the default first). Configs the context already holds are not measured again, so a
re-run resumes, and a finished tune re-run measures nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from ..errors import SpecError
from ..grouped.config import GroupedConfig, candidates
from ..grouped.render import VERSION
from ..grouped.spec import GroupedSpec
from ..spec import GemmSpec
from .grouped_db import GroupedTuningDB
from .grouped_records import GroupedContext, GroupedTrial
from .trial import Environment


class GroupedMeasurer(Protocol):
    environment: Environment

    def measure(self, spec: GroupedSpec, rows: tuple[int, ...], config: GroupedConfig) -> GroupedTrial: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GroupedProgress:
    done: int  # trials of the context so far, earlier runs' included
    total: int  # candidates this tune covers
    trial: GroupedTrial
    new: bool  # measured now (False: found in the database)


@dataclass(frozen=True)
class GroupedTuneOutcome:
    context: GroupedContext
    trials: tuple[GroupedTrial, ...]  # one per candidate, in candidate order
    new_trials: int

    @property
    def ranked(self) -> list[GroupedTrial]:
        """The verified trials, fastest first."""
        return sorted((t for t in self.trials if t.ok), key=lambda t: t.median_s)

    @property
    def best(self) -> GroupedTrial | None:
        ranked = self.ranked
        return ranked[0] if ranked else None

    @property
    def failures(self) -> int:
        return sum(not t.ok for t in self.trials)


def spec_for_rows(rows: tuple[int, ...], n: int, k: int, dtype: str = "bf16", epilogue: str = "none", *,
                  out_dtype: str = "", scaling: str = "none") -> GroupedSpec:
    """The contiguous spec of these group sizes: G = len(rows), total_m = sum(rows); fp8 (e4m3, e5m2): D's type
    (out_dtype, "" for bf16) and the scaling (tensor, rowwise, block)."""
    if not rows or not sum(rows):
        raise SpecError("a grouped tune needs at least one group with rows")
    return GroupedSpec(len(rows), sum(rows), n, k, dtype, epilogue, out_dtype=out_dtype, scaling=scaling)


def spec_for_gemm(gemm: GemmSpec) -> tuple[GroupedSpec, tuple[int, ...]]:
    """An fp8 GemmSpec as the one-group grouped spec and rows it is tuned on: the spec gemmtune.torch.scaled_mm
    builds for (M, K) x (K, N) operands, so the tuned config is the one it then reads (grouped/tuned.py)."""
    from ..grouped.as_gemm import grouped_spec

    return grouped_spec(gemm), (gemm.m,)


def tune_grouped(spec: GroupedSpec, rows: tuple[int, ...], measurer: GroupedMeasurer, db: GroupedTuningDB,
                 limit: int | None = None, on_trial: Callable[[GroupedProgress], None] | None = None) -> GroupedTuneOutcome:
    """Measure the first `limit` candidates (all: None) of `spec` on `rows`, skipping those recorded before."""
    if len(rows) != spec.groups or sum(rows) > spec.total_m:
        raise SpecError(f"{len(rows)} group sizes summing to {sum(rows)} for {spec.groups} groups of "
                        f"{spec.total_m} rows")
    if limit is not None and limit < 1:
        raise SpecError(f"--candidates must be at least 1, got {limit}")
    configs = candidates(spec)[:limit]
    context = GroupedContext(spec, tuple(rows), measurer.environment, VERSION)
    known = {t.config: t for t in db.results(context)}
    trials, new = [], 0
    for config in configs:
        trial = known.get(config)
        if trial is None:
            trial = measurer.measure(spec, tuple(rows), config)
            db.record(context, trial)
            new += 1
        trials.append(trial)
        if on_trial is not None:
            on_trial(GroupedProgress(len(trials), len(configs), trial, config not in known))
    return GroupedTuneOutcome(context, tuple(trials), new)
