"""The barrier protocol of the grouped kernel's clusters of two (render.py, config.cluster = 2), as a model run
without a GPU: two blocks, each a producer and its consumers (ping-pong or cooperative) walking the same pairs,
mbarriers with arrivals, transaction bytes and phase parity, and TMA copies that land in any order. Random
interleavings must finish (no deadlock), every consumer must read the k-block it waits for (both halves of A,
its own B), and no copy may land in a slot a consumer still reads.

A model of the CUDA's loops written by hand: it checks the protocol (who waits on and arrives at what), not the
generated text; tests/test_grouped_gpu.py checks that on an H200.
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

import pytest

A_HALF, B_TILE = 4, 8  # transaction bytes of a share of A and of a B tile (any positive values)


@dataclass
class Barrier:
    arrivals: int
    pending: int = 0
    tx: int = 0
    completed: int = 0  # phases completed: the current phase's parity is completed % 2

    def __post_init__(self) -> None:
        self.pending = self.arrivals

    def _settle(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed, self.pending = self.completed + 1, self.arrivals

    def arrive(self, expect_tx: int = 0) -> None:
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0, "more arrivals than the barrier counts"
        self._settle()

    def complete_tx(self, count: int) -> None:
        self.tx -= count
        self._settle()

    def passed(self, parity: int) -> bool:
        """mbarrier.try_wait.parity: the phase of this parity has completed."""
        return self.completed % 2 != parity


@dataclass
class Block:
    full: list[Barrier]
    empty: list[Barrier]
    done: list[Barrier]  # ping-pong's mainloop_done
    slots: list[dict] = field(default_factory=list)
    readers: list[set] = field(default_factory=list)  # consumers between their wait on a slot and its release


@dataclass(frozen=True)
class Setup:
    stages: int
    k_blocks: int
    units: list[tuple[int, bool]]  # each pair: (unit, whether rank 1 has a tile)
    pingpong: bool

    @property
    def readers(self) -> int:
        return 1 if self.pingpong else 2


def _ring(stages: int):
    """Ring positions (slot, phase parity) in walking order, as parts/ring.py's Ring advances."""
    s = phase = 0
    while True:
        yield s, phase
        s += 1
        if s == stages:
            s, phase = 0, phase ^ 1


def _copy(blocks, cta: int, slot: int, part: str, tag, bytes_: int):
    """A TMA copy in flight: it lands (and counts its bytes) whenever the scheduler lets it."""
    yield lambda: True
    block = blocks[cta]
    assert not block.readers[slot], f"a copy landed in block {cta} slot {slot} while {block.readers[slot]} read it"
    block.slots[slot][part] = tag
    block.full[slot].complete_tx(bytes_)


def _producer(setup: Setup, blocks, agents, rank: int):
    """The kernel's producer thread: per pair and k-block, wait on `empty`, arrive on `full` expecting both A
    shares and its B (none where rank 1 has no tile), multicast its A share, load its B (load_stage)."""
    ring, me = _ring(setup.stages), blocks[rank]
    for unit, second_has_tile in setup.units:
        has_b = rank == 0 or second_has_tile
        for kb in range(setup.k_blocks):
            s, phase = next(ring)
            yield lambda s=s, phase=phase: me.empty[s].passed(phase ^ 1)
            me.full[s].arrive(2 * A_HALF + (B_TILE if has_b else 0))
            for cta in (0, 1):  # this block's share of A, multicast to both
                agents.append(_copy(blocks, cta, s, f"a{rank}", (unit, kb), A_HALF))
            if has_b:
                agents.append(_copy(blocks, rank, s, "b", (unit, kb, rank), B_TILE))


def _release(blocks, s: int, who) -> None:
    blocks[who[0]].readers[s].discard(who)
    for block in blocks:  # release_slot: one arrival on `empty` of every block of the cluster
        block.empty[s].arrive()


