"""What a generated kernel has to beat: cuBLAS through torch, and torch's eager GEMM + epilogue.

Both run on the same inputs as evaluate() (make_inputs), are checked against the same float64
reference (which also proves TF32 was off), and are timed by the same protocol via measure().
torch is optional: without it these raise one clear line.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from .device import query_device
from .errors import GemmtuneError, NoDeviceError, VerifyError
from .spec import GemmSpec
from .timing import Measurement, TimingProtocol, measure
from .verify import compare, make_inputs, reference


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise GemmtuneError("cuBLAS baseline needs torch: pip install 'gemmtune[torch]'") from None
    if not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA GPU")
    return torch


@contextmanager
def _ieee_fp32(torch: Any) -> Iterator[None]:
    """Full-precision fp32 matmuls (no TF32) for the duration, restoring the caller's setting."""
    matmul = torch.backends.cuda.matmul
    # torch >= 2.9 has fp32_precision; setting the old allow_tf32 there only warns.
    name, value = ("fp32_precision", "ieee") if hasattr(matmul, "fp32_precision") else ("allow_tf32", False)
    saved = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, saved)


def _on_gpu(torch: Any, inputs: dict) -> dict:
    return {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


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


def _check(spec: GemmSpec, out: Any, inputs: dict, what: str) -> None:
    result = compare(out.cpu().numpy(), reference(spec, inputs), spec.dtype, spec.k)
    if not result.ok:
        raise VerifyError(f"{what} baseline is wrong ({result.message}); is TF32 on?")


def _timed(spec: GemmSpec, protocol: TimingProtocol, make_launch: Callable[[Any, dict], Callable[[], Any]],
           what: str) -> Measurement:
    torch = _torch()
    inputs = make_inputs(spec, np.random.default_rng(0))
    with _ieee_fp32(torch):
        launch = make_launch(torch, _on_gpu(torch, inputs))
        _check(spec, launch(), inputs, what)
        stream = torch.cuda.current_stream().cuda_stream
        return measure(launch, protocol, query_device().l2_bytes, stream)


def cublas_measurement(spec: GemmSpec, protocol: TimingProtocol = TimingProtocol()) -> Measurement:
    """cuBLAS SGEMM (torch.mm into a preallocated D) on the spec's layout; epilogue not included."""
    def make_launch(torch: Any, x: dict) -> Callable[[], Any]:
        a, b = _operands(spec, x)
        out = torch.empty((spec.m, spec.n), dtype=torch.float32, device="cuda")
        return lambda: torch.mm(a, b, out=out)

    bare = GemmSpec(spec.m, spec.n, spec.k, spec.layout, spec.dtype)
    return _timed(bare, protocol, make_launch, "cuBLAS")


def torch_eager_measurement(spec: GemmSpec, protocol: TimingProtocol = TimingProtocol()) -> Measurement:
    """GEMM then each epilogue op as its own torch op (unfused), as an eager model runs it."""
    def make_launch(torch: Any, x: dict) -> Callable[[], Any]:
        a, b = _operands(spec, x)

        def launch() -> Any:
            v = torch.mm(a, b)
            for name in spec.epilogue.ops:
                v = EAGER_OPS[name](torch, v, x)
            return v
        return launch

    return _timed(spec, protocol, make_launch, "torch eager")
