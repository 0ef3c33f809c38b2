"""Named inline-PTX helpers of the mma.sync family, emitted as CUDA device functions.

Each instruction is spelled once here with a one-line comment; render.py emits only the helpers a
kernel uses. Shared-memory operands are 32-bit shared-window addresses (`smem_addr`).
"""
from __future__ import annotations

SMEM_ADDR = r"""
// 32-bit address of a shared-memory object, as PTX's shared-state-space operands want it.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}
"""

LDMATRIX = r"""
// ldmatrix x4: four 8x8 matrices of 16-bit values (rows given by lanes 8j..8j+7) into 4 registers per thread.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// ldmatrix x4 .trans: the same four matrices, each transposed on the way (for MN-major operands).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
"""

# One tensor-core instruction per dtype: d[4] += a·b over a 16x8 tile of D (fp32 accumulators).
MMA = {
    "bf16": r"""
// mma m16n8k16 bf16: D(16x8, fp32) += A(16x16, row) · B(16x8, col), a warp-wide tensor-core op.
__device__ __forceinline__ void mma_tile(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
""",
    "fp16": r"""
// mma m16n8k16 f16: D(16x8, fp32) += A(16x16, row) · B(16x8, col), a warp-wide tensor-core op.
__device__ __forceinline__ void mma_tile(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
""",
    "fp16_sm75": r"""
// mma m16n8k8 f16 (sm_75), twice: k 0-7 from (a0, a1, b0), k 8-15 from (a2, a3, b1); same fragments as m16n8k16.
__device__ __forceinline__ void mma_tile(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[2]), "r"(a[3]), "r"(b[1]));
}
""",
    "tf32": r"""
// mma m16n8k8 tf32: D(16x8, fp32) += A(16x8, row) · B(8x8, col); fp32 bits in, the tensor core keeps tf32.
__device__ __forceinline__ void mma_tile(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
""",
}



def _fp8_mma(a_type: str, b_type: str) -> str:
    """m16n8k32 with 8-bit operands: its fragments hold, byte for byte, what m16n8k16's hold of 16-bit
    values (a0: row g, bytes 4t..4t+3 of the k-step; a2 the same 16 bytes on; b0/b1 likewise down column
    g), so the same ldmatrix (b16, no .trans) reads them from a K-major tile."""
    return f"""
// mma m16n8k32 {a_type} x {b_type} (sm_89+): D(16x8, fp32) += A(16x32, row) · B(32x8, col), four 8-bit values a register.
__device__ __forceinline__ void mma_tile(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.{a_type}.{b_type}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
                 "{{%8, %9}}, {{%0, %1, %2, %3}};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}
"""


MMA.update({"e4m3": _fp8_mma("e4m3", "e4m3"), "e5m2": _fp8_mma("e5m2", "e5m2")})

# 3xTF32: an fp32 value as big + small, both exact tf32 values, so three tf32 products keep fp32 accuracy.
SPLIT_TF32 = r"""
// Round an fp32 value to tf32 (10-bit mantissa), to nearest with ties away from zero; low 13 bits zero.
__device__ __forceinline__ u32 to_tf32(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
// x = big + small: big is x rounded to tf32, small the residual (exact in fp32) rounded to tf32, so
// |x - big - small| <= 2^-22 |x|. Where big rounds up past FLT_MAX it would be inf: keep x's top 19
// bits instead (truncation cannot overflow); inf and NaN pass through big with a zero small.
__device__ __forceinline__ void split_tf32(u32 x_bits, u32& big, u32& small) {
    const float x = __uint_as_float(x_bits);
    big = to_tf32(x);
    if (isinf(__uint_as_float(big))) big = x_bits & 0xFFFFE000u;
    const float rest = x - __uint_as_float(big);
    small = isfinite(x) ? to_tf32(rest) : 0u;
}
"""

CP_ASYNC = r"""
// cp.async 16 B (L2 only, .cg): global -> shared without registers; src-size 0 writes 16 zero bytes.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// The same copy from src + BYTES, a compile-time offset: ptxas folds it into the instruction, so one
// pointer serves all of a thread's units. With valid false nothing is read (src-size 0): zeros land.
template <int BYTES> __device__ __forceinline__ void cp_async_16_at(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1+%3], 16, %2;" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0), "n"(BYTES));
}
// cp.async 8 B (.ca; .cg takes only 16); src-size 0 writes zeros.
__device__ __forceinline__ void cp_async_8(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" :: "r"(dst), "l"(src), "r"(valid ? 8 : 0));
}
// cp.async 4 B (.ca), the smallest copy cp.async makes; src-size 0 writes zeros.
__device__ __forceinline__ void cp_async_4(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
// Close the group of cp.async copies this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
"""


def mma_helper(dtype: str, arch_number: int) -> str:
    """The mma_tile helper for `dtype` on an arch (sm_75 runs fp16 as two m16n8k8)."""
    if dtype == "fp16" and arch_number < 80:
        return MMA["fp16_sm75"]
    return MMA[dtype]
