"""Named inline-PTX helpers for Hopper kernels, emitted as CUDA device functions.

Every template of the family (and later families that reuse the pipeline) includes these instead of
writing `asm` inline, so each instruction is spelled once, with a comment saying what it does.
Shared-memory operands are 32-bit shared-window addresses (``smem_addr``), as the instructions take.
"""
from __future__ import annotations

from ..parts import cluster_barrier
from ..parts.floats import HALF_FLOATS, PACK_PAIR
from ..parts.tf32_split import TF32_PARTS

# Types and small helpers that need no PTX. NVRTC has no <cuda.h>: a TMA descriptor is 128 opaque
# bytes, aligned to 64, that the host fills with cuTensorMapEncodeTiled and passes by value.
U64 = "typedef unsigned long long u64;\n"
# The TMA descriptor and shared-memory addresses (after HALF_FLOATS, which defines u32).
DESCRIPTOR = r"""
struct alignas(64) TmaDescriptor { u64 opaque[16]; };

// 32-bit address of a shared-memory object, as PTX's shared-state-space operands want it.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}
"""
PRELUDE = U64 + HALF_FLOATS + DESCRIPTOR + PACK_PAIR

BARRIERS = r"""
// mbarrier.init: a barrier in shared memory that completes a phase after `arrivals` arrive-on
// operations and once every byte announced with expect_tx has landed.
__device__ __forceinline__ void mbarrier_init(u64* bar, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(arrivals));
}

// Make initialised barriers visible to the async proxy (TMA) and to the other CTAs of a cluster.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrive once and announce `bytes` that asynchronous copies will deliver to this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Arrive once (a consumer saying "this stage is free again").
__device__ __forceinline__ void mbarrier_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same offset in the shared memory of CTA `cta` of this cluster.
// Default (CTA-scope) release semantics: the arrival only says "my wgmma reads of this stage are
// complete" (wgmma_wait saw to that), which needs no fence. `.release.cluster` would put a
// MEMBAR.ALL.GPU before every arrival, in the consumers' main loop: 30% of the kernel's time.
__device__ __forceinline__ void mbarrier_arrive_cluster(u64* bar, u32 cta) {
    asm volatile("{\n .reg .b32 remote;\n"
                 " mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
                 :: "r"(smem_addr(bar)), "r"(cta) : "memory");
}

// Spin until the barrier's phase with parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 phase) {
    asm volatile("{\n .reg .pred done;\n"
                 "WAIT:\n"  // a label inside { } is local to this block, so inlined copies don't clash
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT;\n}"
                 :: "r"(smem_addr(bar)), "r"(phase) : "memory");
}
"""

TMA = r"""
// TMA: copy one box of a 2-D tensor (coordinates innermost first) into shared memory; the bytes
// count towards `bar`'s expected transaction. Out-of-bounds elements arrive as zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* map, u64* bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}

// The same copy delivered to the same shared-memory offset (and barrier) of every CTA in `mask`.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TmaDescriptor* map, u64* bar,
                                                      int c0, int c1, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}

// An L2 policy for data touched once (C read, D written): its lines go first when L2 needs room,
// so streaming the output does not push out the A and B panels that other blocks still reuse.
__device__ __forceinline__ u64 l2_evict_first_policy() {
    u64 policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// tma_load_2d with an L2 cache policy (see l2_evict_first_policy).
__device__ __forceinline__ void tma_load_2d_hinted(void* dst, const TmaDescriptor* map, u64* bar, int c0, int c1,
                                                   u64 policy) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%3, %4}], [%2], %5;"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy) : "memory");
}

// TMA store: copy a box from shared memory to the tensor at (c0, c1), clipped at the tensor's edges;
// completion is tracked per thread in bulk groups.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* map, const void* src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(map), "r"(smem_addr(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_store_2d_hinted(const TmaDescriptor* map, const void* src, int c0, int c1,
                                                    u64 policy) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;"
                 :: "l"(map), "r"(smem_addr(src)), "r"(c0), "r"(c1), "l"(policy) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until the committed stores have finished reading shared memory (the buffer may be reused).
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Wait until the committed stores are complete (before the block exits and its shared memory goes).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Make this thread's ordinary shared-memory writes visible to the async proxy (a TMA store next).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Ask L2 to fetch the box at (c0, c1) of a tensor (no shared memory, no barrier: a hint). A later TMA
// load of that box then reads L2 instead of DRAM.
__device__ __forceinline__ void tma_prefetch_l2_2d(const TmaDescriptor* map, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                 :: "l"(map), "r"(c0), "r"(c1) : "memory");
}

// Ask L2 to fetch a descriptor early (it lives in kernel parameter space).
__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}
"""

WARPGROUP = r"""
// Order earlier register/shared-memory accesses before the warpgroup's next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// Close the batch of wgmma issued so far into one group that can be waited on.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Wait until at most N committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Hand registers back (producer) or take more (consumers): the warpgroup's per-thread budget.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(REGS)); }

// A named barrier among `threads` threads (ids 1..15; 0 is __syncthreads). bar.sync is the .aligned form, as
// __syncthreads' own bar.sync 0 is: every caller is a whole warpgroup (or all consumers) whose way to it
// depends only on the warpgroup and the block's loops, never on the lane, so every thread of each warp runs
// this same instruction and ptxas reconverges the warp first (the non-aligned barrier.sync only reorders the
// write-back's SASS, NVRTC 13.0, 2026-11-28).
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

""" + cluster_barrier.SYNC + r"""
__device__ __forceinline__ u32 cluster_cta_rank() {
    u32 rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

// Shared-memory matrix descriptor for wgmma with the 128-byte swizzle (layout type 1 in bits 62-63).
// lbo/sbo: byte distances between core-matrix groups along the leading / strided dimension.
__device__ __forceinline__ u64 smem_descriptor(const void* tile, u32 lbo, u32 sbo) {
    u64 address = smem_addr(tile);
    return ((address & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}
"""

