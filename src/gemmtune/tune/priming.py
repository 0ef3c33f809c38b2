"""Candidate sets computed ahead, in other processes, while the cluster measures cuBLAS.

Analysing a family's space for one spec (space._analyze) runs the rules' Python predicates over
their footprints: about 2 s of CPU for a wgmma shape. tune-many's client tunes many shapes from
threads of one process, so those seconds used to run one after another under the GIL, each shape
waiting for the ones before it while the GPUs idled (a two-GPU run of the 20-shape Llama layer lost
about 10 s at its start this way, 2026-11-26). Here a pool of spawned processes analyses every
shape at once; `space.candidate_set` takes the primed codes when they are there.
"""
from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np

from ..spec import GemmSpec
from .space import forget, prime, space_for, valid_codes

MAX_PROCESSES = 8  # past this the spawn and import time of each process costs more than it saves


def codes_in_process(family: str, spec_json: str, arch: str) -> np.ndarray:
    """The pool's task: the valid codes of `family`'s space for the spec (computed in this process)."""
    return valid_codes(space_for(family), GemmSpec.from_json(json.loads(spec_json)), arch)


def process_count(shapes: int) -> int:
    return max(1, min(shapes, MAX_PROCESSES, (os.cpu_count() or 2) - 1))


@contextmanager
def primed_candidates(items: Sequence[tuple[str, GemmSpec]], arch: str) -> Iterator[Executor | None]:
    """Analyse every (family, spec) in a process pool from now on; the pool closes on exit. With
    fewer than two shapes (nothing to overlap) or one CPU it does nothing."""
    unique = list(dict.fromkeys(items))
    if len(unique) < 2 or (os.cpu_count() or 1) < 2:
        yield None
        return
    pool = ProcessPoolExecutor(process_count(len(unique)), mp_context=multiprocessing.get_context("spawn"))
    try:
        for family, spec in unique:
            prime(family, spec, arch, pool.submit(codes_in_process, family, json.dumps(spec.to_json()), arch))
        yield pool
    finally:
        for family, spec in unique:
            forget(family, spec, arch)
        pool.shutdown(wait=False, cancel_futures=True)
