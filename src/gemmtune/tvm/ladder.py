"""The optimization ladder of the manual schedule: naive, then each step added in turn.

Row r applies bind_threads and the first r steps with the row's own tiles (like the native
SIMT ladder, a row's tiles fit what it has: without register tiling one output per thread).
A prefix can leave work TVM cannot place on the GPU, so `complete` gives it the plainest
correct mapping and says what it did:
  - shared-memory copies not yet distributed by cooperative_fetching: one float per thread
    per iteration (otherwise every thread would copy the whole slice);
  - an epilogue not yet fused: its own kernel over an accumulator in global memory. Such a
    module is not one KernelSource (convert.kernel_source rejects it with the reason); the
    ladder's rows (rows.ladder_rows) verify and time it as the launch sequence TVM produced
    (sequence.py: GEMM into `acc`, then ReLU + C), and show-cuda --raw prints both kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..spec import GemmSpec
from . import steps as st
from .tiles import Tiles, rejections
from .workloads import gemm, module

EPILOGUE_THREADS = 256  # threads per block of a separate epilogue kernel


@dataclass(frozen=True)
class Rung:
    name: str
    steps: int  # how many of steps.STEPS this row applies after bind_threads
    tiles: Tiles


FULL_TILES = Tiles()  # 128×128×8 block tile, 8×8 per thread, 256 threads, float4 loads
LADDER: tuple[Rung, ...] = (
    Rung("naive", 0, Tiles(16, 1, 16, 1, 8, 1)),
    Rung("shared_memory", 1, Tiles(32, 1, 32, 1, 32, 1)),
    Rung("register_tiling", 2, FULL_TILES),
    Rung("cooperative_fetch", 3, FULL_TILES),
    Rung("write_cache", 4, FULL_TILES),
    Rung("epilogue_fusion", 5, FULL_TILES),
)
RUNG_NAMES = tuple(r.name for r in LADDER)


def rung(name: str) -> Rung:
    found = [r for r in LADDER if r.name == name]
    if not found:
        raise ConfigError(f"unknown ladder step '{name}'; known: {', '.join(RUNG_NAMES)}")
    return found[0]


def _distribute_copies(sch: Any) -> list[str]:
    done = []
    for name in st.SHARED_COPIES:
        copy = st.find_block(sch, name)
        # The copy's own loops are the last two (compute_at keeps one per buffer dimension);
        # the loops above them are the GEMM's, bound to blocks and threads anyway.
        if copy is None or any(st.is_bound(sch, loop) for loop in sch.get_loops(copy)[-2:]):
            continue
        rows, cols = sch.get_loops(copy)[-2:]
        threads = sch.get(st.thread_loop(sch, st.gemm_block(sch))).extent
        _, thread = sch.split(sch.fuse(rows, cols), [None, threads])
        sch.bind(thread, "threadIdx.x")
        done.append(f"{name}: one float per thread per iteration")
    return done


def _separate_epilogue(sch: Any) -> list[str]:
    epilogue = st.find_block(sch, st.EPILOGUE)
    if epilogue is None:
        return []
    block, thread = sch.split(sch.fuse(*sch.get_loops(epilogue)), [None, EPILOGUE_THREADS])
    sch.bind(block, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    return ["epilogue: a second kernel reading the accumulator from global memory"]


def complete(sch: Any) -> tuple[str, ...]:
    """Map what the applied steps left unscheduled; returns one note per thing it mapped."""
    return tuple(_distribute_copies(sch) + _separate_epilogue(sch))


@dataclass(frozen=True)
class Scheduled:
    """A ladder row's schedule (its trace is schedule.trace) and what `complete` added."""

    rung: Rung
    schedule: Any  # tvm.s_tir.Schedule
    notes: tuple[str, ...]

    @property
    def mod(self) -> Any:
        return self.schedule.mod


def apply_prefix(spec: GemmSpec, count: int, tiles: Tiles) -> tuple[Any, tuple[str, ...]]:
    """bind_threads + the first `count` steps on a fresh schedule, then `complete`."""
    import tvm

    if not 0 <= count <= len(st.STEPS):
        raise ConfigError(f"a prefix has 0 to {len(st.STEPS)} steps, not {count}")
    reasons = rejections(tiles, spec) if count else ()
    if reasons:
        raise ConfigError(f"tiles {tiles.describe()} do not fit {spec.short()}: {'; '.join(reasons)} "
                          "(the naive and dlight schedules and tuning take any shape)")
    sch = tvm.s_tir.Schedule(module(gemm(spec)))
    st.bind_threads(sch, tiles)
    for step in st.STEPS[:count]:
        step.apply(sch, tiles)
    return sch, complete(sch)


def schedule_rung(spec: GemmSpec, name: str, tiles: Tiles | None = None) -> Scheduled:
    """The schedule of ladder row `name` (its own tiles unless `tiles` is given)."""
    row = rung(name)
    sch, notes = apply_prefix(spec, row.steps, tiles or row.tiles)
    return Scheduled(row, sch, notes)
