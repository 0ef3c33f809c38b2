"""SiteTiming: a site's two times inside CUDA graphs, shared by optimize()'s Linear, grouped and fused sites; and
KernelPlan, the plan of a site one GEMM kernel runs (a Linear's, a fused site's)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

from ..errors import GemmtuneError

__all__ = ["SiteTiming", "KernelPlan", "timed_kernel"]


@dataclass(frozen=True)
class SiteTiming:
    """Seconds per call inside a CUDA graph: gemmtune's kernel and torch's ops (F.linear + activation, or
    torch's grouped GEMM and what follows it)."""

    gemmtune_s: Optional[float]
    torch_s: Optional[float]
    error: str = ""  # why gemmtune's side has no time (wrong output, no kernel)

    def decision_json(self, routed: bool, reason: str) -> dict:
        """The times and the decision as a plan file stores them (every site kind's plan ends with these)."""
        return {"gemmtune_s": self.gemmtune_s, "torch_s": self.torch_s, "error": self.error, "routed": routed,
                "reason": reason}

    @staticmethod
    def from_json(data: dict) -> "SiteTiming":
        return SiteTiming(data["gemmtune_s"], data["torch_s"], data.get("error", ""))

    @property
    def gemmtune_faster(self) -> bool:
        return self.gemmtune_s is not None and self.torch_s is not None and self.gemmtune_s < self.torch_s

    @property
    def verdict(self) -> str:
        """Why the site is routed or not, from the times alone."""
        return self.error or ("gemmtune faster" if self.gemmtune_faster else "torch faster")


@dataclass(frozen=True)
class KernelPlan:
    """A site's GEMM kernel (family, config JSON), both times and the decision; subclasses name the site's type
    (`site_type`: a class with to_json / from_json)."""

    site: Any
    family: str
    config: dict  # the family's Config as JSON
    timing: SiteTiming
    routed: bool
    reason: str
    site_type: ClassVar[Any] = None

    def to_json(self) -> dict:
        return {**self.site.to_json(), "family": self.family, "config": self.config,
                **self.timing.decision_json(self.routed, self.reason)}

    @classmethod
    def from_json(cls, data: dict) -> "KernelPlan":
        return cls(cls.site_type.from_json(data), data["family"], data["config"], SiteTiming.from_json(data),
                   data["routed"], data["reason"])


def timed_kernel(memo: dict, key: tuple, spec: Any, backend: Any, db_path: Any, tuned: bool,
                 time: Callable[[], SiteTiming]) -> tuple[str, dict, SiteTiming]:
    """(family, config JSON, timing) of `spec`'s kernel: planned by the backend (tuned best, else build's pick),
    installed and timed by `time` once per `key` of `memo`; no kernel is a timing with the reason."""
    if key not in memo:
        try:
            family, config = backend.config(spec, db_path, tuned)
            backend.install(spec, family, config)
            memo[key] = (family, config, time())
        except GemmtuneError as err:
            memo[key] = ("", {}, SiteTiming(None, None, f"no kernel: {err}"))
    return memo[key]
