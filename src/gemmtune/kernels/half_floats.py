"""CUDA text every generated kernel with 16-bit operands starts from: bf16 and fp16 as bit patterns
(NVRTC finds no CUDA headers by default) and their conversions to and from float, each done by one
PTX cvt with round-to-nearest-even. Shared by the families that read or write 16-bit values."""
from __future__ import annotations

HALF_FLOATS = r"""typedef unsigned int u32;
// 16-bit floats as their bit patterns (NVRTC finds no CUDA headers); PTX cvt rounds to nearest even.
struct bf16_t { unsigned short bits; };
struct fp16_t { unsigned short bits; };
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16_t x) { return __uint_as_float((u32)x.bits << 16); }
__device__ __forceinline__ float to_float(fp16_t x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}
__device__ __forceinline__ float from_float(float v, float*) { return v; }
__device__ __forceinline__ bf16_t from_float(float v, bf16_t*) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
    return bf16_t{b};
}
__device__ __forceinline__ fp16_t from_float(float v, fp16_t*) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
    return fp16_t{b};
}
"""
