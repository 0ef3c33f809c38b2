"""What a generated kernel has to beat: cuBLAS through torch, and torch's eager GEMM + epilogue.

Both run on the same inputs as evaluate() (make_inputs, already rounded to the spec's types), are
checked against the same float64 reference with the dtype's tolerance (for fp32 this also proves
TF32 was off), and are timed by the same protocol via measure(). Per dtype:
- fp32: torch.mm in fp32 with TF32 off; tf32: fp32 tensors with TF32 allowed for the duration;
- fp16 / bf16: torch.mm on tensors of that type (cuBLAS's half GEMM, fp32 accumulation); an fp32
  D comes from torch.mm(..., out_dtype=torch.float32) where torch has it.
torch is optional: without it these raise one clear line.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from .device import query_device
from .errors import GemmtuneError, NoDeviceError, VerifyError
from .spec import GemmSpec
from .timing import Measurement, TimingProtocol, measure
from .verify import VerifyResult, compare, make_inputs, reference


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise GemmtuneError("cuBLAS baseline needs torch: pip install 'gemmtune[torch]'") from None
    if not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA GPU")
    return torch


_TORCH_TYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def matmul_label(spec: GemmSpec) -> str:
    """How the cuBLAS row computes, said plainly."""
    if spec.dtype in ("fp32", "tf32"):
        return f"torch.matmul, tf32 {'on' if spec.dtype == 'tf32' else 'off'}"
    gated = f", the {spec.gemm_n}-column GEMM without SwiGLU" if spec.gated else ""
    return f"torch.matmul {spec.dtype}" + ("" if spec.default_out else f", {spec.out_dtype} out") + gated


@contextmanager
def _fp32_precision(torch: Any, tf32: bool) -> Iterator[None]:
    """fp32 matmuls with TF32 allowed (tf32=True) or not for the duration, restoring the caller's setting."""
    matmul = torch.backends.cuda.matmul
    # torch >= 2.9 has fp32_precision; setting the old allow_tf32 there only warns.
    if hasattr(matmul, "fp32_precision"):
        name, value = "fp32_precision", "tf32" if tf32 else "ieee"
    else:
        name, value = "allow_tf32", tf32
    saved = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, saved)


def _torch_type(torch: Any, dtype: str) -> Any:
    return getattr(torch, _TORCH_TYPES["fp32" if dtype == "tf32" else dtype])


