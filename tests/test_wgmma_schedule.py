"""The wgmma work schedule (schedule.py, the Python twin of the kernel's `next_piece`): every k-block
of every tile done exactly once, finishers and contributors agree, and the plan's choices."""
from __future__ import annotations

import itertools

import pytest

from gemmtune.kernels.wgmma import FAMILY
from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.kernels.wgmma.schedule import (MIN_SHARE, SCATTER_SPLITS, THREADS, Schedule, ShareSum, cuda, plan,
                                            schedule_for, share_call, share_sum, shares_to_d)
from gemmtune.spec import GemmSpec


def _walk(schedule: Schedule) -> None:
    done: dict[tuple[int, int], int] = {}
    partials: dict[int, int] = {}  # worker -> unit of the partial sums it stores
    finishers: dict[int, int] = {}  # unit -> worker that writes D
    split = set()  # units whose first piece stops before the last k-block
    for worker in range(schedule.workers):
        pieces = schedule.pieces(worker)
        tail = [p for p in pieces if p[0] >= schedule.whole_units]  # after every whole unit, at most two
        assert pieces[len(pieces) - len(tail):] == tail and len(tail) <= 2
        if worker < schedule.tail_workers:  # its share: at least MIN_SHARE k-blocks, at most one unit
            lo, hi = schedule.share(worker)
            assert sum(end - begin for _, begin, end in tail) == hi - lo
            assert min(MIN_SHARE, schedule.k_blocks) <= hi - lo <= schedule.k_blocks
        else:
            assert not tail
        if len(tail) == 2:  # the end of one unit, then the start of the next
            (u0, b0, e0), (u1, b1, e1) = tail
            assert e0 == schedule.k_blocks and b0 > 0 and u1 == u0 + 1 and b1 == 0
        for unit, begin, end in pieces:
            assert 0 <= begin < end <= schedule.k_blocks and 0 <= unit < schedule.units
            for kb in range(begin, end):
                assert (unit, kb) not in done, f"k-block {kb} of unit {unit} done twice"
                done[(unit, kb)] = worker
            if begin > 0:
                assert worker not in partials  # one partial-sum slot per block
                partials[worker] = unit
            else:
                assert unit not in finishers
                finishers[unit] = worker
                if end < schedule.k_blocks:
                    split.add(unit)
    assert len(done) == schedule.units * schedule.k_blocks  # every k-block of every unit
    assert set(finishers) == set(range(schedule.units))
    assert set(partials.values()) == split  # whole tiles have no partial sums
    for unit in split:
        worker = finishers[unit]
        expected = sorted(w for w, u in partials.items() if u == unit)
        assert expected and schedule.contributors(worker) == expected
        assert all(w > worker for w in expected)  # dependencies point only to later workers
        for w in expected:  # ... and to their first tail piece, which waits on nothing
            assert next(p for p in schedule.pieces(w) if p[0] >= schedule.whole_units)[0] == unit


@pytest.mark.parametrize("units,k_blocks,slots", list(itertools.product(
    [1, 2, 7, 33, 64, 131, 132, 133, 188, 320, 512, 2048], [1, 3, 16, 17, 64, 65, 1024], [64, 66, 132])))
def test_every_k_block_once_and_finishers_know_their_contributors(units, k_blocks, slots):
    schedule = plan(units, k_blocks, slots, split_tail=True)
    assert schedule.workers <= slots
    _walk(schedule)
    _walk(plan(units, k_blocks, slots, split_tail=False))


def test_plan_splits_the_partial_wave_over_the_gpu():
    s = plan(320, 80, 132, split_tail=True)  # 2048x5120 in 128x256 tiles: 2 waves and 56 tiles
    assert (s.workers, s.whole_units, s.splits, s.tail_workers) == (132, 264, 2, 112)
    assert plan(264, 64, 132, split_tail=True).splits == 1  # two whole waves: nothing to split
    assert plan(320, 80, 132, split_tail=False).splits == 1


