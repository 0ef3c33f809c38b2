"""TVM: its default GPU schedule (dlight, no tuning), lowered to gemmtune's KernelSource, then
NVRTC-compiled, verified and timed like gemmtune's own kernels (tvm/rows.py). MetaSchedule tuning
takes minutes to hours, so it is `gemmtune tune --backend tvm`, not a bench row."""
from __future__ import annotations

from dataclasses import dataclass

from ..bench import BenchRow
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import module_missing


@dataclass(frozen=True)
class TvmDlight:
    name: str = "tvm"

    def available(self, spec: GemmSpec) -> str | None:
        from ..errors import ConfigError
        from ..tvm.workloads import check_supported

        try:
            check_supported(spec)
        except ConfigError as err:
            return str(err)
        return module_missing("tvm", "tvm")

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        from ..tvm.rows import schedule_row

        return schedule_row(spec, "dlight", arch, protocol, on_gpu=True, label="TVM dlight")


BASELINE = TvmDlight()
