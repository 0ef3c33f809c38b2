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

    @property
    def gemmtune_faster(self) -> bool:
        return self.gemmtune_s is not None and self.torch_s is not None and self.gemmtune_s < self.torch_s
