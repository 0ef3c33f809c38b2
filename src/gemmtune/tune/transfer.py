"""Transfer: a new shape starts its search from the best configs of the nearest tuned shapes.

Nearness is the Euclidean distance of log2(M, N, K) among shapes tuned on the same device (name,
cc, SM count; any driver) and family, with a step for a different layout, epilogue or gating. Only the
configs that are valid candidates for the new shape are kept.
"""
from __future__ import annotations

import math
from typing import Any

from ..spec import GemmSpec
from .db import TuningDB
from .space import CandidateSet
from .trial import TuneContext

MISMATCH_STEP = 1.0  # a different layout, epilogue or gating counts like a factor of two in one dimension


def shape_distance(a: GemmSpec, b: GemmSpec) -> float:
    dims = sum((math.log2(x) - math.log2(y)) ** 2 for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k)))
    mismatch = (a.layout != b.layout) + (str(a.epilogue) != str(b.epilogue)) + (a.gated != b.gated)
    return math.sqrt(dims) + MISMATCH_STEP * mismatch


def transfer_seeds(db: TuningDB, context: TuneContext, candidates: CandidateSet, shapes: int = 3,
                   per_shape: int = 2) -> list[Any]:
    """Best configs of the `shapes` nearest tuned specs (nearest first), valid for this one."""
    env = context.environment
    best_by_spec: dict[GemmSpec, list[Any]] = {}
    for ranked in db.ranked_for_device(context.family, env.device_name):
        other = ranked.context
        if other.spec == context.spec or other.spec.dtype != context.spec.dtype:
            continue
        if (other.environment.cc, other.environment.sm_count) != (env.cc, env.sm_count):
            continue
        best_by_spec.setdefault(other.spec, []).append(ranked.result.config)
    nearest = sorted(best_by_spec, key=lambda s: (shape_distance(s, context.spec), s))[:shapes]
    seeds: list[Any] = []
    for spec in nearest:
        valid = [c for c in best_by_spec[spec] if candidates.position_of(c) is not None]
        seeds += [c for c in valid[:per_shape] if c not in seeds]
    return seeds
