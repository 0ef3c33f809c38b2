"""Group sizes of a grouped GEMM: given (`--rows 700,120,64`), or routed from tokens (balanced or Zipf, seeded),
and the coarse bucket a tuned config is filed under (mean rows per group, rounded to a power of two).

The bucket is what gemmtune.torch.grouped_mm can know without reading offs on the host (a sync): a's rows
(total_m) over the groups. Tuning and lookup both use it, so a config tuned on one routing serves every call
whose groups average about as many rows.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..errors import SpecError

ROUTINGS = ("balanced", "zipf")
ZIPF_EXPONENT = 1.2  # as bench/bench_moe.py: a few experts take most tokens, many take a handful
DEFAULT_SEED = 2026


@dataclass(frozen=True)
class Routing:
    """`tokens` tokens each sent to `topk` of `experts` experts, spread `routing`ly (seeded)."""

    tokens: int
    experts: int
    topk: int
    routing: str = "balanced"
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        for name in ("tokens", "experts", "topk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"routing: {name}={value!r} must be an integer >= 1")
        if self.topk > self.experts:
            raise SpecError(f"routing: topk={self.topk} exceeds experts={self.experts}")
        if self.routing not in ROUTINGS:
            raise SpecError(f"routing '{self.routing}' unknown; use {' or '.join(ROUTINGS)}")

    def rows(self) -> tuple[int, ...]:
        return routed_rows(self.experts, self.tokens * self.topk, self.routing, self.seed)


def routed_rows(experts: int, rows: int, routing: str, seed: int = DEFAULT_SEED) -> tuple[int, ...]:
    """`rows` spread over `experts`: evenly (the remainder one each to the first experts), or in proportion
    to 1 / rank^ZIPF_EXPONENT over a permutation of the experts drawn from `seed`, summing to `rows`."""
    if routing == "balanced":
        share, extra = divmod(rows, experts)
        return tuple(share + (e < extra) for e in range(experts))
    if routing != "zipf":
        raise SpecError(f"routing '{routing}' unknown; use {' or '.join(ROUTINGS)}")
    order = list(range(experts))
    random.Random(seed).shuffle(order)
    weights = [1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(experts)]
    scale = rows / sum(weights)
    counts = [int(w * scale) for w in weights]
    for rank in range(rows - sum(counts)):  # what rounding down left, to the most favoured experts
        counts[rank % experts] += 1
    by_expert = [0] * experts
    for rank, expert in enumerate(order):
        by_expert[expert] = counts[rank]
    return tuple(by_expert)


def parse_rows(text: str) -> tuple[int, ...]:
    """'700,120,64' -> (700, 120, 64): each group's rows (0 allowed), at least one, not all empty."""
    words = [w.strip() for w in text.split(",")]
    if not words or not all(w.isdigit() for w in words):
        raise SpecError(f"--rows '{text}': give each group's rows as integers >= 0, comma-separated (700,120,64)")
    rows = tuple(int(w) for w in words)
    if not sum(rows):
        raise SpecError(f"--rows '{text}': every group is empty; nothing to multiply")
    return rows


def rows_bucket(total_m: int, groups: int) -> int:
    """Mean rows per group (total_m / groups) rounded to the nearest power of two in log scale (at least 1):
    the coarse feature of the group-size distribution a tuned config is filed and looked up under."""
    if total_m < 1 or groups < 1:
        raise SpecError(f"rows bucket of {total_m} rows over {groups} groups: both must be >= 1")
    return 1 << max(0, round(math.log2(total_m / groups)))


def describe(rows: tuple[int, ...]) -> str:
    """A few words on a distribution: groups, rows, mean, busiest, empty."""
    return (f"{len(rows)} groups, {sum(rows)} rows (mean {sum(rows) / len(rows):.1f}, busiest {max(rows)}, "
            f"{rows.count(0)} empty)")
