"""C++ names of the storage types an exported kernel's operands have, for nvcc-built host code.

fp32 (and tf32, stored as fp32) is ``float``; fp16 is CUDA's ``__half`` (cuda_fp16.h) and bf16 its
``__nv_bfloat16`` (cuda_bf16.h). Conversions through float round to nearest even, like the kernels.
"""
from __future__ import annotations

from ..spec import GemmSpec

C_TYPES = {"fp32": "float", "fp16": "__half", "bf16": "__nv_bfloat16"}
HEADERS = {"fp16": "cuda_fp16.h", "bf16": "cuda_bf16.h"}
POINTER_OPERANDS = ("A", "B", "C", "bias", "D")


def c_type(spec: GemmSpec, operand: str) -> str:
    """The C++ element type of operand `operand` (A, B, C, bias, D) as stored."""
    return C_TYPES[spec.storage_dtype(operand)]


def uses_16_bit(spec: GemmSpec) -> bool:
    return any(spec.storage_dtype(x) in HEADERS for x in POINTER_OPERANDS)


def type_includes(spec: GemmSpec) -> list[str]:
    """``#include`` lines for the 16-bit types the spec's operands use (none for fp32)."""
    used = sorted({HEADERS[spec.storage_dtype(x)] for x in POINTER_OPERANDS if spec.storage_dtype(x) in HEADERS})
    return [f"#include <{header}>" for header in used]


# Host-and-device conversions between float and each storage type (cuda_fp16/cuda_bf16 functions).
CONVERSIONS = r"""// float <-> storage type, round to nearest even (host and device).
__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__half x) { return __half2float(x); }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __host__ __device__ inline T from_float(float v);
template <> __host__ __device__ inline float from_float<float>(float v) { return v; }
template <> __host__ __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
"""
