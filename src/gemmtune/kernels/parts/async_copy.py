"""The cp.async part (sm_80+): copies from global to shared memory that hold no registers while in
flight, grouped and waited for by the issuing thread. Used by the mma family's multistage ring and by
the gemv columns kernel's staged W (gemv/render.py). The kernel must define `u32`."""
from __future__ import annotations

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
