"""Element types on the host: rounding to fp16 / bf16, storage arrays, and NaN bit patterns.

numpy has float16 but no bfloat16, so bf16 values travel as their uint16 bit patterns (the top
half of a float32) and are rounded with integer arithmetic. tf32 data is stored as fp32: the
tensor cores drop the low 13 mantissa bits themselves, so the host never rounds it.
"""
from __future__ import annotations

import numpy as np

from .errors import SpecError
from .fp8 import FORMATS as FP8_FORMATS, decode_codes, encode

# numpy type of a host array that holds each storage type's bits (bf16: its uint16 pattern; fp8: its uint8
# code, gemmtune.fp8; int32: an fp8 kernel's row count, offs).
STORAGE = {"fp32": np.float32, "tf32": np.float32, "fp16": np.float16, "bf16": np.uint16,
           "e4m3": np.uint8, "e5m2": np.uint8, "int32": np.int32}
FP8_STORAGE = tuple(FP8_FORMATS)
# A quiet NaN of each storage type, as the value cuMemsetD32 (4-byte) or cuMemsetD16 (2-byte) writes.
NAN_BITS = {"fp32": 0x7FC00000, "fp16": 0x7E00, "bf16": 0x7FC0}
# Unit roundoff of each storage type when the result is rounded to nearest: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11, "bf16": 2.0**-8}


def _check(dtype: str) -> str:
    if dtype not in STORAGE:
        raise SpecError(f"unknown element type '{dtype}'; known: {', '.join(STORAGE)}")
    return dtype


def storage_bytes(dtype: str) -> int:
    return np.dtype(STORAGE[_check(dtype)]).itemsize


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest-even bf16, as uint16 bit patterns (NaN stays a quiet NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # Add 0x7FFF plus the lowest kept bit: a tie rounds to the even neighbour, anything above half up.
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16
    rounded = rounded.astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(NAN_BITS["bf16"]), rounded)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as the float32 values they stand for (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype` (nearest even), returned as float32 (which holds them exactly)."""
    values = np.asarray(values, dtype=np.float32)
    if _check(dtype) == "fp16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return bf16_to_float32(bf16_bits(values))
    return values  # fp32, and tf32 whose rounding happens in the tensor cores


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """The host array to copy to the device for `dtype`: float32, float16, bf16 bits as uint16, fp8 codes as
    uint8 (values that are exactly fp8 values), or int32."""
    if _check(dtype) == "bf16":
        return bf16_bits(np.asarray(values, dtype=np.float32))
    if dtype in FP8_STORAGE:
        return encode(values, dtype)
    return np.ascontiguousarray(values, dtype=STORAGE[dtype])


def from_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """A host copy of device data of `dtype` (as to_storage lays it out) as float64."""
    if _check(dtype) == "bf16":
        return bf16_to_float32(array).astype(np.float64)
    if dtype in FP8_STORAGE:
        return decode_codes(array, dtype)
    return np.asarray(array).astype(np.float64)
