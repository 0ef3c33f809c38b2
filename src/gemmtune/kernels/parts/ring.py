"""The ring parts: rings of STAGES shared-memory slots that k-slices are copied into ahead of the
mma work that reads them.

RING (wgmma): the position in a ring that producer and consumers walk in step, each slot guarded by
a `full` and an `empty` mbarrier. A position is a slot index `s` and a phase bit: mbarrier waits go
by phase parity, and the parity a slot's barrier must show flips every time the walk wraps around
the ring. The kernel carries one `Ring` per walker, so the wrap is written in one place.

SLICE_RING (mma.sync): a ring that every thread of the block fills with cp.async and reads in step,
ordered by cp.async.wait_group and __syncthreads instead of mbarriers, so it has no phase: k-slice
kt's slot follows from kt alone (RING_SLOT(kt)), and no thread carries a position.
"""
from __future__ import annotations

RING = r"""
// A walk around the ring of STAGES shared-memory slots: slot `s`, and the phase parity its mbarriers
// show on this lap (it flips each time the walk wraps around).
struct Ring {
    int s = 0;
    u32 phase = 0;
    __device__ __forceinline__ void advance() { if (++s == STAGES) { s = 0; phase ^= 1; } }
    // Past `slots` slots at once (the other ping-pong consumer's k-blocks): one flip per wrap.
    __device__ __forceinline__ void skip(int slots) { s += slots; phase ^= (s / STAGES) & 1; s %= STAGES; }
};
"""

SLICE_RING = r"""
// The ring of STAGES shared-memory slots that k-slices pass through: slice kt is copied into slot
// RING_SLOT(kt), STAGES - 1 slices before it is multiplied. cp.async.wait_group and __syncthreads
// order the copies and the reads, so the ring has no phase: a slot is a function of the slice alone.
// A macro, not a function: written in place, the slot of a slice computed in the loop (kt + STAGES - 1)
// leaves ptxas's schedule as it was; through an inlined call it moved a few address instructions.
#define RING_SLOT(kt) ((kt) % STAGES)
"""
