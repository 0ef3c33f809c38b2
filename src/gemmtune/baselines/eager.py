"""torch eager: cuBLAS's GEMM, then each epilogue op as its own torch op (what an unfused model runs)."""
from __future__ import annotations

from dataclasses import dataclass

from ..bench import BenchRow
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import module_missing


@dataclass(frozen=True)
class Eager:
    name: str = "eager"

    def available(self, spec: GemmSpec) -> str | None:
        if spec.epilogue.is_identity:
            return "no epilogue: torch eager is the cuBLAS row"
        return module_missing("torch", "torch")

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        from ..bench import _row_from_measurement
        from ..baseline import torch_eager_measurement
        from ..errors import GemmtuneError

        label = f"torch.mm + {' + '.join(spec.epilogue.ops)} (unfused)"
        try:
            m = torch_eager_measurement(spec, protocol)
        except GemmtuneError as err:
            return BenchRow("torch eager", label, None, None, None, type(err).__name__, str(err))
        return _row_from_measurement("torch eager", label, spec, m, None)


BASELINE = Eager()
