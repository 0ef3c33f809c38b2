"""TMA descriptors on the host: a TensorMapArg plus a device pointer → the 128 bytes a kernel takes.

cuTensorMapEncodeTiled (driver API, through cuda-bindings) needs no context or GPU work: it only
checks and packs the description. An export's C++ harness makes the same call from the same fields.
"""
from __future__ import annotations

from typing import Any

from .device import checked, driver
from .errors import LaunchError, SpecError
from .kernel_source import TensorMapArg

_DATA_TYPES = {"fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
               "fp32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
               # fp8 codes are moved as bytes: TMA has no fp8 type, and copies them unchanged
               "e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8", "e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             128: "CU_TENSOR_MAP_SWIZZLE_128B"}
TMA_ALIGNMENT = 16  # bytes: the global address of a tensor map's data


def encode_tensor_map(desc: TensorMapArg, pointer: int) -> Any:
    """A cuda.bindings CUtensorMap for `desc` over the device memory at `pointer` (kept alive by the
    caller: the kernel parameter is a copy of its 128 bytes, taken at launch)."""
    if pointer % TMA_ALIGNMENT:
        raise SpecError(f"{desc.operand} starts at 0x{pointer:x}; TMA needs a {TMA_ALIGNMENT}-byte aligned address")
    cu = driver()
    rank = len(desc.dims)
    result = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, _DATA_TYPES[desc.dtype]), rank, pointer,
        [cu.cuuint64_t(d) for d in desc.dims], [cu.cuuint64_t(s) for s in desc.strides],
        [cu.cuuint32_t(b) for b in desc.box], [cu.cuuint32_t(1)] * rank,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(cu.CUtensorMapSwizzle, _SWIZZLES[desc.swizzle]),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    return checked(result, f"cuTensorMapEncodeTiled({desc.name}: dims {desc.dims}, box {desc.box})", LaunchError)
