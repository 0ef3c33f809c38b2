"""Tile parameters of the manual TensorIR schedule, and the reasons a fixed choice is rejected.

The same `Tiles` carries plain ints for a fixed schedule (the ladder, `tvm evaluate --manual`)
and MetaSchedule random variables inside the tunable space (tuning.py samples each factor with
`sample_perfect_tile`/`sample_categorical`); the schedule steps only multiply and split with
them, which works for both. Only int tiles can be validated ahead of time.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..spec import GemmSpec

# An int for a fixed schedule, or a tvm ExprRV sampled inside a MetaSchedule search space.
Factor = Any

STATIC_SMEM_LIMIT = 48 * 1024  # bytes a block may declare statically (TVM's default scope "shared")
MAX_THREADS = 1024
MAX_ACCUMULATORS = 128  # per thread: more spill on sm_80/sm_90 (255 registers)


@dataclass(frozen=True)
class Tiles:
    """Block tile (threads_m·thread_m) × (threads_n·thread_n) × block_k; thread tile thread_m × thread_n.

    threads_m × threads_n threads per block, each computing thread_m × thread_n outputs;
    block_k: depth of one shared-memory slice; vector: floats per global load (1, 2, 4).
    """

    threads_m: Factor = 16
    thread_m: Factor = 8
    threads_n: Factor = 16
    thread_n: Factor = 8
    block_k: Factor = 8
    vector: Factor = 4

    @property
    def block_m(self) -> Factor:
        return self.threads_m * self.thread_m

    @property
    def block_n(self) -> Factor:
        return self.threads_n * self.thread_n

    @property
    def threads(self) -> Factor:
        return self.threads_m * self.threads_n

    def describe(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} tile, {self.thread_m}x{self.thread_n}/thread, "
                f"{self.threads} thr, vec{self.vector}")

    def to_json(self) -> dict:
        return {key: int(value) for key, value in asdict(self).items()}

    @staticmethod
    def from_json(data: dict) -> Tiles:
        names = {f.name for f in fields(Tiles)}
        return Tiles(**{key: int(value) for key, value in data.items() if key in names})


def _divides(name: str, size: int, tile: int) -> str | None:
    return None if size % tile == 0 else f"{name}={size} is not a multiple of the tile {tile}"


def rejections(tiles: Tiles, spec: GemmSpec) -> tuple[str, ...]:
    """Why the full manual schedule with int `tiles` cannot serve `spec` (empty: it can).

    The shared-memory copies are split exactly over the block's threads and vectorized, so the
    problem must divide into whole tiles; ragged shapes go to naive, dlight or MetaSchedule.
    """
    t = tiles
    found = [_divides("M", spec.m, t.block_m), _divides("N", spec.n, t.block_n), _divides("K", spec.k, t.block_k)]
    if t.threads > MAX_THREADS:
        found.append(f"{t.threads} threads per block exceed {MAX_THREADS}")
    for what, tile in (("A", t.block_m * t.block_k), ("B", t.block_n * t.block_k)):
        if tile % (t.threads * t.vector):
            found.append(f"the {what} tile ({tile} floats) does not split into {t.threads} threads × {t.vector}")
    inner = (t.block_m if spec.a_trans else t.block_k, t.block_k if spec.b_trans else t.block_n)
    if t.vector not in (1, 2, 4) or any(edge % t.vector for edge in inner):
        found.append(f"vector={t.vector} must be 1, 2 or 4 and divide the tiles' contiguous edges {inner}")
    smem = 4 * (t.block_m + t.block_n) * t.block_k
    if smem > STATIC_SMEM_LIMIT:
        found.append(f"{smem} B of shared memory exceed the static limit {STATIC_SMEM_LIMIT}")
    if t.thread_m * t.thread_n > MAX_ACCUMULATORS:
        found.append(f"{t.thread_m * t.thread_n} accumulators per thread would spill (max {MAX_ACCUMULATORS})")
    return tuple(reason for reason in found if reason)
