"""cuBLAS through torch.mm in the spec's types (fp32: TF32 off); the GEMM alone (baseline.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ..bench import BenchRow, bench_cublas
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import module_missing


@dataclass(frozen=True)
class Cublas:
    name: str = "cublas"

    def available(self, spec: GemmSpec) -> str | None:
        return module_missing("torch", "torch")

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        return bench_cublas(spec, protocol)


BASELINE = Cublas()
