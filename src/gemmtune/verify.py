"""Is a kernel's output right? Random inputs, a float64 reference, and tolerances that grow with K.

Inputs are rounded to the types the kernel receives (A, B to the input type, C and bias to the
output type) before the float64 reference sees them, so the reference has no input error of its own.
The tolerance is the sum of the errors a correct kernel may make:

    tolerance = K_FACTOR·eps32·√K  +  4·input_rounding(dtype)  +  unit_roundoff(out_dtype)
                (fp32 accumulation)   (tf32 only: 2^-10)          (fp16 out 2^-11, bf16 out 2^-8,
                                                                   fp32 out 0)

fp8 inputs (e4m3, e5m2) are held by the reference as their exact values times their float32 scales (the
dequantized operands, gemmtune.fp8), so their quantization is no error of the kernel's; what counts is the
accumulation, whose Hopper fp8 tensor cores keep fewer bits than fp32 (FP8_ACCUMULATION), and D's rounding.

fp16/bf16 inputs are exact in the reference (products of 16-bit values are exact in fp32), so only
accumulation and the final rounding count. tf32 keeps an input term: the tensor cores truncate or
round each fp32 input to a 10-bit mantissa, which the reference (of the fp32 values) does not.

Two tests must both pass:
- relative Frobenius error ‖out − ref‖ / ‖ref‖ ≤ tolerance: the whole-matrix accuracy;
- every element: |out − ref| − unit_roundoff(out_dtype)·|ref| ≤ ELEMENT_FACTOR × tolerance × rms(ref).
  A single wrong element of a large matrix barely moves the Frobenius norm, but fails here; the
  output's own rounding is allowed per element because it scales with the element, not the RMS.
Any NaN or inf fails: outputs are poisoned with NaN before the launch, so an unwritten element shows.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .dtypes import round_to
from .errors import SpecError
from .fp8 import dequantized_operands, gemm_inputs
from .epilogue import deinterleave_gate_up, swiglu64
from .spec import FP8_DTYPES, OUT_DTYPES, GemmSpec, default_out_dtype

FP32_EPS = float(np.finfo(np.float32).eps)  # 2^-23
# Input error the reference does not see: only tf32, whose fp32 inputs the tensor cores cut to a
# 10-bit mantissa (fp16/bf16 inputs are rounded on the host, so the reference uses the same values).
INPUT_ROUNDING = {"fp32": 0.0, "tf32": 2.0**-10, "fp16": 0.0, "bf16": 0.0, "e4m3": 0.0, "e5m2": 0.0}
# fp8 wgmma's sums keep about 14 bits on Hopper (DeepSeek-V3's measurement on the H800): a relative error up
# to 2^-14 at each of the K/32 instructions' additions, a random walk of them, with FP8_FACTOR of margin.
FP8_ACCUMULATION = 2.0**-14
FP8_FACTOR = 4.0
FP8_K_STEP = 32  # K of one fp8 wgmma
# Relative error of rounding the fp32 result to D's type (round to nearest): half an ulp.
OUTPUT_ROUNDING = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}
K_FACTOR = 16.0  # sequential fp32 accumulation measures ≈0.15·eps·√k: ~100× margin
FLOOR = 1e-6
ELEMENT_FACTOR = 4.0  # the worst element of sequential accumulation sits near 1.8·eps·√k·rms
GPU_REFERENCE_FLOPS = 2e9  # above this, compute the float64 reference on the GPU when torch can


def _out_of(dtype: str, out_dtype: str | None) -> str:
    out = out_dtype or default_out_dtype(dtype)
    if out not in OUT_DTYPES:
        raise SpecError(f"no tolerance is defined for out dtype '{out}'")
    return out


def tolerance(dtype: str, k: int, out_dtype: str | None = None, roundings: int = 1) -> float:
    """Allowed relative Frobenius error of D for a K-long fp32-accumulated product of `dtype` inputs
    stored as `out_dtype` (default: the dtype's default output type), rounded to it `roundings`
    times (1 for a fused kernel; an eager chain of torch ops rounds after each op)."""
    if dtype not in INPUT_ROUNDING:
        raise SpecError(f"no tolerance is defined for dtype '{dtype}'")
    accumulation = K_FACTOR * FP32_EPS * math.sqrt(k)
    if dtype in FP8_DTYPES:
        accumulation += FP8_FACTOR * FP8_ACCUMULATION * math.sqrt(max(k / FP8_K_STEP, 1.0))
    rounding = 4.0 * INPUT_ROUNDING[dtype] + roundings * OUTPUT_ROUNDING[_out_of(dtype, out_dtype)]
    return max(accumulation + rounding, FLOOR)


# --- inputs and reference ----------------------------------------------------------------------
def make_inputs(spec: GemmSpec, rng: np.random.Generator) -> dict[str, np.ndarray | float]:
    """A, B as stored (spec.a_shape/b_shape) and each epilogue operand: uniform in [-1, 1], rounded
    (nearest even) to the type the kernel receives them in (A, B: dtype; C, bias: out_dtype) and
    held as float32, which represents every such value exactly. fp8: A and B quantized with their
    scales, and the row count the kernel reads (fp8.gemm_inputs)."""
    def uniform(shape: tuple[int, ...], operand: str) -> np.ndarray:
        return round_to(rng.uniform(-1.0, 1.0, size=shape).astype(np.float32), spec.storage_dtype(operand))

    inputs: dict[str, np.ndarray | float] = (
        dict(gemm_inputs(spec, rng)) if spec.fp8 else {"A": uniform(spec.a_shape, "A"), "B": uniform(spec.b_shape, "B")})
    for operand in spec.epilogue.operands():
        if operand.kind == "scalar":
            # Away from 0 and ±1 so a kernel that ignores the scalar cannot pass; rounded to
            # float32 because that is what the kernel receives.
            value = rng.uniform(1.25, 2.0) * rng.choice((-1.0, 1.0))
            inputs[operand.name] = float(np.float32(value))
        else:
            inputs[operand.name] = uniform(operand.shape(spec.m, spec.n), operand.name)
    return inputs


def _operands(spec: GemmSpec, inputs: dict) -> dict:
    return {op.name: inputs[op.name] for op in spec.epilogue.operands()}


def reference(spec: GemmSpec, inputs: dict[str, np.ndarray | float], use_gpu: bool | None = None,
              hold: Callable[[], AbstractContextManager] = nullcontext) -> np.ndarray:
    """D in float64. On the GPU (torch, cuBLAS on upcast inputs) for large problems when possible;
    `hold` (the GPU lock) is held for that product only, not for the epilogue on the CPU."""
    if use_gpu is None:
        use_gpu = gpu_reference(spec)
    if use_gpu:
        with hold():
            product = _product_torch(spec, inputs)
    else:
        product = _product_numpy(spec, inputs)
    if spec.gated:  # the product's columns are the interleaved gate and up products
        product = swiglu64(*deinterleave_columns(product))
    return spec.epilogue.reference(product, _operands(spec, inputs))


def deinterleave_columns(product: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A·Wgᵀ, A·Wuᵀ) from the product A·W'ᵀ with a weight interleaved by GATE_ROWS rows (its columns
    alternate 8 gate and 8 up columns: the columns of deinterleave_gate_up's weights)."""
    gate, up = deinterleave_gate_up(np.asarray(product).T)
    return gate.T, up.T


def gpu_reference(spec: GemmSpec) -> bool:
    """Whether reference() computes `spec` on the GPU: a large problem, and torch sees a GPU."""
    return spec.flops > GPU_REFERENCE_FLOPS and _torch_cuda() is not None


def _stored_operands(spec: GemmSpec, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """A and B as stored, in float64 (fp8: the values times their scales)."""
    if spec.fp8:
        return dequantized_operands(spec, inputs)
    return np.asarray(inputs["A"], dtype=np.float64), np.asarray(inputs["B"], dtype=np.float64)


def _product_numpy(spec: GemmSpec, inputs: dict) -> np.ndarray:
    a, b = _stored_operands(spec, inputs)
    return (a.T if spec.a_trans else a) @ (b.T if spec.b_trans else b)


def _product_torch(spec: GemmSpec, inputs: dict) -> np.ndarray:
    torch = _torch_cuda()
    if torch is None:
        raise SpecError("the GPU reference needs torch with CUDA")
    a, b = (torch.from_numpy(x).cuda() for x in _stored_operands(spec, inputs))
    product = (a.t() if spec.a_trans else a) @ (b.t() if spec.b_trans else b)
    return product.cpu().numpy()


def _torch_cuda():
    """torch when it is installed and sees a GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# --- comparison --------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyResult:
    rel_error: float  # ‖out − ref‖_F / ‖ref‖_F
    tolerance: float
    ok: bool
    nan_count: int  # NaN or inf elements in the output
    message: str
    max_element_error: float = 0.0  # max |out − ref| / rms(ref)
    element_tolerance: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def compare(out: Any, ref: Any, dtype: str, k: int, out_dtype: str | None = None,
            roundings: int = 1) -> VerifyResult:
    """Judge `out` (D read back, any float type) against the float64 `ref`: numpy arrays, or torch
    tensors (on the GPU, where a large D is judged in milliseconds instead of seconds), both alike."""
    out_type = _out_of(dtype, out_dtype)
    tol = tolerance(dtype, k, out_type, roundings)
    elem_tol = ELEMENT_FACTOR * tol
    if tuple(out.shape) != tuple(ref.shape):
        return VerifyResult(math.inf, tol, False, 0, f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}",
                            math.inf, elem_tol)
    xp = _namespace(out)
    finite = xp.isfinite(out)
    bad = int(xp.count_nonzero(~finite))
    if bad:
        where = tuple(int(i) for i in xp.argwhere(~finite)[0])
        return VerifyResult(math.inf, tol, False, bad, f"{bad} of {_count(out)} outputs are NaN/inf "
                            f"(first at {where}): unwritten or overflowed", math.inf, elem_tol)
    return _judge(_float64(out), ref, tol, elem_tol, roundings * OUTPUT_ROUNDING[out_type])


def _namespace(array: Any) -> Any:
    """numpy for numpy arrays, torch for torch tensors: the functions both spell alike
    (isfinite, count_nonzero, argwhere, abs, linalg.norm)."""
    if isinstance(array, np.ndarray):
        return np
    import torch

    return torch


def _float64(array: Any) -> Any:
    return np.asarray(array, dtype=np.float64) if isinstance(array, np.ndarray) else array.double()


def _count(array: Any) -> int:
    return math.prod(array.shape)


def _judge(out: Any, ref: Any, tol: float, elem_tol: float, rounding: float) -> VerifyResult:
    xp = _namespace(out)
    diff = xp.abs(out - ref)
    ref_norm = float(xp.linalg.norm(ref))
    scale = ref_norm if ref_norm > 0 else 1.0  # an all-zero reference: judge absolute error
    rel = float(xp.linalg.norm(diff)) / scale
    rms = scale / math.sqrt(_count(ref))
    # Each element may carry its own output rounding (relative to itself) beyond the shared bound.
    excess = (diff - rounding * xp.abs(ref)).clip(min=0.0)
    worst = tuple(int(i) for i in np.unravel_index(int(excess.argmax()), tuple(excess.shape))) if _count(excess) else ()
    max_elem = float(excess[worst]) / rms if _count(excess) else 0.0
    ok = rel <= tol and max_elem <= elem_tol
    if ok:
        message = f"ok: relative error {rel:.2e} <= {tol:.2e}"
    elif rel > tol:
        message = f"relative error {rel:.2e} > tolerance {tol:.2e} (worst element at {worst})"
    else:
        message = (f"element {worst} is off by {max_elem:.2e}·rms > {elem_tol:.2e} "
                   f"(got {float(out[worst]):.6g}, expected {float(ref[worst]):.6g})")
    return VerifyResult(rel, tol, ok, 0, message, max_elem, elem_tol)
