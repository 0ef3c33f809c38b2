"""The Hopper tensor-core family's Config, its constraints with reasons, and its ladder.

One frozen dataclass spans the ladder: TMA + wgmma with one shared-memory stage, then a multistage
pipeline, warp specialization (a producer warpgroup feeding consumer warpgroups through mbarriers),
a wider tile, a persistent grid with grouped rasterization, and thread-block clusters that multicast
B. Each step is a parameter choice, so the tuner searches the same space the ladder walks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from ...arch import geometry, known_arch
from ...kernel_source import StagedOperand
from ...spec import GATED_DTYPES, GemmSpec
from ..config_base import FamilyConfig, arch_number, ceil_div, rejections_by, valid_named
from .groups import CPath, EpilogueGroup, MainloopGroup, ScheduleGroup

FAMILY = "wgmma"
VERSION = "1"
DTYPES = ("bf16", "fp16", "tf32", "fp32")  # fp32: as 3xtf32 (split_fp32)
SWIZZLE_BYTES = 128  # every tile row in shared memory is one 128-byte swizzle span
SMEM_SLACK = 1024  # the tiles are realigned to 1024 bytes (the swizzle atom) inside dynamic smem
# The tile widths the space and the chooser use. Any multiple of 8 from 64 to 256 is a wgmma N and
# builds (a width fitted to N: 5000x300 in 128x104 tiles leaves 4% of the tiles outside D where 128x128
# leaves 22%), but only these four have been measured; fitted widths are for explicit configs until
# they are (git show 5f4c93d:bench/probes/wgmma_fitted_width.py, tests/test_gpu_wgmma.py::test_fitted_widths).
MEASURED_BN = (64, 128, 192, 256)
MAX_ACCUMULATORS = 128  # fp32 accumulators per consumer thread; more leaves no room to address
# The SM count, the shared memory a block may opt in to and the persistent grid of clusters come from
# the GPU's geometry (gemmtune.arch: the device's, or the arch table's H100 SXM for sm_90). Any grid
# is correct; see IN_STEP_BLOCKS. Clusters are placed within a GPC; with GPCs of uneven size, not every
# SM can hold a block of a cluster, and a cluster left over would run after the others (twice the
# time). The persistent grid launches as many clusters as always fit (Geometry.cluster_grid: the
# driver's cuOccupancyMaxActiveClusters on an H100 SXM and an H200). Pairs were launched 64 at a time
# until the split tail could share out a last wave over half full (1024 units on 66 pairs: 15.5
# rounds, not 16).
# Where all the SMs take no fewer tile-times than 128 blocks, 128 are launched: 64 pairs (or 128
# blocks) run a wave of whole 8x8 squares of units (group_m = 8) and the next wave moves on by one
# square, while 66 pairs cut the squares unevenly: 4096^3 bf16 ran 0.8% slower and 8192^3 0.5%
# slower on 66 pairs than on 64 without a split tail (H100, same rounds; both run 4 and 16 rounds).
IN_STEP_BLOCKS = 128
C_SPREAD_ROWS = 16  # rows of one C box with c_spread: 32 boxes of a 128x256 fp16 tile, one per k-block
INPUT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
# 3xtf32: a k-block's three products go into a partial sum beside the running one (twice the
# accumulator registers): 96 a thread (a 128x192 tile of 2 consumers) compile without spills in the
# consumers' 232 registers (NVRTC 13.0, sm_90a); 128x256's 128 would need 256 for the sums alone.
SPLIT_MAX_ACCUMULATORS = 96
# Three consumer warpgroups and the producer are 512 threads: 128·40 + 384·152 registers fill the 64K, so a
# consumer holds at most 96 sums (m64n192) beside its addresses and epilogue values.
THREE_CONSUMER_MAX_ACCUMULATORS = 96
# With an operand stored MN-major the split also transposes its chunks, holding a 4x4 block (16
# values) per thread beside the sums: 128x192 then spills (nn 12 B, tn 64 B, tt 60 B at 4092^3;
# NVRTC 13.0), 128x128 does not.
SPLIT_TRANSPOSED_MAX_ACCUMULATORS = 64
SPLIT_BUFFERS = 2  # residual tiles: the k-block being multiplied and the next, split under its wgmma
OUT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def out_dtype(spec: GemmSpec) -> str:
    """D's storage type (and C's, bias's): the spec's out_dtype, else fp32 for tf32, else the input type."""
    default = "fp32" if spec.dtype == "tf32" else spec.dtype
    return getattr(spec, "out_dtype", None) or default


def splits_fp32(spec: GemmSpec) -> bool:
    """Whether the kernel multiplies fp32 inputs as 3xtf32: big·big + big·small + small·big, each
    operand split into tf32 parts in shared memory, every k-block's products summed apart and
    added to the running sum in fp32 (gemmtune.precision)."""
    return spec.dtype == "fp32"


@dataclass(frozen=True, order=True)
class WgmmaConfig(FamilyConfig):
    """Parameters of one wgmma + TMA kernel.

    bm×bn: the block's output tile; bk is fixed by the dtype (128 bytes of K per row: 64 16-bit
      values, 32 tf32), the width of one 128-byte swizzled row. bn is 64, 128, 192 or 256 in the
      space (MEASURED_BN); other multiples of 8 build, for B stored K-major (fitted widths, unmeasured).
    consumers: warpgroups (128 threads each) that issue wgmma; each owns bm/consumers rows.
    stages: shared-memory buffers in the TMA → wgmma ring (1 = load, wait, compute, repeat).
    specialized: one extra producer warpgroup issues every TMA copy (and gives its registers to the
      consumers with setmaxnreg); without it thread 0 issues copies between its own wgmmas.
    persistent: one block per SM walks the tiles (grid = SM count) instead of one block per tile.
    group_m: rasterization — consecutive tiles run down `group_m` rows of tiles before moving
      right, so blocks running together share A and B tiles in L2 (1 = row by row).
    cluster_m: blocks per cluster along M; with 2, the pair shares B: each loads half of the B tile
      and multicasts it to both (half the L2 → SM traffic for B); with 4, each loads a quarter.
    tma_store: the epilogue goes through a shared-memory tile: the producer TMA-loads the block's C
      tile there while the last k-blocks run (C is waiting when the math ends), each consumer
      overwrites it in place with D and one thread TMA-stores it (coalesced, asynchronous, edges
      clipped by TMA). Without it, threads store their fragments to D directly.
    store_slices: with the TMA-store epilogue, the tile is written and stored in this many column
      slices through a buffer that holds one slice (the store of one slice overlaps the writing of
      the next, and the next tile's main loop). A smaller buffer leaves room for one more stage.
      Epilogues that read C keep one slice: C is loaded as a whole tile under the main loop.
    pingpong: the two consumer warpgroups take turns: each owns whole tiles (alternate tiles of the
      block's sequence) instead of half of every tile, so one's epilogue runs while the other's
      wgmma keep the tensor cores busy. Each consumer then holds a bm×bn accumulator.
    c_spread: (TMA-store epilogue reading C) the producer loads the C tile as 16-row boxes, one per
      k-block, instead of all at once: the blocks run in step, so their C reads otherwise arrive at
      the memory as one burst that delays the A and B loads queued behind it.
    c_ring: (TMA-store epilogue reading C, cooperative consumers) C travels through the ring: after
      a tile's last k-block the producer loads its C, one store slice per ring slot (in the slot's
      larger operand region), and the epilogue reads each slice there and frees the slot. No
      dedicated C tile, so the store buffer can be sliced and a 4th stage fits beside it; the C
      loads are issued a ring's depth ahead of the epilogue that reads them.
    stmatrix: (TMA-store epilogue, 16-bit D) the fragment goes to the store buffer with stmatrix
      (and C comes out of shared memory with ldmatrix): four 8x8 blocks, a 32-bit word each per
      thread, per instruction, instead of one word per instruction, which shortens the epilogue
      that the tensor cores wait on.
    c_l2_prefetch: (c_ring) the producer asks L2 for the tile's C a box at a time, one every 2
      k-blocks before the ring loads it (TMA prefetch, no shared memory), so those loads read L2:
      C's DRAM reads spread out instead of arriving as one burst from every SM at once, which
      delays the next tile's first A and B loads queued behind it. (Spread over the whole tile, as
      before commit 2e102bc of 2026-11-23, C sat in L2 through the tile, pushing out A and B lines.)
    split_tail: (persistent grid) the tiles of the last, partial wave (all tiles when they are too
      few to fill the GPU) are split along K into equal ranges, one block each, so the tail fills
      the GPU (schedule.py); the block holding a tile's first k-block adds the others' fp32 sums.
      Where that tail is more than half the GPU, its k-blocks are cut into even shares instead.
    serpentine: (persistent grid) a block walks K forwards in one tile and backwards in the next.
      The blocks run in step, so a round that follows one sharing its A row-panels starts on the
      k-slabs the round before read last, which L2 (least recently used out first) still holds;
      walking forwards again it would start on the slabs evicted first.
    overlap_epilogue: (persistent, TMA-store epilogue in 2 or 4 slices, cooperative) the write-back of a
      whole tile hides under wgmma: the tile's last k-block is issued as two half-width wgmma
      groups (lower and upper BN/2 columns), the lower slice is written back while the upper
      group runs, and the next piece's first k-block starts on the lower half while the upper
      slice is written back. Every wgmma is then half-width (ptxas serialises the kernel when one
      256-wide wgmma covers registers that others use by halves).
    d_over_c: (c_ring, stmatrix) each consumer writes a slice of D over the slice of C it has just
      read, in C's ring slot, and TMA-stores it from there: no store buffer, so a slice never waits
      for the previous slice's store to have read a shared buffer, and one barrier a slice instead
      of two. The slot then goes back to the producer only once its store has read it: a slice's
      slot after the next slice's store is issued, the tile's last slot under the next piece's
      first wgmma (it holds that piece's 3rd or later k-block, loaded a ring's depth ahead).
    c_first_buffer: (d_over_c, 2 or 4 slices) the tile's first slice of C, and the D written over it,
      takes a buffer of its own (where the store buffer was) instead of a ring slot, so a tile's
      write-back holds one slot fewer when the next tile's k-blocks come: the GEMM alone starts a
      tile on a ring of k-blocks, d_over_c alone on one whose C slots go back only after their stores.
    round_big: (fp32 as 3xtf32) the big part of each value is x rounded to the nearest tf32, written
      over x in the stage, instead of x itself, which the tensor cores truncate: the residual is
      half as large, for one more shared-memory store per value.
    stage_operands: the launcher first copies A and/or B, whichever has rows that do not start on
      32-byte boundaries, into a workspace with 128-byte-aligned rows (kernel_source.StagedOperand)
      and the TMA loads read that. Needed where rows are not 16-byte multiples (TMA refuses them);
      a choice where they start 16 bytes off a 32-byte sector, which TMA loads at about half rate.
    split_cap: (split_tail, equal splits) cut each tile of the tail into at most this many K ranges
      (0: as many as fill the GPU, MIN_SHARE k-blocks each at least). Fewer pieces launch fewer
      blocks, and each sums fewer partial tiles after its main loop. Measured slower at every cap on
      few-tile, long-K shapes (H100, git show 982ee83:bench/results/2026-11-26-h100-wgmma-split-cap.md), so neither the
      chooser's candidates nor the tuner's space use it; it is there for probes and hand-written configs.
    split_min: (split_tail) the fewest k-blocks a piece of a split tile holds (0: MIN_SHARE, 16). A tile
      split finer runs on more SMs but exchanges its fp32 partial tile more often; where the GEMM
      streams B with a few rows of A (decode), how many SMs read B matters more.
    swap_ab: the kernel computes Dᵀ = B·Aᵀ (kernel_spec): B's rows (the weights) fill the 64-row wgmma
      blocks and A's few rows (tokens) the tile's BN columns, any multiple of 8; D is written
      transposed from registers (no TMA store). For M of a few tokens, where a 64-row tile over M
      computes and stages mostly rows outside D.
    """

    bm: int = 128
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    specialized: bool = True
    persistent: bool = True
    group_m: int = 8
    cluster_m: int = 1
    tma_store: bool = False
    store_slices: int = 1
    pingpong: bool = False
    c_spread: bool = False
    split_tail: bool = False
    c_ring: bool = False
    c_l2_prefetch: bool = False
    stmatrix: bool = False
    serpentine: bool = False
    overlap_epilogue: bool = False
    d_over_c: bool = False
    c_first_buffer: bool = False
    round_big: bool = False
    stage_operands: bool = False
    split_cap: int = 0
    split_min: int = 0
    swap_ab: bool = False
    FAMILY_LABEL = "wgmma"

    def to_json(self) -> dict:
        data = super().to_json()
        for later in ("serpentine", "overlap_epilogue", "d_over_c", "c_first_buffer", "round_big", "stage_operands",
                      "split_cap", "split_min", "swap_ab"):  # configs (and database keys) from before
            if not data[later]:                               # these options stay unchanged
                del data[later]
        return data

    # --- derived shape --------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return 128 * (self.consumers + int(self.specialized))

    @property
    def rows_per_consumer(self) -> int:
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def c_box_rows(self) -> int:
        """Rows of one TMA box of C: 16 with c_spread (boxes issued a k-block at a time), else a
        consumer's whole part of the tile."""
        return C_SPREAD_ROWS if self.c_spread else self.rows_per_consumer

    @property
    def m_blocks(self) -> int:
        """wgmma instructions of 64 rows each consumer issues per k-step."""
        return self.rows_per_consumer // 64

    @property
    def accumulators(self) -> int:
        return self.m_blocks * self.bn // 2

    def bk(self, dtype: str) -> int:
        return SWIZZLE_BYTES // INPUT_BYTES[dtype]

    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * SWIZZLE_BYTES

    def without_c_options(self) -> "WgmmaConfig":
        """The same kernel for a spec whose epilogue reads no C (the options about loading C refused)."""
        return self.with_(c_spread=False, c_ring=False, c_l2_prefetch=False, d_over_c=False, c_first_buffer=False)

    def c_slot_bytes(self) -> int:
        """Room for one C slice in a ring slot (c_ring): the larger of the A and B tile regions."""
        return max(self.bm, self.bn) * SWIZZLE_BYTES

    # --- the three groups and the C path (groups.py) ------------------------------------------
    @property
    def c_route(self) -> CPath:
        """How C comes for an epilogue that reads it (the flags tma_store, c_ring, d_over_c and
        c_first_buffer combined; constraints keep their other combinations out)."""
        if not self.tma_store:
            return CPath.GLOBAL
        if not self.c_ring:
            return CPath.TILE
        if not self.d_over_c:
            return CPath.RING
        return CPath.D_OVER_C_FIRST_BUFFER if self.c_first_buffer else CPath.D_OVER_C

    def c_path(self, spec: GemmSpec) -> CPath:
        """How the kernel for `spec` gets C: CPath.NONE when its epilogue reads none."""
        return self.c_route if spec.epilogue.reads_c else CPath.NONE

    @property
    def mainloop(self) -> MainloopGroup:
        return MainloopGroup(self.bm, self.bn, self.stages, self.consumers, self.specialized, self.pingpong)

    @property
    def schedule(self) -> ScheduleGroup:
        return ScheduleGroup(self.persistent, self.group_m, self.cluster_m, self.split_tail, self.serpentine)

    @property
    def epilogue(self) -> EpilogueGroup:
        return EpilogueGroup(self.tma_store, self.store_slices, self.stmatrix, self.overlap_epilogue, self.c_route,
                             self.c_spread, self.c_l2_prefetch)

    @classmethod
    def from_groups(cls, mainloop: MainloopGroup, schedule: ScheduleGroup, epilogue: EpilogueGroup) -> "WgmmaConfig":
        """The flat config of three groups; an epilogue group's C path sets c_ring, d_over_c and
        c_first_buffer (GLOBAL needs tma_store off, the others on)."""
        path = epilogue.c_path
        if path is not CPath.NONE and (path is CPath.GLOBAL) == epilogue.tma_store:
            raise ValueError(f"C path {path.value} with tma_store={epilogue.tma_store}")
        flat = {**asdict(mainloop), **asdict(schedule), **asdict(epilogue)}
        del flat["c_path"]
        return cls(**flat, **path.flags())

    @property
    def d_in_ring_only(self) -> bool:
        """d_over_c without c_first_buffer: D is staged in C's ring slots only, no store buffer."""
        return self.d_over_c and not self.c_first_buffer

    def out_bn(self, spec: GemmSpec) -> int:
        """Columns of D a tile writes: bn, or bn / 2 for a gated spec (each gate/up pair of columns
        becomes one output)."""
        return self.bn // 2 if spec.gated else self.bn

    def slice_bytes(self, spec: GemmSpec) -> int:
        """One store slice of the whole tile in D's type (C's slice is the same size)."""
        return self.bm * self.out_bn(spec) * OUT_BYTES[out_dtype(spec)] // self.store_slices

    def ragged_slice(self, spec: GemmSpec) -> bool:
        """A TMA-stored slice that is not whole 128-byte rows (a tile width fitted to N, 128x224): its last
        box of 128-byte rows ends at the slice's end and overlaps the box before it (writeback.LAST_BOX)."""
        return self.tma_store and self.slice_bytes(spec) // self.bm % SWIZZLE_BYTES != 0

    def epilogue_bytes(self, spec: GemmSpec) -> int:
        if not self.tma_store or self.d_in_ring_only:
            return 0
        # Ping-pong consumers each keep a whole tile's buffer; cooperative ones share one.
        tiles = self.consumers if self.pingpong else 1
        row = self.slice_bytes(spec) // self.bm
        return tiles * self.bm * -(-row // SWIZZLE_BYTES) * SWIZZLE_BYTES  # a ragged slice's last box is whole

    def barrier_bytes(self) -> int:
        """full/empty per stage; C full/empty per epilogue buffer; with ping-pong, a main-loop turn each."""
        return 16 * self.stages + (48 if self.pingpong else 16)

    def split_bytes(self, spec: GemmSpec) -> int:
        """3xtf32's residual tiles of A and B (SPLIT_BUFFERS k-blocks); none for other dtypes."""
        return SPLIT_BUFFERS * self.stage_bytes() if splits_fp32(spec) else 0

    def smem_bytes(self, spec: GemmSpec) -> int:
        """Dynamic shared memory: the ring of A and B tiles, 3xtf32's residual tiles, the epilogue
        tile(s), barriers, alignment slack."""
        return (self.stages * self.stage_bytes() + self.split_bytes(spec) + self.epilogue_bytes(spec)
                + self.barrier_bytes() + SMEM_SLACK)

    # --- naming -----------------------------------------------------------------------------
    def describe(self) -> str:
        roles = f"producer+{self.consumers}wg" if self.specialized else f"{self.consumers}wg"
        roles += " pingpong" if self.pingpong else ""
        grid = f" persistent g{self.group_m}" if self.persistent else ""
        cluster = f" cluster{self.cluster_m}x1 multicastB" if self.cluster_m > 1 else ""
        slices = f"/{self.store_slices}" if self.store_slices > 1 else ""
        store = f" tma-store{slices}" if self.tma_store else ""
        grid += " split-tail" if self.split_tail else ""
        grid += f" max{self.split_cap}" if self.split_cap else ""
        grid += f" min{self.split_min}kb" if self.split_min else ""
        store += " C-spread" if self.c_spread else ""
        store += " C-in-ring" if self.c_ring else ""
        store += " C-L2-prefetch" if self.c_l2_prefetch else ""
        store += " stmatrix" if self.stmatrix else ""
        grid += " serpentine-K" if self.serpentine else ""
        store += " overlapped" if self.overlap_epilogue else ""
        store += " D-over-C" if self.d_over_c else ""
        store += " C-first-buffer" if self.c_first_buffer else ""
        store += " round-big" if self.round_big else ""
        staged = " staged" if self.stage_operands else ""
        staged += " swap-AB" if self.swap_ab else ""
        return f"tile {self.bm}x{self.bn} stages{self.stages} {roles}{grid}{cluster}{store}{staged}"


def overlap_idle(config: WgmmaConfig, whole_units: int) -> bool:
    """Whether config's overlap_epilogue has nothing to overlap in a schedule with `whole_units` whole
    tiles: it hides a whole tile's write-back under the next tile, so with every tile split along K it
    only halves every wgmma (render.unused_options_dropped renders without it; the chooser says so)."""
    return config.overlap_epilogue and whole_units == 0


# --- what the family can run at all ----------------------------------------------------------------
def k_major(spec: GemmSpec) -> tuple[bool, bool]:
    """Whether A and B are stored with K contiguous (A as M×K, B as N×K), the layout wgmma reads
    without transposing."""
    return (not spec.a_trans, spec.b_trans)


def transposes_tf32(spec: GemmSpec) -> bool:
    """Whether tf32 operands stored MN-major are transposed in shared memory by the consumers
    (render.transpose_stage): tf32 wgmma reads K-major tiles only."""
    return spec.dtype == "tf32" and k_major(spec) != (True, True)


def operand_rows(spec: GemmSpec) -> tuple[tuple[str, int, int], ...]:
    """(name, rows, bytes of a row) of A and B as the spec's layout stores them."""
    size = INPUT_BYTES.get(spec.dtype, 4)
    return tuple((name, rows, inner * size) for name, (rows, inner) in (("A", spec.a_shape), ("B", spec.b_shape)))


def stride_problem(spec: GemmSpec) -> str | None:
    """TMA needs every row of A and B to start on a 16-byte boundary (without staging)."""
    for name, _, row in operand_rows(spec):
        if row % 16:
            return (f"rows of {name} are {row} bytes, not a multiple of 16, which TMA needs "
                    f"(stage_operands copies them into aligned rows first)")
    return None


STAGED_PITCH = 128  # bytes: a staged operand's rows start on cache-line boundaries
SECTOR = 32  # bytes: rows that start off a sector boundary are staged


def staged_operands(spec: GemmSpec) -> tuple[StagedOperand, ...]:
    """What stage_operands copies: each of A and B whose stored rows do not start on 32-byte
    boundaries, as (rows, row bytes) of its layout, into rows 128 bytes apart."""
    return tuple(StagedOperand(name, rows, row, ceil_div(row, STAGED_PITCH) * STAGED_PITCH)
                 for name, rows, row in operand_rows(spec) if row % SECTOR)


def staging_choice(spec: GemmSpec) -> tuple[bool, ...]:
    """The stage_operands values a config may take for `spec`: (True,) where TMA refuses the rows,
    (False,) where every row starts on a 32-byte boundary, both where rows start 16 bytes off one."""
    if stride_problem(spec):
        return (True,)
    return (False, True) if staged_operands(spec) else (False,)


# What the staging copies cost (the staging kernel, kernels/parts/staging.py, one launch for A and B;
# H100, 2026-11-26, bench/results/2026-11-26-h100-staging.md: 2.9-3.0 TB/s read + write on 30-130 MB,
# 1.9-2.6 TB/s on 8-25 MB, ~5 µs alone for 1 MB): bytes read and written at STAGING_BYTES_PER_S, plus
# STAGING_LAUNCH_S for the launch. (cuMemcpy2DAsync, one per operand, had run 1.0-1.6 TB/s.)
STAGING_BYTES_PER_S = 3.0e12
STAGING_LAUNCH_S = 4e-6
# The mma.sync family's rate on rows TMA cannot read in place, by input bytes (same table: 62-115
# TFLOP/s with 2-byte inputs, 53-90 tf32), and wgmma's with 128-byte rows.
UNALIGNED_MMA_RATE = {2: 100e12, 4: 60e12}
WGMMA_RATE = {2: 650e12, 4: 325e12}
# Rows 16 bytes off a 32-byte sector: what the family default assumes the kernel loses by reading
# them in place, as a share of the time with 128-byte rows. Measured on an H100 (2026-11-26,
# bench/results/2026-11-26-h100-staging.md) the in-place kernel ran 1.17x (4096x4096x4104 bf16,
# 3001x2999x776) to 1.7x (8192x8192x1032, 2048x2048x2056) the staged kernel's own time, varying with the
# config more than the shape; the default stages only where the estimated copies are under 0.2 of the
# kernel, which the measurement agrees with at 8192x8192x1032 (staged), 4096x4096x4104, 4096x4096x4100
# tf32, 1000^3, 257x1023x4104 and 200x300x504 (in place), not at 2048x2048x2056 (41 µs staged against
# 45 in place) and 3001x2999x776 (75 against 85 for 128x192 tiles), which it runs in place.
MISALIGNED_PENALTY = 0.2


def staging_seconds(spec: GemmSpec) -> float:
    """The estimated time of stage_operands' copies for `spec` (0 when nothing would be staged)."""
    staged = staged_operands(spec)
    return sum(2 * s.rows * s.row_bytes for s in staged) / STAGING_BYTES_PER_S + (STAGING_LAUNCH_S if staged else 0.0)


def yields_to_mma(spec: GemmSpec, arch: str) -> str | None:
    """Why the registry passes this family over for `spec` though it could run it (None: it does
    not): rows TMA cannot read in place, and too little work to repay the staging copies, where the
    mma.sync family reads the rows as they are (127x129x131 bf16 on an H100: 11.2 µs against 14.6
    staged, 8.3 of them cuMemcpy2DAsync copies; the staging kernel's launch alone is ~4 µs)."""
    size = INPUT_BYTES.get(spec.dtype, 4)
    if splits_fp32(spec) or staging_choice(spec) != (True,):
        return None
    copies_s = staging_seconds(spec)
    if copies_s + spec.flops / WGMMA_RATE[size] <= spec.flops / UNALIGNED_MMA_RATE[size]:
        return None
    return (f"its rows need staging copies (~{copies_s * 1e6:.0f} µs) that {spec.flops / 1e9:.2g} GFLOP "
            f"do not repay; the mma family reads them in place")


def default_staging(spec: GemmSpec) -> bool:
    """Stage where TMA refuses the rows, or where the rows start off 32-byte sectors and the copies
    cost less than the in-place loads would lose (MISALIGNED_PENALTY of the kernel's time at the
    H100's dense rate, ~650 TFLOP/s with 2-byte inputs). The chooser does not ask this: it ranks
    both ways (chooser._scores); the family default (`--family wgmma` untuned, the tuner's start)
    does."""
    choice = staging_choice(spec)
    if len(choice) == 1:
        return choice[0]
    aligned_s = spec.flops / WGMMA_RATE[INPUT_BYTES.get(spec.dtype, 4)]
    return staging_seconds(spec) < aligned_s * MISALIGNED_PENALTY


def _staging(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.stage_operands not in staging_choice(s):
        return (stride_problem(s) if not c.stage_operands else
                "stage_operands copies rows that start off 32-byte boundaries; every row of A and B starts on one")
    return None


def supports(spec: GemmSpec, arch: str) -> str | None:
    """Why this family cannot run `spec` on `arch`, or None."""
    if arch_number(arch) != 90:
        return f"wgmma and TMA need a Hopper GPU (sm_90a), not {arch}"
    if spec.dtype not in DTYPES:
        return f"tensor-core inputs must be {', '.join(DTYPES)}, not {spec.dtype}"
    if spec.gated and spec.dtype not in GATED_DTYPES:
        return f"gated GEMMs run on {' or '.join(GATED_DTYPES)} inputs, not {spec.dtype}"
    if splits_fp32(spec):
        from ...precision import math_refusal

        problem = math_refusal(spec, arch, FAMILY)
        if problem:
            return problem
    return None


# --- constraints --------------------------------------------------------------------------------
Constraint = Callable[[WgmmaConfig, GemmSpec, str], "str | None"]


def _tile(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.bm not in (64, 128, 192, 256):
        return f"tile {c.bm}x{c.bn}: bm must be 64, 128, 192 or 256 (64-row wgmma blocks; one TMA box is at most 256)"
    least = 8 if c.swap_ab else 64  # (narrower tiles only where the write-back is from registers, as swap_ab's)
    if not (least <= c.bn <= 256 and c.bn % 8 == 0):
        return (f"tile {c.bm}x{c.bn}: bn must be a multiple of 8 from {least} to 256 (a wgmma N; one TMA box is "
                f"at most 256{'; under 64 with swap_ab only' if least == 64 else ''})")
    if c.bn % 64 and not k_major(s)[1]:
        return f"bn={c.bn}: B stored N-contiguous is loaded in boxes of 64 columns (bn a multiple of 64)"
    if c.consumers not in (1, 2, 3) or c.rows_per_consumer % 64 or c.bm % c.rows_per_consumer:
        return f"bm={c.bm} does not split into {c.consumers} consumer warpgroup(s) of 64-row wgmma blocks"
    if c.pingpong and not (c.consumers == 2 and c.specialized and c.persistent):
        return "ping-pong needs 2 consumer warpgroups, the producer warpgroup and a persistent grid"
    if c.consumers == 3 and not (c.specialized and s.dtype in ("fp16", "bf16")):
        return ("3 consumer warpgroups (192-row tiles) run beside the producer warpgroup (its registers handed "
                "to them by setmaxnreg), for 16-bit types")
    return None


def _registers(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.consumers == 3 and c.accumulators > THREE_CONSUMER_MAX_ACCUMULATORS:
        return (f"{c.accumulators} fp32 accumulators per thread: 3 consumers get 152 registers each, room for "
                f"{THREE_CONSUMER_MAX_ACCUMULATORS} (a 192x192 tile)")
    if c.accumulators > MAX_ACCUMULATORS:
        return f"{c.accumulators} fp32 accumulators per thread exceed {MAX_ACCUMULATORS} (registers would spill)"
    if splits_fp32(s) and c.accumulators > SPLIT_MAX_ACCUMULATORS:
        return (f"3xtf32 keeps a k-block's partial sum beside the {c.accumulators} accumulators per thread: "
                f"at most {SPLIT_MAX_ACCUMULATORS} fit (a 128x192 tile of 2 consumers)")
    if splits_fp32(s) and k_major(s) != (True, True) and c.accumulators > SPLIT_TRANSPOSED_MAX_ACCUMULATORS:
        return (f"3xtf32 with an operand stored MN-major transposes it as it splits it: beside the partial sums, "
                f"at most {SPLIT_TRANSPOSED_MAX_ACCUMULATORS} accumulators per thread fit (a 128x128 tile of 2 consumers)")
    return None


def _split(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    """3xtf32's main loop (consumer.consumer_split) and tf32's transposing one (consumer_transposing)
    are the plain loop of cooperative consumers."""
    if not splits_fp32(s) and c.round_big:
        return "round_big is for fp32 as 3xtf32"
    if not (splits_fp32(s) or transposes_tf32(s)):
        return None
    if not c.specialized or c.pingpong or c.overlap_epilogue:
        what = "3xtf32 splits operands" if splits_fp32(s) else "tf32 stored MN-major is transposed"
        return f"{what} in the cooperative consumers of the warp-specialized kernel (no ping-pong, no overlap_epilogue)"
    return None


def smem_limit(arch: str) -> int | None:
    """Dynamic shared memory one block may opt in to on `arch` (the arch table's; None: an arch with no
    entry, which the dtype constraint refuses anyway)."""
    return geometry(None, arch).smem_per_block if known_arch(arch) else None


def _smem(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    need, limit = c.smem_bytes(s), smem_limit(arch)
    if limit is not None and need > limit:
        return f"{c.stages} stages of {c.bm}x{c.bn} tiles need {need} B of shared memory, over {limit} B"
    return None


# The ring's depth limit: shared memory decides before it for tiles of 128x128 and up; a 64x64 bf16
# tile's 16 KB stages fit 14 deep.
MAX_STAGES = 16


def _pipeline(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if not 1 <= c.stages <= MAX_STAGES:
        return f"stages={c.stages}: 1 to {MAX_STAGES} buffers"
    if c.specialized and c.stages < 2:
        return "a producer warpgroup needs at least 2 stages to run ahead of the consumers"
    return None


def _schedule(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.group_m not in (1, 2, 4, 8, 16):
        return f"group_m={c.group_m}: 1, 2, 4, 8 or 16"
    if c.cluster_m not in (1, 2, 4):
        return f"cluster_m={c.cluster_m}: clusters of 1, 2 or 4 blocks along M"
    if c.cluster_m > 1 and not (c.specialized and c.persistent):
        return "B multicast in clusters runs only in the persistent warp-specialized kernel"
    if c.serpentine and not (c.specialized and c.persistent):
        return "serpentine K order is for the persistent warp-specialized kernel (blocks that run many tiles)"
    if c.split_tail and not (c.specialized and c.persistent and not c.pingpong):
        return "split_tail runs in the persistent warp-specialized kernel with cooperative consumers"
    if c.split_cap and (not c.split_tail or c.split_cap < 2):
        return f"split_cap={c.split_cap}: a cap of 2 or more K ranges a tile, with split_tail"
    if c.split_min and (not c.split_tail or c.split_min < 1):
        return f"split_min={c.split_min}: at least 1 k-block a piece, with split_tail"
    if c.cluster_m > 1 and c.bn % (64 * c.cluster_m):
        return f"bn={c.bn} does not split into {c.cluster_m} multicast halves of whole 64-column chunks"
    return None


def _dtype(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    return supports(s, arch)


def _ragged_slice_problem(c: WgmmaConfig, s: GemmSpec) -> str | None:
    """Why a TMA-stored slice that is not whole 128-byte rows cannot end in an overlapping last box
    (writeback.LAST_BOX), or None where it can: slices of a 16-bit D more than one box wide, in steps of
    16 columns (an stmatrix's), stored by stmatrix from the cooperative consumers of the persistent warp-
    specialized kernel (what the GPU tests ran), no C, no overlap_epilogue."""
    cols = c.bn // c.store_slices
    if (OUT_BYTES.get(out_dtype(s), 4) != 2 or s.gated or cols % 16 or cols <= 64 or not c.stmatrix
            or c.pingpong or not (c.specialized and c.persistent) or c.overlap_epilogue or s.epilogue.reads_c
            or c.c_spread or c.c_ring):
        return ("its last box may overlap the one before only in slices of 16-bit D, multiples of 16 columns "
                "over 64, stored by stmatrix from the cooperative consumers of the persistent warp-specialized "
                "kernel, without C or overlap_epilogue")
    return None


def _store(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    if c.store_slices not in (1, 2, 4) and not (splits_fp32(s) and c.bn == 192 and c.store_slices in (3, 6)):
        return f"store_slices={c.store_slices}: 1, 2 or 4 (3 or 6: 3xtf32's 128x192 tiles, whose quarters are not whole 128-byte rows)"
    if c.stmatrix and not (c.tma_store and OUT_BYTES.get(out_dtype(s), 4) == 2):
        return "stmatrix writes 16-bit D through the TMA-store buffer (fp32 D keeps one pair per store)"
    if not c.tma_store:
        if c.overlap_epilogue:
            return "overlap_epilogue is part of the TMA-store epilogue"
        if c.c_spread or c.c_ring or c.c_l2_prefetch or c.d_over_c or c.c_first_buffer:
            return ("c_spread, c_ring, c_l2_prefetch, d_over_c and c_first_buffer are part of the TMA-store "
                    "epilogue (direct stores read C themselves)")
        return None if c.store_slices == 1 else "store_slices needs the TMA-store epilogue"
    slice_bytes = c.bn // c.store_slices * OUT_BYTES.get(out_dtype(s), 4)
    if slice_bytes % SWIZZLE_BYTES:
        ragged = _ragged_slice_problem(c, s)
        if ragged:
            return f"a slice of {c.bn // c.store_slices} columns is not whole 128-byte rows: {ragged}"
    if c.c_spread and not s.epilogue.reads_c:
        return "c_spread is for epilogues that read C"
    if c.c_ring:
        if not s.epilogue.reads_c or c.c_spread or c.pingpong:
            return "c_ring is for epilogues that read C, with cooperative consumers and without c_spread"
        slice_c = c.slice_bytes(s)
        if slice_c > c.c_slot_bytes():
            return (f"a C slice of {slice_c} B does not fit the {c.c_slot_bytes()} B operand region of a "
                    f"ring slot (use more store_slices)")
    elif c.c_l2_prefetch:
        return "c_l2_prefetch warms L2 for c_ring's loads (without c_ring, C is already loaded early)"
    elif c.store_slices > 1 and s.epilogue.reads_c:
        return "an epilogue that reads C needs the whole tile buffer (store_slices=1): C is loaded as one tile"
    if c.d_over_c and not (c.c_ring and c.stmatrix and not c.overlap_epilogue):
        return ("d_over_c writes D over C in its ring slot: it needs c_ring and stmatrix (the write-back "
                "without overlap_epilogue)")
    if c.c_first_buffer and not (c.d_over_c and c.store_slices > 1):
        return "c_first_buffer gives d_over_c's first slice of C its own buffer: it needs d_over_c and 2 or 4 slices"

    if not c.specialized:
        return "the TMA-store epilogue needs the producer warpgroup (it loads C)"
    if c.overlap_epilogue:
        if c.pingpong or not c.persistent or c.store_slices == 1 or c.bn % 128:
            return ("overlap_epilogue writes each half of a tile (bn a multiple of 128) back in its own "
                    "store slices, under the wgmma of a persistent block's cooperative consumers")
        if s.k <= c.bk(s.dtype):  # (ptxas then serialises the wgmma: C7514)
            return "overlap_epilogue hides a tile's write-back under the k-blocks around it: K is one k-block"
        # The producer fills the ring in order: the tile's last k-block, then its C slices. That
        # k-block's slot is held until the lower half (the first half of the slices) is written back,
        # so none of those slices may need it again.
        if s.epilogue.reads_c and c.stages <= c.store_slices // 2:
            return (f"overlap_epilogue holds the last k-block's ring slot until the first {c.store_slices // 2} "
                    f"C slices are read: it needs {c.store_slices // 2 + 1} stages")
    row = s.n * OUT_BYTES.get(out_dtype(s), 4)
    if row % 16:
        return f"rows of D are {row} bytes, not a multiple of 16, which a TMA store needs"
    return None


def _gated(c: WgmmaConfig, s: GemmSpec, arch: str) -> str | None:
    """A gated (SwiGLU) spec: the GEMM's tile of bn columns is written back as bn / 2 columns of D."""
    if not s.gated:
        return None
    if c.bn % 16:
        return f"bn={c.bn}: a gated tile holds whole gate/up pairs of 8 columns each (bn a multiple of 16)"
    if c.overlap_epilogue:
        return ("overlap_epilogue writes a tile back by halves of its accumulator; the gated write-back "
                "compacts the whole tile's gate/up pairs first (not built)")
    if c.tma_store:
        slice_cols = c.out_bn(s) // c.store_slices
        if slice_cols * OUT_BYTES.get(out_dtype(s), 4) % SWIZZLE_BYTES:
            return (f"a gated tile writes {c.out_bn(s)} columns of D: a slice of {slice_cols} is not whole "
                    f"128-byte rows (fewer store_slices or a wider tile)")
    return None


CONSTRAINTS: dict[str, Constraint] = {
    "dtype": _dtype, "staging": _staging, "tile": _tile, "registers": _registers, "shared_memory": _smem,
    "pipeline": _pipeline, "schedule": _schedule, "store": _store, "split": _split, "gated": _gated,
}


def swap_spec_problem(spec: GemmSpec) -> str | None:
    """Why no swap_ab config runs `spec` (None: one may): the kernel of Dᵀ = B·Aᵀ reads B as its A and A
    as its B, both K-major (layout nt)."""
    if spec.layout != "nt" or spec.dtype not in ("bf16", "fp16") or spec.gated:
        return "swap_ab runs layout nt in bf16 or fp16, not gated (both operands K-major either way round)"
    return None


def swap_problem(config: WgmmaConfig, spec: GemmSpec) -> str | None:
    """Why `spec` cannot run with swap_ab (None: it can): swap_spec_problem, and D is written from registers,
    element by element."""
    problem = swap_spec_problem(spec)
    if problem:
        return problem
    if config.tma_store or config.stage_operands:
        return "swap_ab writes D transposed from registers: no TMA store, no staged operands"
    return None


# The rows of A for which the chooser hands an untuned spec the swap-AB kernel (chooser/candidates.py,
# swap_ab_config, says what was measured), and the gemv family yields it to this one (gemv.config.yields).
SWAP_AB_ROWS = (4, 128)


def swap_ab_suits(spec: GemmSpec, arch: str) -> bool:
    """Whether the chooser's swap-AB rule takes `spec` on `arch`: a Hopper GPU, SWAP_AB_ROWS rows of A, a spec
    swap_ab runs (swap_problem) whose rows TMA reads in place."""
    return (arch_number(arch) == 90 and SWAP_AB_ROWS[0] <= spec.m <= SWAP_AB_ROWS[1] and not spec.fp8
            and swap_spec_problem(spec) is None and stride_problem(spec) is None)


def kernel_spec(config: WgmmaConfig, spec: GemmSpec) -> GemmSpec:
    """The GEMM the kernel computes: `spec`, or with swap_ab its transpose Dᵀ = B·Aᵀ (N×M, K), whose A is
    the spec's B. There a tile's 64-row wgmma blocks run along N and its BN columns along M: where M is a
    few tokens (decode, small MoE experts) the tile is as wide as M (any multiple of 8) and no wgmma
    rows are wasted on rows past M."""
    if not config.swap_ab:
        return spec
    return GemmSpec(spec.n, spec.m, spec.k, "nt", spec.dtype, epilogue=spec.epilogue.transposed(),
                    out_dtype=spec.out_dtype, math=spec.math)


def rejections(config: WgmmaConfig, spec: GemmSpec, arch: str = "sm_90a") -> dict[str, str]:
    """{constraint name: reason} for every constraint the config breaks; empty when valid (with swap_ab,
    the constraints of the transposed GEMM the kernel computes)."""
    if config.swap_ab:
        problem = swap_problem(config, spec)
        if problem:
            return {"swap": problem}
    return rejections_by(CONSTRAINTS, config, kernel_spec(config, spec), arch)


def ladder(arch: str = "sm_90a") -> list[tuple[str, WgmmaConfig]]:
    """The tensor-core ladder: each step adds one technique to the one before."""
    single = WgmmaConfig(bm=128, bn=128, stages=1, consumers=2, specialized=False, persistent=False,
                         group_m=1, cluster_m=1)
    multistage = single.with_(stages=4)
    specialized = multistage.with_(specialized=True)
    wide = specialized.with_(bn=256)
    persistent = wide.with_(persistent=True, group_m=8)
    stored = persistent.with_(stages=3, tma_store=True)
    # A quarter-tile store buffer frees room for a fourth stage (for every output type).
    sliced = stored.with_(stages=4, store_slices=4)
    return [
        ("tma_wgmma", single),
        ("multistage", multistage),
        ("warp_specialized", specialized),
        ("wide_tile", wide),
        ("persistent", persistent),
        ("tma_store", stored),
        ("sliced_store", sliced),
        ("cluster_multicast", sliced.with_(cluster_m=2)),
        # Consumers take whole 128x128 tiles in turn: one's epilogue hides under the other's math.
        ("pingpong", stored.with_(bn=128, stages=4, pingpong=True)),
    ]


# The rest of the C path beside c_ring: the write-back through stmatrix, C's L2 prefetch over the
# tile's last k-blocks, D written over C in its ring slot and C's first slice in the freed buffer.
C_PATH = {"stmatrix": True, "c_l2_prefetch": True, "d_over_c": True, "c_first_buffer": True}


def with_c_path(config: WgmmaConfig, spec: GemmSpec, arch: str = "sm_90a", sm_count: int | None = None
                ) -> WgmmaConfig:
    """`config` with the rest of the C path (C_PATH, or all of it but c_first_buffer) where the
    epilogue reads C through the ring, the result is valid, and the blocks run more than one tile
    each; else `config` unchanged.

    Measured in a balanced order against c_ring alone, 128x256 tiles (bench/results/2026-11-23-
    h100-fused-clock.md, set untuned_fused): 3072x4096x768 fp16 +10%, 4096^3 nn fp16 +2.5%, 1024x1024x16384 bf16
    +1.2%, 8192^3 bf16 +0.7% on an H100; but 2048^3 fp16 (128 tiles: one a block) -1.6%, where
    no tile's write-back meets the next tile's main loop, which is what the path is for. `sm_count`:
    the GPU's (None: the arch table's for `arch`)."""
    if not (spec.epilogue.reads_c and config.c_ring):
        return config
    if sm_count is None:
        sm_count = geometry(None, arch).sm_count
    if ceil_div(spec.m, config.bm) * ceil_div(spec.gemm_n, config.bn) <= sm_count:
        return config
    full = config.with_(**C_PATH)
    for candidate in (full, full.with_(c_first_buffer=False)):
        if not rejections(candidate, spec, arch):
            return candidate
    return config


def default_config(spec: GemmSpec | None, arch: str = "sm_90a") -> WgmmaConfig:
    """A sound fast config for any supported shape: the persistent warp-specialized kernel with the
    TMA-store epilogue in slices (a fourth stage fits; C, where the epilogue reads it, comes through
    the ring, with the rest of the C path where blocks run several tiles: with_c_path), else with
    direct stores where D's rows do not allow TMA; the tail split along K."""
    steps = dict(ladder(arch))
    if spec is None:
        return steps["sliced_store"]
    if splits_fp32(spec):
        return _split_default(spec, arch)
    stage = default_staging(spec)
    steps = {name: step.with_(stage_operands=stage) for name, step in steps.items()}
    # On the H100 at 4096^3: 2 slices 0.995x cuBLAS (bf16) against 0.973x for the whole-tile store;
    # fp32 output (tf32) needs 4 slices to fit 4 stages (0.971x against 0.956x with direct stores).
    slices = 4 if OUT_BYTES.get(out_dtype(spec)) == 4 else 2
    # C, where the epilogue reads it, through the ring a slice per slot (c_ring), so the sliced store
    # and the 4th stage stay: fused relu+add fp16 4096^3 191.4 µs against 195.1 with the C tile in its
    # own buffer, loaded in 16-row boxes (c_spread, 3 stages) (H100, same run).
    preferred = [steps["sliced_store"].with_(store_slices=slices, c_ring=spec.epilogue.reads_c)]
    if transposes_tf32(spec) and k_major(spec) == (True, False):
        # The consumers' transpose of B costs 4/BM bytes of shared-memory traffic a FLOP: 256-row
        # tiles halve it. tf32 nn on the H100: 4096^3 0.820x cuBLAS against 0.735x for 128x256,
        # 8192^3 0.810x against 0.723x, 2048^3 0.861x against 0.750x (2026-11-26). With A
        # transposed too (tn) the sum of both is the same either way and 128x256 measured faster
        # (4096^3 0.962x against 0.897x).
        preferred.insert(0, preferred[0].with_(bm=256, bn=128))
    if spec.epilogue.reads_c:
        preferred.append(steps["tma_store"].with_(c_spread=True))
    # Split the last partial wave along K where it leaves half the GPU idle (a no-op elsewhere):
    # 1024x1024x16384 bf16 0.38x -> 1.00x cuBLAS, 2048x5120x5120 0.85x -> 0.96x (H100).
    for config in preferred:
        if not rejections(config.with_(split_tail=True), spec, arch):
            return with_c_path(config.with_(split_tail=True), spec, arch)
    return steps["persistent"].with_(split_tail=True)


def split_shapes(spec: GemmSpec) -> tuple[WgmmaConfig, WgmmaConfig, WgmmaConfig]:
    """3xtf32's tile shapes, widest first: 128x192 in 3 stages with D stored in 6 slices (the
    partial sums leave no room for 128x256), 128x128 in 4 stages with D in 4 slices, and 64x128 of
    one consumer in 6 stages (for grids of few tiles); 2 cooperative consumers on the others, C
    through the ring where the epilogue reads it, the tail split on all."""
    square = WgmmaConfig(bm=128, bn=128, stages=4, consumers=2, tma_store=True, store_slices=4,
                         c_ring=spec.epilogue.reads_c, split_tail=True, stage_operands=default_staging(spec))
    return (square.with_(bn=192, stages=3, store_slices=6), square,
            square.with_(bm=64, consumers=1, stages=6, serpentine=True))


def direct_stores(config: WgmmaConfig) -> WgmmaConfig:
    """The config with D stored by the threads (for D rows a TMA store refuses), C read directly."""
    return config.with_(tma_store=False, store_slices=1, c_ring=False)


def _split_default(spec: GemmSpec, arch: str) -> WgmmaConfig:
    """3xtf32: the 128x192 tile, else 128x128, else 128x128 with direct stores (with, then without
    the tail split). On an H100 (2026-11-26) 128x192 ran 4096^3 in 1314 µs against 1430 for 128x128
    (`git show a5c16f7:bench/results/2026-11-26-h100-3xtf32-wgmma.md`)."""
    wide, square, _ = split_shapes(spec)
    direct = direct_stores(square)
    for config in (wide, square, direct, direct.with_(split_tail=False)):
        if not rejections(config, spec, arch):
            return config
    return direct.with_(split_tail=False)


def split_candidates(spec: GemmSpec, arch: str = "sm_90a") -> list[tuple[str, WgmmaConfig]]:
    """3xtf32's named configs to time against the default (each valid for `spec` on `arch`)."""
    base = _split_default(spec, arch)
    _, square, _ = split_shapes(spec)
    named = [("default", base), ("round_big", base.with_(round_big=True)), ("serpentine", base.with_(serpentine=True)),
             ("128x192_direct", direct_stores(base).with_(bn=192, stages=3)), ("128x128", square),
             ("128x128_cluster2", square.with_(cluster_m=2)), ("64x128_s6", square.with_(bm=64, consumers=1, stages=6))]
    return valid_named(named, rejections, spec, arch)


def tf32_candidates(spec: GemmSpec, arch: str = "sm_90a") -> list[tuple[str, WgmmaConfig]]:
    """tf32: named tile shapes to time against the default. Where an operand is stored MN-major the
    consumers' transposes add shared-memory traffic of 4/BM bytes a FLOP for B (4/BN for A), so
    taller tiles for a transposed B, wider ones for a transposed A."""
    base = default_config(spec, arch)
    wide, tall = base.with_(bm=128, bn=256), base.with_(bm=256, bn=128)
    named = [("default", base), ("128x256", wide), ("256x128", tall), ("256x128_s3", tall.with_(stages=3)),
             ("256x128_cluster2", tall.with_(cluster_m=2)), ("256x128_serpentine", tall.with_(serpentine=True)),
             ("128x256_cluster2", wide.with_(cluster_m=2)), ("128x128", wide.with_(bn=128)),
             ("64x256", wide.with_(bm=64, consumers=1))]
    return valid_named(named, rejections, spec, arch)
