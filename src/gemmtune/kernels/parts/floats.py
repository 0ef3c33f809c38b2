"""The float part: 16-bit float types and their conversions, and reading an array as floats.

Every family that reads or writes bf16 / fp16 values (or an out_t that may be either) includes
these; fp32-only kernels need none of them. Each constant is CUDA text, emitted at most once per
kernel: HALF_FLOATS first, then (after the family's `typedef ... out_t;`) TO_OUT.
"""
from __future__ import annotations

# bf16_t / fp16_t as bit patterns, to_float and from_float (one PTX cvt each, round to nearest even).
# Written in kernels/half_floats.py; every family takes it from here.
from ..half_floats import HALF_FLOATS

# An array of out_t (fp32 or 16-bit) read as floats: C and bias come in D's type, the epilogue runs
# in fp32. A template, so it may come before out_t is declared.
FLOAT_VIEW = r"""
// Reads an out_t array as floats (C and bias come in the output type; the epilogue runs in fp32).
template <typename T>
struct FloatView {
    const T* p;
    __device__ __forceinline__ float operator[](size_t i) const { return to_float(p[i]); }
};
"""

# One fp32 value rounded to out_t (after `typedef ... out_t;`).
TO_OUT = r"""
__device__ __forceinline__ out_t to_out(float v) { return from_float(v, (out_t*)0); }
"""

# Two fp32 values rounded to a 16-bit type and packed into one 32-bit word, lo first in memory.
PACK_PAIR = r"""
// Round fp32 to a 16-bit output type as a pair: (lo, hi) packed into one 32-bit word, lo first in memory.
__device__ __forceinline__ u32 pack_pair(float lo, float hi, bf16_t*) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u32 pack_pair(float lo, float hi, fp16_t*) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
"""
