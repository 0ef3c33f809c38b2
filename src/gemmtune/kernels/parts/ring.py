"""The ring part: the position in a ring of STAGES shared-memory slots that producer and consumers
walk in step, each slot guarded by a `full` and an `empty` mbarrier.

A position is a slot index `s` and a phase bit: mbarrier waits go by phase parity, and the parity
a slot's barrier must show flips every time the walk wraps around the ring. Every kernel that walks
a ring steps it with `ring_advance`, so the wrap is written in one place.
"""
from __future__ import annotations


def ring_advance(index: str = "s", phase: str = "phase") -> str:
    """One step along the ring: the next slot, and the phase flipped where the walk wraps."""
    return f"if (++{index} == STAGES) {{ {index} = 0; {phase} ^= 1; }}"


RING_ADVANCE = ring_advance()