def test_plan_shares_a_tail_of_more_than_half_the_workers():
    # 8192^3 in 128x256 tiles on 66 pairs: 15 rounds, then 34 units' 4352 k-blocks in 66 shares.
    s = plan(1024, 128, 66, split_tail=True)
    assert (s.workers, s.whole_units, s.tail_workers, s.splits) == (66, 990, 66, 0)
    assert s.share_k_blocks == pytest.approx(34 * 128 / 66)
    assert s.pieces(0)[-1] == (990, 0, 65) and s.pieces(1)[-2:] == [(990, 65, 128), (991, 0, 3)]
    assert s.contributors(0) == [1] and s.contributors(1) == [2, 3]  # unit 991: k-blocks 0-2, 3-68, 69-127
    # Where the last wave would shrink too little, it runs whole (SHARE_GAIN): 4096^3 on 66 pairs
    # (58 units: shares of 57 of 64 k-blocks), 4096^3 on 132 SMs (116 tiles: 57 of 64).
    assert plan(256, 64, 66, split_tail=True).tail_workers == 0
    assert plan(512, 64, 132, split_tail=True).tail_workers == 0
    assert plan(68, 72, 132, split_tail=True).tail_workers == 132  # shares of 38 of 72 k-blocks
    assert plan(68, 64, 132, split_tail=True).tail_workers == 0  # 33 of 64: saves 31 < SHARE_GAIN
    assert plan(90, 200, 132, split_tail=True).tail_workers == 132  # 137 of 200: saves over a quarter
    assert plan(100, 200, 132, split_tail=True).tail_workers == 0  # 152 of 200: 48 < 200 / 4
    assert plan(120, 400, 132, split_tail=True).tail_workers == 0  # 364 of 400: less than a quarter


def test_plan_splits_few_tiles_over_workers_with_enough_k():
    s = plan(16, 224, 132, split_tail=True)  # 128x4096x14336 in 128x256 tiles
    assert (s.workers, s.whole_units, s.splits) == (128, 0, 8)
    assert plan(8, 3 * MIN_SHARE, 132, split_tail=True).splits == 3  # no piece under MIN_SHARE k-blocks
    assert plan(8, 2 * MIN_SHARE - 1, 132, split_tail=True).splits == 1  # too little K to split


TILE_64 = WgmmaConfig(bm=64, bn=64, stages=6, consumers=1, persistent=True, split_tail=True)


def test_many_way_splits_reduce_in_shares_and_few_gather_serially():
    many = plan(4, 1024, 132, split_tail=True)  # 96x96x65536 bf16 in 64x64 tiles: 33 pieces per tile
    assert (many.splits, many.scatter) == (33, True)
    # Every piece writes its share of D: no finisher reads sums back (sum_share_to_d, after the epilogue).
    spec = GemmSpec(96, 96, 65536, "nt", "bf16", "bias_col+add")
    shares = shares_to_d(many, spec, TILE_64)
    assert "constexpr int SPLITS = 33" in shares and "FloatView<out_t> C, FloatView<out_t> bias" in shares
    assert "write_pair(D + at" in shares and "acq_rel_add(done, 1u) == SPLITS - 1" in shares
    assert "bool piece_writes_d" in cuda(many) and "SHARES_WRITE_D = true" in cuda(many)
    assert share_call(many, spec).strip().startswith("sum_share_to_d(consumer, tile_m, tile_n, D, C, bias);")
    # Workers t * SPLITS hold tail unit t's first piece; the SPLITS - 1 after it the others (the indexing).
    for worker in range(many.tail_workers):
        unit = many.pieces(worker)[-1][0]
        assert unit == many.whole_units + worker // many.splits
        finisher = worker - worker % many.splits
        assert many.contributors(finisher) == list(range(finisher + 1, finisher + many.splits))
    halves = plan(320, 80, 132, split_tail=True)  # two pieces per tile: the lone partial added directly
    assert (halves.splits, halves.scatter) == (2, False)
    assert "void add_partials" in cuda(halves) and "SHARES_WRITE_D = false" in cuda(halves)
    assert shares_to_d(halves, spec, TILE_64) == "" and share_call(halves, spec) == ""
    shares = plan(1024, 128, 66, split_tail=True)  # uneven shares: up to 3 pieces per unit, serial
    assert not shares.scatter and "void add_partials" in cuda(shares) and shares_to_d(shares, spec, TILE_64) == ""
    fewest = plan(8, SCATTER_SPLITS * MIN_SHARE, 132, split_tail=True)  # the fewest pieces scattered
    assert fewest.splits == SCATTER_SPLITS and fewest.scatter
    assert not plan(8, (SCATTER_SPLITS - 1) * MIN_SHARE, 132, split_tail=True).scatter
    assert "partial_sums" not in cuda(plan(264, 64, 132, True))  # nothing split


