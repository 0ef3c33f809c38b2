"""The cluster barrier part (sm_90+): every thread of every block of a thread-block cluster meets there,
at once (`cluster_sync`) or in two halves (`cluster_arrive_relaxed` early, `cluster_wait` later).

Why the forms without `.aligned`: PTX's `barrier.cluster.arrive.aligned` / `.wait.aligned` promise that
every thread of a warp executes that very instruction together. The kernels reach their cluster barriers
after loops whose trip counts differ from lane to lane, `if (lane < ..)` stores, a spin on an mbarrier or
the producer/consumer split, so with `.aligned` the promise rests on the compiler reconverging each warp
first (compute-sanitizer's synccheck reported "Divergent thread(s) in warp" at the gemv K split's cluster
barrier, issue 66). Without `.aligned` each thread arrives and waits on its own, which is right wherever
the barrier stands, whatever the compiler does before it. Where the compiler does reconverge it costs
nothing: NVRTC 13.0 (sm_90a) gives byte-identical cubins for both forms (UCGABAR_ARV / UCGABAR_WAIT after a
BSYNC) in the gemv K split (1x1023x4099 fp32 nn relu) and the wgmma cluster kernel (4096³ bf16 nt,
cluster_m=2), 2026-11-28; so with that compiler the change alone cannot change what synccheck sees.

`ALIGNED_CLUSTER_BARRIER` finds the `.aligned` forms in generated code (tests/test_aligned_barriers.py
allows them only where no thread of the kernel can have branched yet).
"""
from __future__ import annotations

import re

# barrier.cluster.arrive / .wait with any qualifiers, .aligned among them.
ALIGNED_CLUSTER_BARRIER = re.compile(r"barrier\.cluster\.(?:arrive|wait)(?:\.\w+)*?\.aligned\b")

ARRIVE_AND_WAIT = r"""// Cluster barrier (sm_90+), without .aligned: each thread arrives and waits on its own, so a warp
// need not be converged here (kernels/parts/cluster_barrier.py says why).
// This thread has started (no memory ordering); cluster_wait() later returns once every thread has.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
// Returns once every thread of every block of the cluster has arrived; acquire: the writes they released
// before arriving are visible.
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}
"""

SYNC = r"""// All threads of all blocks of the cluster meet here, without .aligned (kernels/parts/cluster_barrier.py):
// release/acquire, so every write before it (shared memory of other blocks included) is visible after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
"""
