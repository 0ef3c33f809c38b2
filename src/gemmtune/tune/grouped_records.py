"""The records of a grouped-GEMM tune (issue 69): what a tuned config is filed under, where it ran, what came of it.

A grouped spec fixes total_m (a's rows), but a model calls the same expert weights with a different total
every step; the config a call should use depends on the shape of the weights and on how many rows the groups
hold. So a tuned config is filed under a GroupedKey: everything of the spec but total_m, plus the mean rows per
group rounded to a power of two (distribution.rows_bucket). A tune's context adds the exact group sizes it ran
on, the GPU and versions: a re-run of the same command resumes that context.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..grouped.config import GroupedConfig
from ..grouped.distribution import rows_bucket
from ..grouped.spec import GroupedSpec
from ..spec import stable_hash
from .trial import Environment, Status


@dataclass(frozen=True, order=True)
class GroupedKey:
    """What gemmtune.torch.grouped_mm looks a tuned config up by (all of GroupedSpec but total_m, plus the
    bucket of mean rows per group)."""

    groups: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    scaling: str
    layout: str
    epilogue: str
    swiglu: bool
    rows_bucket: int

    @staticmethod
    def of(spec: GroupedSpec) -> "GroupedKey":
        return GroupedKey(spec.groups, spec.n, spec.k, spec.dtype, spec.out_dtype, spec.scaling, spec.layout,
                          str(spec.epilogue), spec.swiglu, rows_bucket(spec.total_m, spec.groups))

    def to_json(self) -> dict:
        return {"groups": self.groups, "n": self.n, "k": self.k, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "scaling": self.scaling, "layout": self.layout, "epilogue": self.epilogue, "swiglu": self.swiglu,
                "rows_bucket": self.rows_bucket}

    def hash(self) -> str:
        return stable_hash(self.to_json())

    def describe(self) -> str:
        epilogue = "" if self.epilogue == "none" else f" {self.epilogue}"
        return (f"G={self.groups} N={self.n} K={self.k} {self.dtype}{epilogue}"
                f"{' swiglu' if self.swiglu else ''} {self.layout}, ~{self.rows_bucket} rows/group")


@dataclass(frozen=True)
class GroupedContext:
    """One tune: the spec, the exact group sizes, the GPU and versions, the generator's version."""

    spec: GroupedSpec
    rows: tuple[int, ...]
    environment: Environment
    family_version: str

    @property
    def key(self) -> GroupedKey:
        return GroupedKey.of(self.spec)

    @property
    def flops(self) -> int:
        return 2 * sum(self.rows) * self.spec.weight_rows * self.spec.k

    def context_hash(self) -> str:
        return stable_hash({"key": self.key.to_json(), "total_m": self.spec.total_m, "rows": list(self.rows),
                            "env": self.environment.to_json(), "version": self.family_version})


@dataclass(frozen=True)
class GroupedTrial:
    """One config measured (or failed), with torch's call (torch._grouped_mm; fp8: torch_op) timed in the same
    rounds. Seconds."""

    config: GroupedConfig
    status: Status
    median_s: float | None = None
    samples_s: tuple[float, ...] = ()
    torch_median_s: float | None = None  # None: not timed (torch lacks the op for this spec, or it failed)
    torch_samples_s: tuple[float, ...] = ()
    error: str = ""
    torch_op: str = ""  # the torch call timed beside ours, in words (fp8: which one, and how its scales were given)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and self.median_s is not None

    @property
    def speedup(self) -> float | None:
        """torch's time over ours (above 1: ours is faster): torch._grouped_mm for 16-bit inputs, `torch_op` for fp8."""
        return self.torch_median_s / self.median_s if self.ok and self.torch_median_s else None


def config_from_json(data: dict) -> GroupedConfig:
    return GroupedConfig(**data)
