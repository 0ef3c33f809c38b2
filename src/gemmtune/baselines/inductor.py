"""torch.compile max-autotune of the function an eager model runs (torch.mm, then each epilogue
op): inductor picks among its Triton templates and cuBLAS, and fuses the epilogue where it can.
The first call's time (tracing, autotuning, compiling) is reported as compile time.

The mode is "max-autotune-no-cudagraphs": the same autotuning as "max-autotune" without wrapping the
call in a CUDA graph, whose tree copies every non-static input into its own buffer on each replay
(three 32 MB copies at 4096³ fp16), which the timing would count as GEMM time. CUDA graphs save
launch overhead, which the protocol already keeps out of the timed section."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ..bench import BenchRow
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import BaselineResult, module_missing, result_row

MODE = "max-autotune-no-cudagraphs"


def eager_function(torch: Any, spec: GemmSpec) -> Callable[[Any, Any, dict], Any]:
    """(op(A), op(B), operands) -> D, as torch ops; the function torch.compile is given."""
    from ..baseline import EAGER_OPS, _mm

    ops = [EAGER_OPS[name] for name in spec.epilogue.ops]

    def gemm(a: Any, b: Any, x: dict) -> Any:
        v = _mm(torch, spec, a, b)
        for op in ops:
            v = op(torch, v, x)
        return v
    return gemm


@dataclass(frozen=True)
class Inductor:
    name: str = "inductor"

    def available(self, spec: GemmSpec) -> str | None:
        return module_missing("torch", "torch")

    def run(self, spec: GemmSpec, protocol: TimingProtocol) -> BaselineResult:
        from ..baseline import _fp32_precision, _operands, _torch, check_and_time, prepare

        torch = _torch()
        prepared = prepare(spec)
        a, b = _operands(spec, prepared.gpu)
        extras = {k: v for k, v in prepared.gpu.items() if k not in ("A", "B")}
        torch._dynamo.reset()  # each spec compiles afresh: its compile time is its own
        compiled = torch.compile(eager_function(torch, spec), mode=MODE, dynamic=False)
        started = time.perf_counter()
        with _fp32_precision(torch, tf32=spec.dtype == "tf32"):  # inductor reads the setting as it compiles
            compiled(a, b, extras)
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - started
        label = f"torch.compile {MODE}" + ("" if spec.epilogue.is_identity else f" of mm + {spec.epilogue}")
        # Inductor rounds the mm to D's type before a fused epilogue reads it, like eager does.
        measured, verdict = check_and_time(prepared, lambda: compiled(a, b, extras), protocol, "inductor",
                                           1 + len(spec.epilogue.ops), label)
        return BaselineResult(label, measured, verdict, compile_s)

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        return result_row("inductor", "torch.compile max-autotune", spec, lambda: self.run(spec, protocol))


BASELINE = Inductor()
