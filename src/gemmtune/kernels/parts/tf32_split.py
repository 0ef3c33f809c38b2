"""The 3xtf32 split part: an fp32 value as big + small, both exact tf32 values, so three tf32
products (big·big + big·small + small·big) keep fp32 accuracy on tensor cores.

The tensor cores read a tf32 operand's top 19 bits and ignore the low 13 (truncation), so with the
raw value as big the residual x - trunc(x) is exact in fp32; it is rounded to the nearest tf32 for
its own product. Values below 2^-103 cannot be split so (their residual would fall below fp32's
normal range, which the tensor cores read as zero): `tf32_split_key` finds them, and a kernel sums
the data that holds one on CUDA cores instead (wgmma: the tile, gemv: the chunk).
"""
from __future__ import annotations

# tf32_residual, tf32_round, UNSPLITTABLE_KEY and tf32_split_key (CUDA text; needs u32).
TF32_PARTS = r"""
// x - trunc_tf32(x): what the tensor cores drop of x, exact in fp32, rounded to the nearest tf32
// (ties away from zero, as cvt.rna). The rounding is an integer add of half a tf32 step to the bits,
// carrying into the exponent where it must: for a finite x the residual is finite and far from the
// largest fp32, so cvt.rna's test for infinity and NaN (two more instructions a value, emulated on
// sm_90) is not needed. An infinite or NaN x is its own big part, which keeps the result infinite or NaN.
__device__ __forceinline__ float tf32_residual(float x) {
    const float big = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
    return __uint_as_float((__float_as_uint(x - big) + 0x1000u) & 0xffffe000u);
}

// x rounded to the nearest tf32 (low 13 bits zero).
__device__ __forceinline__ float tf32_round(float x) {
    u32 big;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
    return __uint_as_float(big);
}

// A value too small to split: 0 < |x| < 2^-103. A nonzero residual of such a value can lie below
// fp32's smallest normal number (2^-126), which the tensor cores read as zero: the split loses what
// SGEMM keeps (values near 2^-124 against ones near 2^120 lost 2^-11 of every product). Its key is
// 2·bits - 1 (wrapping): the doubling drops the sign and zero wraps to the top, so a value is too
// small exactly when its key is below UNSPLITTABLE_KEY, and the smallest key of many says whether
// any is (two instructions a value).
constexpr u32 UNSPLITTABLE_KEY = ((127u - 103u) << 24) - 1u;
__device__ __forceinline__ u32 tf32_split_key(float4 x) {
    const auto key = [](float v) { return 2u * __float_as_uint(v) - 1u; };
    return min(min(key(x.x), key(x.y)), min(key(x.z), key(x.w)));
}

"""