def _on_gpu(torch: Any, spec: GemmSpec, inputs: dict) -> dict:
    """Each array on the GPU in the type the kernel gets it in (values are already rounded: exact)."""
    return {k: torch.from_numpy(v).cuda().to(_torch_type(torch, spec.storage_dtype(k)))
            if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def _mm(torch: Any, spec: GemmSpec, a: Any, b: Any) -> Any:
    """op(A)·op(B) in D's type: a plain torch.mm unless 16-bit inputs ask for fp32 out."""
    if spec.default_out or spec.out_dtype != "fp32":
        return torch.mm(a, b)
    try:
        return torch.mm(a, b, out_dtype=torch.float32)
    except TypeError:
        raise GemmtuneError(f"this torch ({torch.__version__}) has no torch.mm(out_dtype=): no cuBLAS baseline "
                            f"for {spec.dtype} in, fp32 out") from None


def _operands(spec: GemmSpec, x: dict) -> tuple[Any, Any]:
    """op(A), op(B) as views: a transposed view makes cuBLAS use its transpose flag, not a copy."""
    return (x["A"].t() if spec.a_trans else x["A"]), (x["B"].t() if spec.b_trans else x["B"])


# Each epilogue op as the separate torch op an eager model would run.
EAGER_OPS: dict[str, Callable[[Any, Any, dict], Any]] = {
    "alpha": lambda torch, v, x: v * x["alpha"],
    "bias_row": lambda torch, v, x: v + x["bias"][:, None],
    "bias_col": lambda torch, v, x: v + x["bias"],
    "relu": lambda torch, v, x: torch.relu(v),
    "gelu": lambda torch, v, x: torch.nn.functional.gelu(v, approximate="tanh"),
    "add": lambda torch, v, x: v + x["C"],
    "beta": lambda torch, v, x: torch.add(v, x["C"], alpha=x["beta"]),
}


def _check(spec: GemmSpec, out: Any, inputs: dict, what: str, roundings: int = 1,
           ref: np.ndarray | None = None, label: str | None = None) -> VerifyResult:
    """The verifier's judgement of `out`; VerifyError (one line) when it is wrong. `label` says what
    ran (default: the cuBLAS call)."""
    ref = reference(spec, inputs) if ref is None else ref
    result = compare(out.float().cpu().numpy(), ref, spec.dtype, spec.k, spec.out_dtype, roundings)
    if not result.ok:
        hint = "; is TF32 on?" if spec.dtype == "fp32" else ""
        raise VerifyError(f"{what} baseline ({label or matmul_label(spec)}) is wrong ({result.message}){hint}")
    return result


@dataclass(frozen=True)
class Prepared:
    """One spec's inputs (host, as rounded), the same on the GPU, and the float64 reference: made
    once, shared by every launch a baseline checks (a CUTLASS search checks each candidate)."""

    spec: GemmSpec
    inputs: dict
    gpu: dict
    ref: np.ndarray


def prepare(spec: GemmSpec) -> Prepared:
    torch = _torch()
    inputs = make_inputs(spec, np.random.default_rng(0))
    return Prepared(spec, inputs, _on_gpu(torch, spec, inputs), reference(spec, inputs))


def check_and_time(prepared: Prepared, launch: Callable[[], Any], protocol: TimingProtocol, what: str,
                   roundings: int = 1, label: str | None = None) -> tuple[Measurement, VerifyResult]:
    """Verify `launch()`'s output (its return value), then time `launch` by the protocol on torch's
    current stream; VerifyError when the output is wrong."""
    torch = _torch()
    spec = prepared.spec
    with _fp32_precision(torch, tf32=spec.dtype == "tf32"):
        verdict = _check(spec, launch(), prepared.inputs, what, roundings, prepared.ref, label)
        stream = torch.cuda.current_stream().cuda_stream
        return measure(launch, protocol, query_device().l2_bytes, stream), verdict


def _timed(spec: GemmSpec, protocol: TimingProtocol, make_launch: Callable[[Any, dict], Callable[[], Any]],
           what: str, roundings: int = 1) -> Measurement:
    prepared = prepare(spec)
    launch = make_launch(_torch(), prepared.gpu)
    return check_and_time(prepared, launch, protocol, what, roundings)[0]


def cublas_launch(torch: Any, spec: GemmSpec, x: dict) -> Callable[[], Any]:
    """cuBLAS GEMM of `spec` (its epilogue left out) on the GPU operands `x`: torch.mm into a
    preallocated D where the types allow, on the spec's layout."""
    bare = spec.without_epilogue()
    a, b = _operands(bare, x)
    if not bare.default_out:  # torch.mm(out_dtype=) allocates its result
        return lambda: _mm(torch, bare, a, b)
    out = torch.empty((bare.m, bare.n), dtype=_torch_type(torch, bare.out_dtype), device="cuda")
    return lambda: torch.mm(a, b, out=out)


def run_cublas_unchecked(spec: GemmSpec, repeats: int, tf32: bool | None = None) -> None:
    """cuBLAS on random operands of the spec's types and layout, `repeats` times, unverified (the
    process a profiler watches: no float64 reference to wait for). tf32: None follows the spec."""
    torch = _torch()
    bare = spec.without_epilogue()
    launch = cublas_launch(torch, bare, _on_gpu(torch, bare, make_inputs(bare, np.random.default_rng(0))))
    with _fp32_precision(torch, tf32=bare.dtype == "tf32" if tf32 is None else tf32):
        for _ in range(repeats):
            launch()
        torch.cuda.synchronize()


def eager_launch(torch: Any, spec: GemmSpec, x: dict) -> Callable[[], Any]:
    """The GEMM, then each epilogue op as its own torch op (unfused), as an eager model runs it."""
    a, b = _operands(spec, x)

    def launch() -> Any:
        v = _mm(torch, spec, a, b)
        for name in spec.epilogue.ops:
            v = EAGER_OPS[name](torch, v, x)
        return v
    return launch


def cublas_measurement(spec: GemmSpec, protocol: TimingProtocol = TimingProtocol()) -> Measurement:
    """cuBLAS GEMM in the spec's types (cublas_launch); epilogue not included. A gated spec's is the plain
    GEMM of its 2N weight rows (the same FLOPs; SwiGLU, like an epilogue, left out)."""
    bare = spec.ungated().without_epilogue()
    return _timed(bare, protocol, lambda torch, x: cublas_launch(torch, bare, x), "cuBLAS")


def torch_eager_measurement(spec: GemmSpec, protocol: TimingProtocol = TimingProtocol()) -> Measurement:
    """GEMM then each epilogue op as its own torch op (eager_launch)."""
    # Each op of the chain rounds to D's type on its own (a fused kernel rounds once).
    return _timed(spec, protocol, lambda torch, x: eager_launch(torch, spec, x), "torch eager",
                  1 + len(spec.epilogue.ops))