# wgmma's PTX type names and K depth per instruction, by gemmtune input dtype.
# fp32 specs (math 3xtf32) multiply their split tf32 parts.
WGMMA_TYPES = {"bf16": ("bf16", 16), "fp16": ("f16", 16), "tf32": ("tf32", 8), "fp32": ("tf32", 8),
               "e4m3": ("e4m3", 32), "e5m2": ("e5m2", 32)}  # (PTX type, K of one instruction)
TRANSPOSABLE = ("bf16", "f16")  # PTX types whose wgmma takes transpose flags; tf32 and fp8 read K-major only


def wgmma_function(dtype: str, n: int, within: int | None = None, fresh: bool = False) -> str:
    """`wgmma_m64n{n}`: one warpgroup-wide D(64×n, fp32) += A(64×k) · B(k×n), both from shared memory.

    The accumulator fragment is n/2 floats per thread. 16-bit types take transpose flags (MN-major
    operands); tf32 and fp8 (e4m3, e5m2: k32) read K-major operands only. With `within` (a wider tile's N), the function is
    `wgmma_m64n{n}_at<AT, ...>(d, desc_a, desc_b, accumulate)`: it writes the n columns from column
    2·AT of that tile's fragment (floats AT .. AT + n/2 - 1 of its within/2), leaving the others to
    other wgmma, and with accumulate = 0 it overwrites them (D = A·B) instead of adding: a fresh
    accumulator needs no zeroing instructions, which could not run beside wgmma in flight. With
    `fresh` (and no `within`), `wgmma_m64n{n}(d, desc_a, desc_b, accumulate)` takes that flag too."""
    ptx_type, k = WGMMA_TYPES[dtype]
    regs = n // 2
    outputs = ", ".join(f"%{i}" for i in range(regs))
    at = "AT + " if within else ""
    constraints = ", ".join(f'"+f"(d[{at}{i}])' for i in range(regs))
    a, b = regs, regs + 1
    params = ["int AT"] if within else []
    inputs = ['"l"(desc_a)', '"l"(desc_b)']
    flags = "1, 1"
    if ptx_type in TRANSPOSABLE:
        params += ["int TRANS_A", "int TRANS_B"]
        flags += f", %{regs + 2}, %{regs + 3}"
        inputs += ['"n"(TRANS_A)', '"n"(TRANS_B)']
    if within or fresh:
        scale = f"%{regs + len(inputs)}"
        inputs.append('"r"(accumulate)')
        name, size, extra = (f"wgmma_m64n{n}_at", within // 2, ", int accumulate") if within else \
            (f"wgmma_m64n{n}", regs, ", int accumulate")
    else:
        scale, name, size, extra = "1", f"wgmma_m64n{n}", regs, ""
    template_args = f"template <{', '.join(params)}>\n" if params else ""
    return (
        f"// wgmma m64n{n}k{k}: D(64x{n}) += A·B with fp32 accumulators; issued by all 128 threads of a warpgroup.\n"
        f"{template_args}__device__ __forceinline__ void {name}(float (&d)[{size}], u64 desc_a, u64 desc_b{extra}) {{\n"
        f'    asm volatile("{{\\n .reg .pred accumulate;\\n setp.ne.b32 accumulate, {scale}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx_type}.{ptx_type} "\n'
        f'        "{{{outputs}}}, %{a}, %{b}, accumulate, {flags};\\n}}"\n'
        f"        : {constraints}\n"
        f"        : {', '.join(inputs)});\n"
        "}\n"
    )


# 3xtf32 (fp32 specs): the split (parts/tf32_split.py) and the barrier that ORs the exact path's
# predicate over a warpgroup. With round_big, big is rounded to the nearest tf32 instead and written
# over x (a smaller residual, one more store per value).
NAMED_BARRIER_OR = r"""// A named barrier that also ORs a predicate over the threads that meet there.
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool value) {
    u32 any;
    asm volatile("{\n .reg .pred p, q;\n setp.ne.u32 p, %3, 0;\n bar.red.or.pred q, %1, %2, p;\n selp.u32 %0, 1, 0, q;\n}"
                 : "=r"(any) : "r"(id), "r"(threads), "r"((u32)value) : "memory");
    return any != 0;
}
"""

TF32_SPLIT = TF32_PARTS + NAMED_BARRIER_OR


def helpers(dtype: str, n: int, halves: bool = False) -> str:
    """Everything a wgmma kernel for `dtype` with n-wide instructions includes; with `halves`, the
    n/2-wide instruction into either half of the n-wide fragment instead. fp32 (3xtf32): the
    instruction takes an accumulate flag (each k-block's partial sum starts fresh) and the split."""
    if halves:
        wgmma = wgmma_function(dtype, n // 2, within=n)
    else:
        wgmma = wgmma_function(dtype, n, fresh=dtype == "fp32")
    split = TF32_SPLIT if dtype == "fp32" else ""
    return PRELUDE + BARRIERS + TMA + WARPGROUP + wgmma + split
