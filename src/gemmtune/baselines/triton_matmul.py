"""Triton: a matmul autotuned over a config set per input type, with the epilogue fused at the store
(triton_kernel.py). fp32 runs IEEE fp32 products (no TF32), as the spec asks; tf32 lets tl.dot use
TF32. The autotuning time (compile + trial runs of every config) is reported as compile time."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ..bench import BenchRow
from ..spec import GemmSpec
from ..timing import TimingProtocol
from .base import BaselineResult, module_missing, result_row

PRECISION = {"fp32": "ieee", "tf32": "tf32", "fp16": "tf32", "bf16": "tf32"}  # 16-bit: ignored by tl.dot


def _epilogue_codes(spec: GemmSpec) -> dict[str, int]:
    from .triton_kernel import OP_CODES, SLOTS

    codes = [OP_CODES[op] for op in spec.epilogue.ops] + [0] * SLOTS
    bias = 1 if "bias_row" in spec.epilogue.ops else 2 if "bias_col" in spec.epilogue.ops else 0
    return {"HAS_C": spec.epilogue.reads_c, "BIAS": bias, **{f"EP{i}": codes[i] for i in range(SLOTS)}}


def _strides(spec: GemmSpec, x: dict) -> tuple[int, int, int, int]:
    """(am, ak, bk, bn) strides of op(A), op(B) over the stored row-major arrays."""
    a, b = x["A"], x["B"]
    am, ak = (a.stride(1), a.stride(0)) if spec.a_trans else (a.stride(0), a.stride(1))
    bk, bn = (b.stride(1), b.stride(0)) if spec.b_trans else (b.stride(0), b.stride(1))
    return am, ak, bk, bn


def make_launch(torch: Any, spec: GemmSpec, x: dict) -> Callable[[], Any]:
    from . import triton_kernel as tk

    kernel = tk.matmul_fp32 if spec.dtype in ("fp32", "tf32") else tk.matmul_16bit
    out_type = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[spec.out_dtype]
    d = torch.empty((spec.m, spec.n), dtype=out_type, device="cuda")
    c = x.get("C", d)  # an unused pointer argument still needs a tensor
    bias = x.get("bias", d)
    alpha, beta = float(x.get("alpha", 1.0)), float(x.get("beta", 0.0))
    strides = _strides(spec, x)
    constants = {"PRECISION": PRECISION[spec.dtype], **_epilogue_codes(spec)}

    def grid(meta: dict) -> tuple[int]:
        return (triton_cdiv(spec.m, meta["BLOCK_M"]) * triton_cdiv(spec.n, meta["BLOCK_N"]),)

    def launch() -> Any:
        kernel[grid](x["A"], x["B"], d, c, bias, alpha, beta, spec.m, spec.n, spec.k, *strides, **constants)
        return d
    return launch


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _best_config(spec: GemmSpec) -> str:
    from . import triton_kernel as tk

    kernel = tk.matmul_fp32 if spec.dtype in ("fp32", "tf32") else tk.matmul_16bit
    best = getattr(kernel, "best_config", None)
    if best is None:
        return "autotuned"
    kw = best.kwargs
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} stages {best.num_stages} warps {best.num_warps}"
            f" of {len(kernel.configs)}")


@dataclass(frozen=True)
class TritonMatmul:
    name: str = "triton"

    def available(self, spec: GemmSpec) -> str | None:
        return module_missing("triton", "triton") or module_missing("torch", "torch")

    def run(self, spec: GemmSpec, protocol: TimingProtocol) -> BaselineResult:
        from ..baseline import _torch, check_and_time, prepare

        torch = _torch()
        prepared = prepare(spec)
        launch = make_launch(torch, spec, prepared.gpu)
        started = time.perf_counter()
        launch()  # autotunes: compiles and times every config of the set
        torch.cuda.synchronize()
        tune_s = time.perf_counter() - started
        fused = "" if spec.epilogue.is_identity else f" + fused {spec.epilogue}"
        label = f"triton {_best_config(spec)}{fused}"
        measured, verdict = check_and_time(prepared, launch, protocol, "Triton", label=label)
        return BaselineResult(label, measured, verdict, tune_s)

    def row(self, spec: GemmSpec, protocol: TimingProtocol, arch: str) -> BenchRow:
        return result_row("Triton", "triton autotuned matmul", spec, lambda: self.run(spec, protocol))


BASELINE = TritonMatmul()