def _consumer(setup: Setup, blocks, rank: int, consumer: int):
    """A consumer warpgroup: ping-pong turns (ring.skip, mainloop_done) or every pair; per k-block wait on
    `full`, read, release the k-block before (MAIN_LOOP) or, without a tile, this one (CLUSTER_IDLE)."""
    me, who = blocks[rank], (rank, consumer)
    s = phase = 0

    def advance(s, phase, by=1):
        s += by
        return s % setup.stages, phase ^ (s // setup.stages) % 2

    for turn, (unit, second_has_tile) in enumerate(setup.units):
        if setup.pingpong and turn % 2 != consumer:
            s, phase = advance(s, phase, setup.k_blocks)
            continue
        if setup.pingpong and turn > 0:
            yield lambda p=((turn - 1) // 2) & 1: me.done[1 - consumer].passed(p)
        has_tile = rank == 0 or second_has_tile
        previous = None
        for kb in range(setup.k_blocks):
            yield lambda s=s, phase=phase: me.full[s].passed(phase)
            me.readers[s].add(who)
            slot = me.slots[s]
            assert slot["a0"] == slot["a1"] == (unit, kb), f"block {rank} read A {slot} for {(unit, kb)}"
            if has_tile:
                assert slot["b"] == (unit, kb, rank), f"block {rank} read B {slot['b']} for {(unit, kb, rank)}"
                if previous is not None:  # wgmma_wait<1>: the k-block before is done
                    _release(blocks, previous, who)
                previous = s
            else:  # no tile here: wait for the slot and release it at once
                _release(blocks, s, who)
            s, phase = advance(s, phase)
            yield lambda: True  # wgmma in flight: others may run before the release
        if setup.pingpong:
            me.done[consumer].arrive()
        if previous is not None:
            _release(blocks, previous, who)


def _run(setup: Setup, seed: int) -> None:
    blocks = [Block([Barrier(1) for _ in range(setup.stages)],
                    [Barrier(setup.readers * 2) for _ in range(setup.stages)], [Barrier(1), Barrier(1)],
                    [dict(a0=None, a1=None, b=None) for _ in range(setup.stages)],
                    [set() for _ in range(setup.stages)]) for _ in range(2)]
    agents: list = []
    for rank in (0, 1):
        agents.append(_producer(setup, blocks, agents, rank))
        agents += [_consumer(setup, blocks, rank, c) for c in (0, 1)]
    # Each agent (a generator) yields what it waits for next; a step runs one ready agent to its next wait.
    waits: dict = {}  # agent -> its wait; an agent not in it has not started
    rng = random.Random(seed)
    while agents:
        ready = [agent for agent in agents if waits.get(agent, lambda: True)()]
        assert ready, f"deadlock with {len(agents)} agents waiting (seed {seed})"
        agent = rng.choice(ready)
        try:
            waits[agent] = next(agent)
        except StopIteration:
            agents.remove(agent)
            waits.pop(agent, None)
    for block in blocks:  # every phase the producers began has completed
        assert all(b.pending == b.arrivals and b.tx == 0 for b in block.full)


ODD = [(u, u % 3 != 2) for u in range(7)]  # every third pair's second block has no tile (odd tile columns)


@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("stages, k_blocks", [(2, 1), (2, 3), (3, 2), (4, 5)])
@pytest.mark.parametrize("units", [ODD, [(u, True) for u in range(5)], [(u, False) for u in range(4)], []])
def test_cluster_pairs_never_deadlock_or_overwrite_a_slot_in_use(pingpong, stages, k_blocks, units):
    for seed in range(40):
        _run(Setup(stages, k_blocks, units, pingpong), seed)


def test_the_model_catches_a_release_in_one_block_only(monkeypatch):
    """The model is not vacuous: where a consumer arrives only on its own block's `empty` (twice, so the count
    is met), a peer's multicast lands in a slot this block's consumers still read."""
    def own_block_only(blocks, s, who):
        blocks[who[0]].readers[s].discard(who)
        blocks[who[0]].empty[s].arrive()
        blocks[who[0]].empty[s].arrive()

    monkeypatch.setattr(sys.modules[__name__], "_release", own_block_only)
    with pytest.raises(AssertionError, match="landed in block"):
        for seed in range(200):
            _run(Setup(2, 3, ODD, False), seed)
