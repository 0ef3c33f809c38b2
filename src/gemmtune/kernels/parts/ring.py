"""The ring part: the position in a ring of STAGES shared-memory slots that producer and consumers
walk in step, each slot guarded by a `full` and an `empty` mbarrier.

A position is a slot index `s` and a phase bit: mbarrier waits go by phase parity, and the parity a
slot's barrier must show flips every time the walk wraps around the ring. The kernel carries one
`Ring` per walker (RING, emitted once), so the wrap is written in one place.
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
