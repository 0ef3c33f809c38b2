"""The cluster ring part (sm_90+): releasing a ring slot that the blocks of a thread-block cluster fill together.

Where a block's producer multicasts its share of a stage into the same slot of every block of its cluster
(TMA `.multicast::cluster`), a slot of mine is written by my peers too: it may be refilled only after the
consumers of every block have read it. So each block's `empty` barrier counts the readers of all CLUSTER
blocks, and a consumer warpgroup done with slot s arrives on `empty[s]` in each of them (threads 0..CLUSTER-1
of the warpgroup, one remote arrival each, through `mbarrier_arrive_cluster` of kernels/wgmma/ptx.py).

Needs: `constexpr int CLUSTER` (blocks per cluster) and the wgmma PTX helpers (`mbarrier_arrive_cluster`).
"""
from __future__ import annotations

RELEASE_SLOT = r"""
// A consumer warpgroup is done reading ring slot `empty_s` guards: arrive on that barrier in every block of the
// cluster (each block's producer multicasts into this slot, so each waits for every block's readers). Thread c
// of the warpgroup arrives in block c; the arrival releases nothing but "my wgmma reads are complete"
// (wgmma_wait saw to that), which needs no fence (mbarrier_arrive_cluster says why).
__device__ __forceinline__ void release_slot(u64* empty_s) {
    if (threadIdx.x % 128 < CLUSTER) mbarrier_arrive_cluster(empty_s, threadIdx.x % 128);
}
"""
