"""The wgmma work schedule (schedule.py, the Python twin of the kernel's `next_piece`): every k-block
of every tile done exactly once, finishers and contributors agree, and the plan's choices."""
from __future__ import annotations

import itertools

import pytest

from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.kernels.wgmma.schedule import MIN_SHARE, Schedule, plan, schedule_for
from gemmtune.spec import GemmSpec


def _walk(schedule: Schedule) -> None:
    done: dict[tuple[int, int], int] = {}
    partials = {}  # worker -> unit of the partial it stores
    finishers = {}  # unit -> worker that writes D
    cut = set()  # units whose head piece stops before the last k-block
    for worker in range(schedule.workers):
        pieces = schedule.pieces(worker)
        for index, (unit, begin, end) in enumerate(pieces):
            assert 0 <= begin < end <= schedule.k_blocks and 0 <= unit < schedule.units
            for kb in range(begin, end):
                assert (unit, kb) not in done, f"k-block {kb} of unit {unit} done twice"
                done[(unit, kb)] = worker
            if begin > 0:  # a later part of a cut tile: only ever a worker's first piece
                assert index == 0 and worker not in partials
                partials[worker] = unit
            else:
                assert unit not in finishers
                finishers[unit] = worker
                if end < schedule.k_blocks:  # a cut tile's head: the last stream-K piece of its range
                    cut.add(unit)
                    assert all(b == 0 and e == schedule.k_blocks for _, b, e in pieces[index + 1:])
    assert len(done) == schedule.units * schedule.k_blocks  # every k-block of every unit
    assert set(finishers) == set(range(schedule.units))
    assert set(partials.values()) == cut  # whole tiles have no partial sums
    for unit in cut:
        worker = finishers[unit]
        expected = sorted(w for w, u in partials.items() if u == unit)
        assert expected and schedule.contributors(worker, unit) == expected
        assert all(w > worker for w in expected)  # dependencies point only to later workers


@pytest.mark.parametrize("units,k_blocks,slots", list(itertools.product(
    [1, 2, 7, 64, 131, 132, 133, 248, 512, 2048], [1, 3, 16, 17, 64, 65, 1024], [64, 132])))
def test_every_k_block_once_and_finishers_know_their_contributors(units, k_blocks, slots):
    schedule = plan(units, k_blocks, slots, stream_k=True)
    assert schedule.workers <= slots
    _walk(schedule)
    _walk(plan(units, k_blocks, slots, stream_k=False))


def test_plan_cuts_the_partial_wave_and_one_more():
    s = plan(512, 64, 132, stream_k=True)  # 4096^2 in 128x256 tiles on 132 SMs
    assert (s.workers, s.sk_units) == (132, 116 + 132)
    shares = [s.sk_begin(w + 1) - s.sk_begin(w) for w in range(s.workers)]
    assert max(shares) - min(shares) <= 1 and min(shares) >= s.k_blocks  # even, and never a sliver
    assert plan(264, 64, 132, stream_k=True).sk_units == 0  # two whole waves: nothing to cut
    assert plan(512, 64, 132, stream_k=False).sk_units == 0


def test_plan_splits_few_tiles_over_workers_with_enough_k():
    s = plan(8, 128, 132, stream_k=True)  # 8 tiles of 128 k-blocks: 1024 iterations, 128 workers
    assert (s.workers, s.sk_units) == (1024 // MIN_SHARE, 8)
    assert plan(8, 2 * MIN_SHARE - 1, 132, stream_k=True).sk_units == 0  # too little K to cut


def test_schedule_for_a_config():
    spec = GemmSpec(4096, 4096, 4096, "nt", "bf16")
    s = schedule_for(spec, WgmmaConfig(bm=128, bn=256, stream_k=True))
    assert (s.units, s.k_blocks, s.workers) == (512, 64, 132)
    clustered = schedule_for(spec, WgmmaConfig(bm=128, bn=256, cluster_m=2, stream_k=True))
    assert (clustered.units, clustered.workers, clustered.sk_units) == (256, 64, 0)  # 4 whole waves of pairs
    assert schedule_for(spec, WgmmaConfig(persistent=False)).workers == 512