def test_split_cap_limits_the_pieces_a_tile_is_cut_into():
    spec = GemmSpec(96, 96, 65536, "nt", "bf16")  # 4 tiles of 64x64, 32 pieces each uncapped
    assert schedule_for(spec, TILE_64).splits == 32
    for cap, workers in ((4, 16), (8, 32), (24, 96)):
        capped = schedule_for(spec, TILE_64.with_(split_cap=cap))
        assert (capped.splits, capped.workers, capped.tail_workers) == (cap, workers, workers)
        runs = [sum(end - begin for _, begin, end in capped.pieces(w)) for w in range(capped.tail_workers)]
        assert sum(runs) == 4 * 1024 and set(runs) <= {1024 // cap, -(-1024 // cap)}  # even pieces, all of K
    assert schedule_for(spec, TILE_64.with_(split_cap=64)).splits == 32  # a cap above the split changes nothing
    assert "split_cap" not in TILE_64.to_json() and TILE_64.with_(split_cap=8).to_json()["split_cap"] == 8
    assert "max8" in TILE_64.with_(split_cap=8).describe()
    assert FAMILY.rejections(TILE_64.with_(split_cap=8, split_tail=False), spec, "sm_90a")
    assert FAMILY.rejections(TILE_64.with_(split_cap=1), spec, "sm_90a")


def test_schedule_for_a_config():
    spec = GemmSpec(1024, 1024, 16384, "nt", "bf16")
    s = schedule_for(spec, WgmmaConfig(bm=128, bn=256, split_tail=True))
    assert (s.units, s.k_blocks, s.workers, s.splits) == (32, 256, 128, 4)
    clustered = schedule_for(spec, WgmmaConfig(bm=128, bn=256, cluster_m=2, split_tail=True))
    assert (clustered.units, clustered.workers, clustered.splits) == (16, 64, 4)
    assert schedule_for(spec, WgmmaConfig(persistent=False)).workers == 32


def test_recorded_wgmma_table_replays_in_the_current_space():
    """The wgmma simulation table recorded on the H100 (bench/record_space.py, a uniform sample of the
    bf16 4096^3 nt space) loads, every config in it is still valid, and its best is a real kernel."""
    from pathlib import Path

    from gemmtune.kernels import get_family
    from gemmtune.tune.simulation import SimulationTable

    path = (Path(__file__).resolve().parent.parent / "bench" / "results"
            / "2026-11-23-h100-sim-wgmma_gemm_bf16_nt_4096x4096x4096.csv")
    table = SimulationTable.from_csv(path)
    assert table.family == "wgmma" and table.spec == GemmSpec(4096, 4096, 4096, "nt", "bf16")
    assert len(table.rows) == 96
    family = get_family("wgmma")
    assert all(not family.rejections(config, table.spec, "sm_90a") for config in table.rows)
    assert 150e-6 < table.best_s < 250e-6  # cuBLAS took 174.8 µs in that run


def _share_sum_walk(plan_: ShareSum, share: int, contributors: int) -> None:
    """sum_share_to_d's indexing (SUM_PASSES), thread by thread: every element of the share gets
    every partial tile's load exactly once, and one store; the lanes that shuffle see the same passes."""
    loads: dict[int, list[int]] = {}
    stores: dict[int, int] = {}
    slots = THREADS // plan_.lanes
    passes = -(-share // (slots * plan_.chunk))
    mine = -(-contributors // plan_.lanes)
    for thread in range(THREADS):
        lane_group, slot = thread % plan_.lanes, thread // plan_.lanes
        for p in range(passes):
            i0 = p * slots * plan_.chunk + slot
            for u0 in range(0, mine, plan_.batch):
                for u in range(plan_.batch):
                    for e in range(plan_.chunk):
                        v, i = lane_group + plan_.lanes * (u0 + u), i0 + slots * e
                        if v < contributors and i < share:
                            loads.setdefault(i, []).append(v)
            for e in range(plan_.chunk):
                if lane_group == 0 and i0 + slots * e < share:
                    stores[i0 + slots * e] = stores.get(i0 + slots * e, 0) + 1
    assert sorted(loads) == list(range(share)) and all(sorted(v) == list(range(contributors)) for v in loads.values())
    assert stores == {i: 1 for i in range(share)}
    assert 32 % plan_.lanes == 0  # the lanes of an element are in one warp


@pytest.mark.parametrize("share, contributors, loads", [(34, 31, 16), (293, 14, 16), (293, 14, 8), (66, 63, 16),
                                                       (1, 5, 8), (205, 5, 8), (147, 7, 16), (20, 127, 16)])
def test_share_sum_covers_every_element_and_contributor_once(share, contributors, loads):
    plan_ = share_sum(share, contributors, loads)
    assert plan_.chunk * plan_.batch <= loads
    _share_sum_walk(plan_, share, contributors)
    # No plan within the loads takes fewer round trips one after another.
    for lanes in (1, 2, 4, 8, 16, 32):
        for chunk in range(1, loads + 1):
            other = ShareSum(lanes, chunk, max(1, loads // chunk))
            assert other.round_trips(share, contributors) >= plan_.round_trips(share, contributors)


def test_share_sum_of_the_long_k_picks():
    from gemmtune.chooser import rank
    from gemmtune.kernels.wgmma.schedule import reduce_plan, share_loads

    def shipped(spec: GemmSpec) -> tuple[int, int, ShareSum]:  # (the first pick that is not the swap-AB rule's)
        config = next(p.config for p in rank(spec, "sm_90a") if not p.config.swap_ab)
        schedule = schedule_for(spec, config)
        share = -(-THREADS * config.accumulators // 4 // schedule.splits)
        return share, schedule.splits, reduce_plan(schedule, config, share_loads(spec, config))

    # 96x96x65536 in 128x64 tiles, 64 pieces: 16 float4s a share, four lanes an element, one round trip
    # (one lane with 8 loads in flight, as the first version: 8).
    share, pieces, plan_ = shipped(GemmSpec(96, 96, 65536, "nt", "bf16"))
    assert (share, pieces, plan_) == (16, 64, ShareSum(4, 1, 16)) and plan_.round_trips(share, pieces) == 1
    assert ShareSum(1, 1, 8).round_trips(share, pieces) == 8
    # 512x512x65536 in 128x256 tiles, clusters of 4 (30 fit: 15 pieces a unit): 274 float4s, 3 round trips
    # with the 16 loads its dead accumulators leave room for, 5 with 8.
    share, pieces, plan_ = shipped(GemmSpec(512, 512, 65536, "nt", "bf16"))
    assert (share, pieces) == (274, 15) and plan_.round_trips(share, pieces) == 3
    assert share_sum(share, pieces, 8).round_trips(share, pieces) == 5
