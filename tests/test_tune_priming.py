"""Candidate sets primed in other processes (tune.priming) and what candidate_set does with them."""
from __future__ import annotations

import argparse
from concurrent.futures import Future

import numpy as np

from gemmtune.cli.many_cmds import MAX_SHAPES_AT_ONCE, default_shapes_at_once
from gemmtune.spec import GemmSpec
from gemmtune.tune.priming import primed_candidates
from gemmtune.tune.space import candidate_set, forget, prime, space_for, valid_codes

SPEC = GemmSpec(256, 384, 512, layout="nt", dtype="bf16")


def test_candidate_set_takes_primed_codes():
    space = space_for("simt")
    done: Future = Future()
    done.set_result(np.array([3, 5, 8]))
    prime("simt", SPEC, "sm_90", done)
    try:
        assert candidate_set(space, SPEC, "sm_90").codes.tolist() == [3, 5, 8]
    finally:
        forget("simt", SPEC, "sm_90")
    assert candidate_set(space, SPEC, "sm_90").codes.tolist() == valid_codes(space, SPEC, "sm_90").tolist()


def test_a_cancelled_priming_falls_back_to_the_analysis_here():
    space = space_for("simt")
    cancelled: Future = Future()
    cancelled.cancel()
    prime("simt", SPEC, "sm_90", cancelled)
    try:
        assert candidate_set(space, SPEC, "sm_90").codes.tolist() == valid_codes(space, SPEC, "sm_90").tolist()
    finally:
        forget("simt", SPEC, "sm_90")


def test_primed_codes_from_the_pool_equal_the_analysis_here():
    specs = [GemmSpec(1024, 1024, 1024, layout="nt", dtype="bf16"), GemmSpec(128, 4096, 4096, layout="nt", dtype="bf16")]
    items = [("wgmma", s) for s in specs] + [("simt", SPEC)]
    with primed_candidates(items, "sm_90") as pool:
        got = {(f, s): candidate_set(space_for(f), s, "sm_90").codes for f, s in items}
    for (family, spec), codes in got.items():
        assert np.array_equal(codes, valid_codes(space_for(family), spec, "sm_90")), (family, spec)
    if pool is not None:  # primed entries are dropped with the pool
        from gemmtune.tune import space as space_module
        assert not any(key[1] in specs for key in space_module._PRIMED)


def test_default_shapes_at_once():
    class Client:
        def scheduler_info(self):
            return {"workers": {"a": {}, "b": {}, "c": {}, "d": {}}}

    trials = argparse.Namespace(trials=240, time_s=None, workers=None)
    time_only = argparse.Namespace(trials=None, time_s=60.0, workers=None)
    assert default_shapes_at_once(20, None, trials) == 1
    assert default_shapes_at_once(20, Client(), trials) == 20
    assert default_shapes_at_once(100, Client(), trials) == MAX_SHAPES_AT_ONCE
    assert default_shapes_at_once(20, Client(), time_only) == 4
    assert default_shapes_at_once(2, Client(), time_only) == 2
