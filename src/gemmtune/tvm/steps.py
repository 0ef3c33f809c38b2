"""The manual TensorIR schedule for GEMM: a thread mapping and five composable steps.

    bind_threads           the naive kernel every schedule starts from: the output is split into
                           blocks of threads_m×threads_n threads, each thread owning a
                           thread_m×thread_n micro-tile; the k loop runs outside the micro-tile.
    1 shared_memory_tiling stage block_k-deep slices of A and B in shared memory per k step
    2 register_tiling      stage each thread's A column and B row slices in registers, unroll the
                           micro-tile so every loaded value is reused thread_n (thread_m) times
    3 cooperative_fetching the block's threads copy the slices together, `vector` floats per load
    4 write_cache          accumulate in registers, write D (or the accumulator) once at the end
    5 epilogue_fusion      inline ReLU and +C into that write-back: one kernel, no accumulator in
                           global memory (a no-op for a plain GEMM)

Each step is a function `(schedule, tiles) -> None` that finds its blocks and loops by name, so
the steps compose in this order (ladder.py applies prefixes; tuning.py applies all five inside a
MetaSchedule space). `tiles` holds ints, or sampled ExprRVs in a search space. Unit loops are
kept everywhere (preserve_unit_loops): MetaSchedule replays a trace with new tile decisions and
requires every instruction to return as many loops as it did when the trace was recorded.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .tiles import Tiles

GEMM = "gemm"
EPILOGUE = "epilogue"
SHARED_COPIES = ("A_shared", "B_shared")  # the block names TVM gives cache_read(..., "shared")

Schedule = Any  # tvm.s_tir.Schedule (tvm is imported lazily)


def find_block(sch: Schedule, name: str) -> Any | None:
    """The block called `name`, or None (sch.get_sblock raises instead)."""
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(rv).name_hint == name:
            return rv
    return None


def is_bound(sch: Schedule, loop: Any) -> bool:
    """Whether `loop` is bound to a GPU thread axis."""
    return sch.get(loop).thread_binding is not None


def gemm_block(sch: Schedule) -> Any:
    """The multiply-accumulate block ("gemm", or "gemm_update" once write_cache split off its init)."""
    found = find_block(sch, GEMM) or find_block(sch, GEMM + "_update")
    if found is None:
        raise ConfigError("the schedule has no GEMM block")
    return found


def thread_loop(sch: Schedule, block: Any) -> Any:
    """The loop around `block` bound to threadIdx.x."""
    for loop in sch.get_loops(block):
        binding = sch.get(loop).thread_binding
        if binding is not None and binding.thread_tag == "threadIdx.x":
            return loop
    raise ConfigError("no loop is bound to threadIdx.x: apply bind_threads first")


def _gemm_loops(sch: Schedule) -> list[Any]:
    """After bind_threads: [block_m, block_n, thread, k..., micro_m, micro_n]."""
    return list(sch.get_loops(sch.get_sblock(GEMM)))


def bind_threads(sch: Schedule, t: Tiles) -> None:
    """Blocks over the output, one thread per thread_m×thread_n micro-tile (the naive kernel)."""
    gemm = sch.get_sblock(GEMM)
    i, j, k = sch.get_loops(gemm)
    i_block, i_thread, i_micro = sch.split(i, [None, t.threads_m, t.thread_m])
    j_block, j_thread, j_micro = sch.split(j, [None, t.threads_n, t.thread_n])
    sch.reorder(i_block, j_block, i_thread, j_thread, k, i_micro, j_micro)
    sch.bind(i_block, "blockIdx.y")
    sch.bind(j_block, "blockIdx.x")
    # Fused with j inside, so neighbouring threads touch neighbouring columns (coalesced B and D).
    sch.bind(sch.fuse(i_thread, j_thread), "threadIdx.x")


def shared_memory_tiling(sch: Schedule, t: Tiles) -> None:
    """Split k into block_k slices; copy each slice of A and B to shared memory first."""
    gemm = sch.get_sblock(GEMM)
    k_outer, _ = sch.split(_gemm_loops(sch)[3], [None, t.block_k])
    for index in (0, 1):  # read 0 is A, read 1 is B
        sch.compute_at(sch.cache_read(gemm, index, "shared"), k_outer, preserve_unit_loops=True)


def register_tiling(sch: Schedule, t: Tiles) -> None:
    """Load the micro-tile's A column and B row into registers per k; unroll the outer product."""
    gemm = sch.get_sblock(GEMM)
    loops = _gemm_loops(sch)
    k_inner, micro_m, micro_n = loops[-3:]
    for index in (0, 1):
        sch.compute_at(sch.cache_read(gemm, index, "local"), k_inner, preserve_unit_loops=True)
    # Unrolled, every fragment and accumulator index is a constant, so nvcc keeps them in registers.
    for loop in (micro_m, micro_n):
        sch.unroll(loop)


