"""The flag part: one block telling another, on another SM, that its writes to global memory are done.

The writer makes its data visible and sets a flag with a release store; the reader spins on the
flag with acquire loads, after which the data is visible to it. Used by simt's serial split-K
(`wait_turn` / `pass_turn`) and the wgmma split tail's partial sums (kernels/wgmma/schedule.py),
whose pieces, where each writes its share of D, count themselves out with an acquire-release add
whose last caller resets the flags.
"""
from __future__ import annotations

ACQUIRE_RELEASE = r"""// Flags in global memory, read and written across SMs.
// ld.acquire.gpu: read a flag; this thread's later reads see every write released before it was set.
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* flag) {
    unsigned int value;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
    return value;
}
// st.release.gpu: set a flag once this thread's earlier writes are visible to the whole GPU.
__device__ __forceinline__ void store_release(unsigned int* flag, unsigned int value) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flag), "r"(value) : "memory");
}
// Spin (one thread) until the flag reads `value`.
__device__ __forceinline__ void spin_until_equal(const unsigned int* flag, unsigned int value) {
    while (load_acquire(flag) != value) {}
}
"""

ACQ_REL_ADD = r"""// atom.acq_rel.gpu: add to a counter and return its old value; this thread's earlier writes (and
// reads) are ordered before it, and what the callers before it released is visible after it.
__device__ __forceinline__ unsigned int acq_rel_add(unsigned int* counter, unsigned int value) {
    unsigned int old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(value) : "memory");
    return old;
}
"""
