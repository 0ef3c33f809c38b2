"""The CUDA-core fp32 family's Config, its constraints and the classic optimization ladder.

One frozen dataclass covers every step of the ladder; the steps are just parameter choices.
Constraints are named predicates that return a reason string when they reject a config.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from ...spec import GemmSpec
from ..config_base import STATIC_SMEM_LIMIT, FamilyConfig, arch_number, rejections_by  # noqa: F401 (arch_number: re-exported)

NAME = "simt"
VERSION = "3"
KINDS = ("naive", "coalesced", "tiled")
MAX_ACCUMULATORS = 128  # per thread; more spills on sm_80/sm_90 with 255 registers
C_STAGE_PAD = 4  # floats of padding per row of the staged C tile (bank conflicts; keeps 16 B alignment)
# Shared memory one block may opt in to, per architecture (CUDA programming guide, compute capabilities).
OPTIN_SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


@dataclass(frozen=True, order=True)
class SimtConfig(FamilyConfig):
    """Parameters of one CUDA-core kernel.

    kind: naive (one thread per output, rows along threadIdx.x: uncoalesced), coalesced (one
      thread per output, columns along threadIdx.x), tiled (shared-memory tiles, everything else).
    bm×bn: the block's output tile (for naive/coalesced: the thread block edge bm×bn).
    bk: the depth of one shared-memory k-slice.
    tm×tn: outputs per thread in one micro-tile (register blocking).
    wm×wn, wniter: warp tile and its column sub-iterations (wm=0: no warp tiling).
    vec: 4 = 128-bit global loads and shared reads where alignment allows, 1 = scalar.
    stages: shared-memory buffers (2 = double buffering: load the next slice while computing).
    async_copy: global->shared through cp.async (sm_80+) for operands stored k-major (copied
      unchanged); an operand that must be transposed into shared memory always stages in registers.
    pad: floats of padding per shared row against bank conflicts (0 or 4 keeps 16-byte alignment).
    unroll: unroll factor of the inner k loop (0 = full); full unrolling can push a 128-accumulator
      thread past 255 registers, so partial unrolling is the default.
    prefetch_c: for epilogues that read C, ask L2 for the block's C tile when the block starts, so
      the write-back's C reads hit in L2 instead of waiting on DRAM after the main loop.
    stage_c: for epilogues that read C, copy the block's C tile into (dynamic) shared memory by
      cp.async while the last two k-slices are multiplied, so the write-back reads C from shared
      memory instead of waiting on DRAM; costs BM×(BN+4) floats of shared memory (sm_80+, stages=2).
      A no-op for epilogues that do not read C.
    split_k: blocks that share one output tile, each multiplying an equal share of the k-slices
      (grid z); they add their partial sums into D in turn (serial reduction ordered by a per-tile
      semaphore) and the last applies the epilogue. For shapes whose tiles do not fill the GPU
      (small M·N, large K). 1 = off (and left out of the JSON, so keys from before it stay valid).
    split_reduce: how the split_k partial sums meet. "serial": in D, one split after another (a
      turn per split, so the chain grows with split_k; left out of the JSON). "workspace": every
      split stores its partial tile to a workspace and counts itself in; the last to arrive adds
      the split_k partials in split order (deterministic) and writes D, so the end costs about one
      turn whatever split_k is.
    """

    kind: str = "tiled"
    bm: int = 128
    bn: int = 128
    bk: int = 16
    tm: int = 8
    tn: int = 4
    wm: int = 64
    wn: int = 64
    wniter: int = 4
    vec: int = 4
    stages: int = 2
    async_copy: bool = True
    pad: int = 0
    unroll: int = 8
    prefetch_c: bool = False
    stage_c: bool = False
    split_k: int = 1
    split_reduce: str = "serial"
    FAMILY_LABEL = "simt"

    def to_json(self) -> dict:
        data = super().to_json()
        if data["split_k"] == 1:  # configs (and database keys) from before split-K stay unchanged
            del data["split_k"]
        if data["split_reduce"] == "serial":  # likewise for configs from before the workspace reduction
            del data["split_reduce"]
        return data

    # --- derived shape --------------------------------------------------------------------
    @property
    def warptiled(self) -> bool:
        return self.kind == "tiled" and self.wm > 0

    @property
    def threads(self) -> int:
        if self.kind != "tiled":
            return self.bm * self.bn
        if self.warptiled:
            return (self.bm // self.wm) * (self.bn // self.wn) * 32
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def wmiter(self) -> int:
        """Row sub-iterations of a warp tile, so that 32 threads cover wm×wn."""
        if not self.warptiled:
            return 1
        return max(1, (self.wm * self.wn) // (32 * self.tm * self.tn * self.wniter))

    @property
    def accumulators(self) -> int:
        return self.tm * self.tn * self.wmiter * (self.wniter if self.warptiled else 1)

    def smem_bytes(self) -> int:
        """Static shared memory: the A and B k-slices."""
        if self.kind != "tiled":
            return 0
        return 4 * self.stages * self.bk * ((self.bm + self.pad) + (self.bn + self.pad))

    def c_stage_bytes(self, spec: GemmSpec) -> int:
        """Dynamic shared memory for the staged C tile (0 unless stage_c and the epilogue reads C)."""
        if self.kind != "tiled" or not (self.stage_c and spec.epilogue.reads_c):
            return 0
        return 4 * self.bm * (self.bn + C_STAGE_PAD)

    # --- naming -----------------------------------------------------------------------------
    def describe(self) -> str:
        if self.kind != "tiled":
            return f"{self.kind} {self.bm}x{self.bn}"
        warp = f" warp {self.wm}x{self.wn}/{self.wniter}" if self.warptiled else ""
        copy = " cp.async" if self.async_copy else ""
        return (f"tile {self.bm}x{self.bn}x{self.bk} thread {self.tm}x{self.tn}{warp} vec{self.vec} "
                f"stages{self.stages}{copy}" + (f" pad{self.pad}" if self.pad else "")
                + (f" unroll{self.unroll}" if self.unroll else " unroll-full")
                + (" prefetchC" if self.prefetch_c else "") + (" stageC" if self.stage_c else "")
                + (f" splitK{self.split_k}" if self.split_k > 1 else "")
                + (" workspace" if self.split_reduce == "workspace" else ""))



def _simple(kind: str, edge: int = 32) -> SimtConfig:
    return SimtConfig(kind=kind, bm=edge, bn=edge, bk=1, tm=1, tn=1, wm=0, wn=0, wniter=1, vec=1,
                      stages=1, async_copy=False, pad=0)


def ladder(arch: str = "sm_90") -> list[tuple[str, SimtConfig]]:
    """The classic optimization ladder, one named config per step (after Simon Boehm's guide)."""
    tiled = SimtConfig(bm=32, bn=32, bk=32, tm=1, tn=1, wm=0, wn=0, wniter=1, vec=1, stages=1,
                       async_copy=False)
    blocktile2d = tiled.with_(bm=128, bn=128, bk=8, tm=8, tn=8)
    warptile = SimtConfig(bm=128, bn=128, bk=16, tm=8, tn=4, wm=64, wn=64, wniter=4, vec=4, stages=1,
                          async_copy=False)
    has_cp_async = arch_number(arch) >= 80
    return [
        ("naive", _simple("naive")),
        ("coalesced", _simple("coalesced")),
        ("smem_tiling", tiled),
        ("blocktile_1d", tiled.with_(bm=64, bn=64, bk=8, tm=8, tn=1)),
        ("blocktile_2d", blocktile2d),
        ("vectorized", blocktile2d.with_(vec=4)),
        ("warptiling", warptile),
        # Double buffering holds a second slice in flight (registers or cp.async), so this step halves
        # the accumulators per thread (256 threads of 8x4x2) to stay clear of 255 registers everywhere.
        ("double_buffer", warptile.with_(wn=32, wniter=2, stages=2, async_copy=has_cp_async)),
    ]


# --- constraints -------------------------------------------------------------------------------
Constraint = Callable[[SimtConfig, GemmSpec, str], "str | None"]


def _kind(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    return None if c.kind in KINDS else f"unknown kind '{c.kind}'"


def _threads(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.threads > 1024:
        return f"{c.threads} threads per block exceed 1024"
    if c.threads < 32:
        return f"{c.threads} threads per block is under one warp"
    return None


def _thread_tile(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.kind != "tiled":
        return None
    if c.bm % c.tm or c.bn % c.tn:
        return f"thread tile {c.tm}x{c.tn} does not divide block tile {c.bm}x{c.bn}"
    return None


def _warp_tile(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if not c.warptiled:
        return None
    if c.bm % c.wm or c.bn % c.wn:
        return f"warp tile {c.wm}x{c.wn} does not divide block tile {c.bm}x{c.bn}"
    if c.wn % c.wniter or (c.wn // c.wniter) % c.tn:
        return f"warp columns {c.wn}/{c.wniter} are not a multiple of tn={c.tn}"
    per_warp = 32 * c.tm * c.tn * c.wniter
    if (c.wm * c.wn) % per_warp or c.wm % c.wmiter or (c.wm // c.wmiter) % c.tm:
        return f"32 threads of {c.tm}x{c.tn}x{c.wniter} cannot tile warp {c.wm}x{c.wn}"
    rows, cols = (c.wm // c.wmiter) // c.tm, (c.wn // c.wniter) // c.tn
    if rows * cols != 32:
        return f"warp sub-tile needs {rows}x{cols} threads, not 32"
    return None


def _loads_divide(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.kind != "tiled" or c.threads > 1024 or c.threads == 0:
        return None
    for name, tile in (("A", c.bm * c.bk), ("B", c.bn * c.bk)):
        if tile % (c.threads * c.vec):
            return f"{name} tile of {tile} floats does not split evenly over {c.threads} threads x vec{c.vec}"
    return None


def _vector(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.vec not in (1, 4):
        return f"vec must be 1 or 4, not {c.vec}"
    if c.vec == 4 and c.kind == "tiled" and (c.tm % 4 or c.tn % 4 or c.bk % 4):
        return f"vec4 needs tm, tn and bk divisible by 4 (tm={c.tm}, tn={c.tn}, bk={c.bk})"
    return None


def _smem(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.smem_bytes() > STATIC_SMEM_LIMIT:
        return f"{c.smem_bytes()} B of shared memory exceed the {STATIC_SMEM_LIMIT} B static limit"
    return None


def _c_stage(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if not c.stage_c:
        return None
    if c.kind != "tiled" or c.stages != 2 or arch_number(arch) < 80:
        return "stage_c needs a tiled kernel with stages=2 on sm_80 or newer (cp.async)"
    limit = OPTIN_SMEM_LIMIT.get(arch_number(arch), 99 * 1024)
    total = c.smem_bytes() + c.c_stage_bytes(s)
    if total > limit:
        return f"{total} B of shared memory with the staged C tile exceed the {limit} B {arch} allows a block"
    return None


def _pipeline(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.stages not in (1, 2):
        return f"stages must be 1 or 2, not {c.stages}"
    if c.async_copy and c.stages != 2:
        return "cp.async needs stages=2"
    if c.async_copy and arch_number(arch) < 80:
        return f"cp.async needs sm_80 or newer, not {arch}"
    if c.pad not in (0, 4):
        return f"pad must be 0 or 4, not {c.pad}"
    if c.unroll not in (0, 2, 4, 8, 16):
        return f"unroll must be 0 (full), 2, 4, 8 or 16, not {c.unroll}"
    return None


def _registers(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.accumulators > MAX_ACCUMULATORS:
        return f"{c.accumulators} accumulators per thread would spill (limit {MAX_ACCUMULATORS})"
    return None


MAX_SPLIT_K = 32
SPLIT_REDUCES = ("serial", "workspace")
MAX_WORKSPACE_BYTES = 256 << 20  # the workspace reduction's partial tiles (module memory)


def workspace_bytes(c: SimtConfig, s: GemmSpec) -> int:
    """Bytes of partial tiles the workspace reduction keeps: every split's BM×BN tile, padded."""
    if c.split_reduce != "workspace":
        return 0
    return 4 * -(-s.m // c.bm) * -(-s.n // c.bn) * c.split_k * c.bm * c.bn


def _split_k(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.split_k == 1:
        return None
    if not 1 <= c.split_k <= MAX_SPLIT_K:
        return f"split_k={c.split_k}: 1 to {MAX_SPLIT_K}"
    if c.kind != "tiled" or c.stage_c:
        return "split-K runs in the tiled kernel without stage_c (only the last split reads C)"
    k_tiles = -(-s.k // c.bk)
    if c.split_k > k_tiles:
        return f"split_k={c.split_k} exceeds the {k_tiles} k-slices of K={s.k} (a split would be empty)"
    return None


def _split_reduce(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    if c.split_reduce not in SPLIT_REDUCES:
        return f"split_reduce must be one of {', '.join(SPLIT_REDUCES)}, not {c.split_reduce!r}"
    if c.split_reduce == "workspace" and c.split_k == 1:
        return "split_reduce='workspace' needs split_k > 1 (without splits it is a twin of 'serial')"
    if workspace_bytes(c, s) > MAX_WORKSPACE_BYTES:
        return f"{workspace_bytes(c, s) >> 20} MiB of split-K workspace exceed {MAX_WORKSPACE_BYTES >> 20} MiB"
    return None


def _dtype(c: SimtConfig, s: GemmSpec, arch: str) -> str | None:
    return None if s.dtype == "fp32" else f"the simt family computes fp32 only, not {s.dtype}"


CONSTRAINTS: dict[str, Constraint] = {
    "kind": _kind, "dtype": _dtype, "threads": _threads, "thread_tile": _thread_tile,
    "warp_tile": _warp_tile, "vector": _vector, "loads_divide": _loads_divide, "shared_memory": _smem,
    "pipeline": _pipeline, "c_stage": _c_stage, "registers": _registers, "split_k": _split_k,
    "split_reduce": _split_reduce,
}


def rejections(config: SimtConfig, spec: GemmSpec, arch: str = "sm_90") -> dict[str, str]:
    """{constraint name: reason} for every constraint the config breaks; empty when valid."""
    return rejections_by(CONSTRAINTS, config, spec, arch)


def default_config(spec: GemmSpec, arch: str = "sm_90") -> SimtConfig:
    """A sound config for any shape: the last ladder step (warp tiles, double buffering)."""
    return ladder(arch)[-1][1]


def to_text(config: SimtConfig) -> str:
    return json.dumps(config.to_json(), sort_keys=True)