def cooperative_fetching(sch: Schedule, t: Tiles) -> None:
    """All threads copy each shared slice together, `vector` consecutive floats per load."""
    for name in SHARED_COPIES:
        copy = find_block(sch, name)
        if copy is None:
            raise ConfigError("cooperative fetching distributes the shared-memory copies: "
                              "apply shared_memory_tiling first")
        rows, cols = sch.get_loops(copy)[-2:]
        fused = sch.fuse(rows, cols)
        if isinstance(t.threads, int):
            _, thread, lanes = sch.split(fused, [None, t.threads, t.vector])
            sch.bind(thread, "threadIdx.x")
            sch.vectorize(lanes)
        else:
            # Sampled tiles: a trace cannot record a split by threads_m*threads_n (a product of
            # random variables), so leave the split to MetaSchedule's RewriteCooperativeFetch
            # postprocessor, which reads the thread count off the bound loops. Same result.
            sch.annotate(copy, "meta_schedule.cooperative_fetch", t.vector)


def write_cache(sch: Schedule, t: Tiles) -> None:
    """Accumulate the micro-tile in registers; zero them once and write them back once."""
    gemm = sch.get_sblock(GEMM)
    loops = _gemm_loops(sch)
    write_back = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(write_back, loops[2], preserve_unit_loops=True)
    # Without this the zeroing is an `if (k == 0)` inside the innermost loop.
    sch.decompose_reduction(gemm, loops[3])
    # The write-back loops are left rolled: nvcc unrolls them (constant trip counts), and the
    # CUDA text stays a loop a person can read.


def epilogue_fusion(sch: Schedule, t: Tiles) -> None:
    """Compute ReLU(acc) + C in the write-back itself (plain GEMM: nothing to fuse)."""
    epilogue = find_block(sch, EPILOGUE)
    if epilogue is None:
        return
    if find_block(sch, "acc_local") is None:
        raise ConfigError("epilogue fusion inlines ReLU and +C into the register write-back: "
                          "apply write_cache first")
    sch.reverse_compute_inline(epilogue)


@dataclass(frozen=True)
class Step:
    name: str
    summary: str
    apply: Callable[[Schedule, Tiles], None]


STEPS: tuple[Step, ...] = (
    Step("shared_memory", "A and B slices staged in shared memory", shared_memory_tiling),
    Step("register_tiling", "A/B fragments in registers, micro-tile unrolled", register_tiling),
    Step("cooperative_fetch", "threads copy the slices together, vector loads", cooperative_fetching),
    Step("write_cache", "accumulators in registers, one write-back", write_cache),
    Step("epilogue_fusion", "ReLU and +C inlined into the write-back", epilogue_fusion),
)
STEP_NAMES = tuple(step.name for step in STEPS)


def apply_all(sch: Schedule, t: Tiles) -> None:
    """The full manual schedule: bind_threads and all five steps."""
    bind_threads(sch, t)
    for step in STEPS:
        step.apply(sch, t)
