"""SiteTiming: a site's two times inside CUDA graphs, shared by optimize()'s Linear and grouped sites."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["SiteTiming"]


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
