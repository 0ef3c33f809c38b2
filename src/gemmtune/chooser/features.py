"""What the chooser knows about a (spec, config, GPU): named features, the same for every family.

Each family describes a config's launch as a Geometry (output tile, k-splits, blocks, threads,
shared memory, registers); the features follow from it and the shape:
- wave quantization: blocks over the SM slots (blocks per SM × SMs), and the share of the last wave
  that runs (1.0 = every wave full);
- tile waste: the share of the padded output tiles that lies inside D;
- occupancy: resident blocks per SM (limited by threads, shared memory and registers; registers are
  ptxas's report when given one, else estimated from the accumulators) and warps per SM;
- bytes per FLOP: global traffic the tiling implies (A read once per column of tiles, B once per row
  of tiles, D once, plus the split-K partial sums) per multiply-add, and the roofline time of the
  shape (compute or HBM bound, whichever is slower).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ..kernels.gemv.config import (GemvConfig, block_outputs, block_threads, estimated_registers, outputs, ring_smem_bytes,
                                   stream_kind, streams_b, tensor_core_smem_bytes)
from ..kernels.gemv.config import vec as gemv_vec
from ..kernels.simt.config import SimtConfig
from .. import arch
from ..kernels.wgmma.config import WgmmaConfig, kernel_spec, operand_rows
from ..kernels.wgmma.schedule import schedule_for
from ..epilogue import FAST_GELU_OUT_DTYPES
from ..spec import GemmSpec

SM_THREADS, SM_REGISTERS, SM_SMEM, SM_BLOCKS = 2048, 65536, 228 * 1024, 32  # per SM, sm_80/sm_90
# Roofline constants of an H100 SXM (only the scale of one feature; the model learns the rest).
PEAK_FLOPS = {"fp32": 60e12, "tf32": 400e12, "bf16": 800e12, "fp16": 800e12}
HBM_BYTES_PER_S = 3.0e12


@dataclass(frozen=True)
class Geometry:
    """How a config launches for a spec: enough to reason about waves, waste and occupancy."""

    bm: int  # output tile rows (for gemv: 1 or the outputs per block)
    bn: int  # output tile columns
    splits: int  # blocks sharing one tile along K
    blocks: int  # blocks launched
    threads: int
    smem_bytes: int
    registers: int  # per thread (ptxas's, or an estimate)
    persistent: bool = False


# Registers per thread of the chooser's simt tiles (bm, bn, bk, tm, tn, wm, wn, wniter), as ptxas reported
# them for sm_90 (NVRTC 13, 1000³, no split): far from "accumulators + 48" (a 32-sum bk-32 tile takes 117,
# not 80), and they decide how many blocks share an SM, so the wave features. Other shapes move them by
# a few registers; tiles not listed fall back to the estimate.
SIMT_REGISTERS = {
    (128, 128, 16, 8, 4, 64, 32, 2): 161,
    (128, 128, 16, 8, 4, 64, 64, 4): 229,
    (128, 256, 16, 16, 4, 128, 32, 2): 209,
    (128, 256, 16, 8, 4, 32, 128, 2): 213,
    (64, 64, 16, 4, 8, 64, 16, 1): 95,
    (64, 128, 16, 8, 4, 32, 64, 2): 165,
    (128, 64, 16, 8, 4, 64, 32, 2): 167,
    (64, 64, 16, 4, 4, 32, 32, 2): 95,
    (32, 64, 16, 4, 4, 32, 32, 2): 97,
    (64, 32, 16, 4, 4, 32, 32, 2): 109,
    (32, 128, 16, 4, 4, 32, 64, 2): 167,
    (32, 32, 16, 4, 4, 32, 32, 2): 115,
    (64, 64, 32, 4, 8, 64, 16, 1): 117,
    (64, 64, 32, 4, 4, 32, 32, 2): 117,
    (64, 128, 32, 8, 4, 32, 64, 2): 167,
    (128, 64, 32, 8, 4, 64, 32, 2): 199,
    (32, 64, 32, 4, 4, 32, 32, 2): 127,
    (64, 32, 32, 4, 4, 32, 32, 2): 130,
    (32, 32, 32, 4, 4, 32, 32, 2): 141,
    (64, 64, 16, 4, 4, 32, 16, 1): 71,
    (64, 128, 16, 4, 4, 64, 16, 2): 91,
    (128, 64, 16, 4, 8, 64, 16, 1): 93,
}


def output_tiles(spec: GemmSpec, bm: int, bn: int) -> int:
    """Tiles of bm x bn that cover D (M x N), the partial ones at its edges included."""
    return math.ceil(spec.m / bm) * math.ceil(spec.n / bn)


def simt_registers(c: SimtConfig) -> int:
    known = SIMT_REGISTERS.get((c.bm, c.bn, c.bk, c.tm, c.tn, c.wm, c.wn, c.wniter))
    return known or min(255, c.accumulators + 48)


def simt_geometry(spec: GemmSpec, c: SimtConfig, sm_count: int, registers: int | None) -> Geometry:
    tiles = output_tiles(spec, c.bm, c.bn)
    return Geometry(c.bm, c.bn, c.split_k, tiles * c.split_k, c.threads, c.smem_bytes() + c.c_stage_bytes(spec),
                    registers or simt_registers(c))


def wgmma_geometry(spec: GemmSpec, c: WgmmaConfig, sm_count: int, registers: int | None) -> Geometry:
    """The blocks the kernel launches, from the schedule its render uses (kernels/wgmma/schedule.py) on
    a GPU of `sm_count` SMs: the persistent grid is not always every SM (4096^3 in 128x256 tiles
    launches 128 blocks, not 132: IN_STEP_BLOCKS)."""
    blocks = schedule_for(spec, c, arch.geometry(None, "sm_90a", sm_count)).workers * c.cluster_m
    return Geometry(c.bm, c.bn, 1, blocks, c.threads, c.smem_bytes(spec), registers or 168, c.persistent)


def gemv_geometry(spec: GemmSpec, c: GemvConfig, sm_count: int, registers: int | None) -> Geometry:
    rows = stream_kind(spec) == "rows"
    per_block = block_outputs(c, spec)
    blocks = math.ceil(outputs(spec) / per_block) * c.k_splits  # k_splits: that many blocks share a strip's K
    tile = (spec.m, per_block) if streams_b(spec) else (per_block, 1)
    smem = (tensor_core_smem_bytes(c, spec) if c.tensor_cores else 0) if rows else 4 * c.threads * gemv_vec(spec)
    if c.ring_stages:  # the TMA ring's shared-memory stages (block_threads counts its producer warp)
        smem = ring_smem_bytes(c, spec)
    return Geometry(tile[0], tile[1], c.k_splits, blocks, block_threads(c), smem,
                    registers or estimated_registers(c, spec))


GEOMETRY = {SimtConfig: simt_geometry, WgmmaConfig: wgmma_geometry, GemvConfig: gemv_geometry}


def has_geometry(config: Any) -> bool:
    """Whether the chooser models the launch of `config`'s family."""
    return type(config) in GEOMETRY


def geometry(spec: GemmSpec, config: Any, sm_count: int, registers: int | None = None) -> Geometry:
    """How `config` launches for `spec` on a GPU of `sm_count` SMs (the grid its render gives)."""
    return GEOMETRY[type(config)](spec, config, sm_count, registers)


def blocks_per_sm(g: Geometry) -> int:
    """Resident blocks per SM: the tightest of the thread, register, shared-memory and block limits."""
    by_threads = SM_THREADS // max(g.threads, 1)
    by_registers = SM_REGISTERS // max(g.threads * max(g.registers, 1), 1)
    by_smem = SM_SMEM // g.smem_bytes if g.smem_bytes else SM_BLOCKS
    return max(1, min(by_threads, by_registers, by_smem, SM_BLOCKS))


def roofline_s(spec: GemmSpec) -> float:
    return max(spec.flops / PEAK_FLOPS[spec.dtype], spec.min_bytes / HBM_BYTES_PER_S)


def traffic_bytes(spec: GemmSpec, g: Geometry) -> float:
    """Global bytes the tiling moves: A once per column of tiles, B once per row of tiles, D (and the
    split-K partial sums: each split but the first reads and every split writes)."""
    a = spec.m * spec.k * spec.element_bytes * math.ceil(spec.n / g.bn)
    b = spec.k * spec.n * spec.element_bytes * math.ceil(spec.m / g.bm)
    d = spec.m * spec.n * spec.out_element_bytes * (2 * g.splits - 1)
    epilogue = (spec.output_elements() - spec.m * spec.n) * spec.out_element_bytes  # C and bias, once
    return float(a + b + d + epilogue)


def schedule_features(spec: GemmSpec, config: Any, sm_count: int, waves: float, slots: int) -> dict[str, float]:
    """How a wgmma config's work schedule runs (kernels/wgmma/schedule.py), beyond the launch: the
    critical path in whole-tile times (rounds of whole tiles plus the longest share of a split tail;
    for one block per tile, its `waves` rounded up), k-blocks per tile, the pieces a split tile is cut
    into, and whether their partial sums are reduced in parallel. Then what the critical path costs:
    `schedule_fill`, the share of the tile work its blocks could do in that time that is D's
    (1.0: every block busy on real output all the way; 1536x6144x1536 in 128x256 tiles: 288 tiles on
    128 blocks take 3 rounds, the last a quarter full, 0.75; in 128x192 tiles 384 take 3 full rounds,
    1.0), and `log_critical_over_roofline`, that path at one SM's share of the peak over the
    shape's roofline time. Other families: none."""
    if not isinstance(config, WgmmaConfig):
        return {}
    s = schedule_for(spec, config, arch.geometry(None, "sm_90a", sm_count))
    tile_times = s.tile_times if config.persistent else float(math.ceil(waves))
    ways = s.tail_workers / s.split_units if s.tail_workers else 1.0
    parallel = s.workers * config.cluster_m if config.persistent else min(s.workers, slots)
    tile_macs = config.bm * config.bn * s.k_blocks * config.bk(spec.dtype)
    critical_s = tile_times * 2 * tile_macs / (PEAK_FLOPS[spec.dtype] / sm_count)
    return {"tile_times": tile_times, "log2_k_blocks": math.log2(s.k_blocks),
            "log2_critical_k_blocks": math.log2(max(tile_times * s.k_blocks, 1.0)),
            "tail_ways": ways, "scatter": float(s.scatter),
            "schedule_fill": spec.m * spec.n * spec.k / (parallel * tile_times * tile_macs),
            "log_critical_over_roofline": math.log(critical_s / roofline_s(spec))}


# --- the epilogue's own work (issue 67) --------------------------------------------------------
# The model is trained on plain GEMMs and sees a fused epilogue only through C's bytes in
# bytes_per_flop; the SMs' work on each output element is added to its prediction here, estimated.
SM_CLOCK_HZ = 1.755e9  # an H100 SXM's boost clock: only the scale of the estimate
ISSUE_PER_CLOCK = 128  # thread instructions an SM issues a clock (4 schedulers × 32 lanes)
MUFU_PER_CLOCK = 16  # results the SM's special function units (MUFU.TANH, EX2, RCP) return a clock
# The share of its issue slots the epilogue gets: two consumer warps a scheduler, mostly dependent
# chains. Fitted to the one measurement there is (H200, 6304x3072x768 bf16 nt, issue 67): GELU by
# libm's tanhf, 22 instructions an element, cost 28.5 µs over 5 tiles an SM, 1.8x its issue time.
ISSUE_EFFICIENCY = 0.5


@dataclass(frozen=True)
class OpCost:
    """What an epilogue op costs per output element: thread instructions issued, of them MUFU ops."""

    issue: float
    mufu: float = 0.0


# Counted in the SASS of the wgmma write-back (6304x3072x768 nt bf16, tile 128x256 in 2 stmatrix
# slices, sm_90a, NVRTC 13.0, 2026-11-28): the fused kernel's instructions less the plain one's, over
# the 192 outputs a thread's write-back code holds. The bias is read once per column (bias_col: 2 rows
# a thread, a pair per load) or row; add and beta read C from shared memory (about one instruction) and
# add it. GELU: tanh.approx.f32 for 16-bit outputs, libm's tanhf (GELU_TANHF) for fp32 ones.
OP_COSTS = {"alpha": OpCost(1.0), "beta": OpCost(2.0), "add": OpCost(2.0), "relu": OpCost(1.0),
            "bias_col": OpCost(1.8), "bias_row": OpCost(1.1), "gelu": OpCost(6.0, 1.0)}
GELU_TANHF = OpCost(22.0, 2.0)


def op_cost(name: str, out_dtype: str) -> OpCost:
    if name == "gelu" and out_dtype not in FAST_GELU_OUT_DTYPES:
        return GELU_TANHF
    return OP_COSTS[name]


@dataclass(frozen=True)
class EpilogueCost:
    """The estimated time a fused epilogue adds to a kernel: `work_s`, the SMs' instructions on the
    output elements of the busiest SM's tiles (none of it hidden under the tensor cores), and
    `memory_s`, the time C's bytes add where reading every operand once at HBM speed outlasts the
    model's time (C is streamed during the main loop, so only the part past that time shows)."""

    issue: float  # instructions an element
    mufu: float  # MUFU ops an element
    elements_per_sm: int  # output elements of the busiest SM's tiles
    work_s: float
    memory_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.work_s + self.memory_s

    def text(self) -> str:
        memory = f", C's bytes {self.memory_s * 1e6:.1f} µs past it" if self.memory_s else ""
        return (f"epilogue +{self.seconds * 1e6:.1f} µs ({self.issue:.1f} instructions and {self.mufu:.0f} MUFU "
                f"an element, {self.elements_per_sm} elements on the busiest SM{memory})")


def epilogue_cost(spec: GemmSpec, config: Any, sm_count: int, model_s: float = 0.0) -> EpilogueCost | None:
    """The fused epilogue's estimated cost for `config` (None for a plain GEMM): OP_COSTS per output
    element, at the SM's issue rate (ISSUE_EFFICIENCY) or its MUFU rate, whichever is slower, over the
    padded tiles the busiest SM writes; plus C's traffic past `model_s` (the model's time)."""
    if spec.epilogue.is_identity:
        return None
    if isinstance(config, WgmmaConfig):
        spec = kernel_spec(config, spec)
    costs = [op_cost(name, spec.out_dtype) for name in spec.epilogue.ops]
    issue, mufu = sum(c.issue for c in costs), sum(c.mufu for c in costs)
    g = geometry(spec, config, sm_count)
    tiles = output_tiles(spec, g.bm, g.bn)  # each tile's epilogue runs once
    elements = math.ceil(tiles / min(sm_count, tiles)) * g.bm * g.bn
    clocks = elements * max(issue / (ISSUE_PER_CLOCK * ISSUE_EFFICIENCY), mufu / MUFU_PER_CLOCK)
    c_bytes = spec.m * spec.n * spec.out_element_bytes if spec.epilogue.reads_c else 0
    hbm_s = spec.min_bytes / HBM_BYTES_PER_S  # every operand once, C included
    memory_s = min(c_bytes / HBM_BYTES_PER_S, max(0.0, hbm_s - model_s))
    return EpilogueCost(issue, mufu, elements, clocks / SM_CLOCK_HZ, memory_s)


def row_alignment(spec: GemmSpec, config: Any = None) -> tuple[int, int]:
    """The byte alignment (up to 128, one cache line) that every row of A and B starts on, and that of
    D's rows: where the operands' rows start only 16 bytes off a 32-byte sector, wgmma's TMA loads
    run at about half rate (bf16 rows of the training shapes: at most 411 TFLOP/s, against 760 with
    128-byte rows; bench/results/2026-11-26-h100-chooser-rows-wgmma.csv.gz). A wgmma config that
    stages its operands reads rows 128 bytes apart."""
    staged = getattr(config, "stage_operands", False)
    operands = 128 if staged else min(math.gcd(row, 128) for _, _, row in operand_rows(spec))
    return operands, math.gcd(spec.n * spec.out_element_bytes, 128)


def features(spec: GemmSpec, config: Any, sm_count: int, registers: int | None = None) -> dict[str, float]:
    """Named features, in a fixed order (the model's columns); of the GEMM the kernel computes (a swap_ab
    config's: Dᵀ = B·Aᵀ)."""
    if isinstance(config, WgmmaConfig):
        spec = kernel_spec(config, spec)
    g = geometry(spec, config, sm_count, registers)
    per_sm = blocks_per_sm(g)
    slots = per_sm * sm_count
    waves = g.blocks / slots
    padded = math.ceil(spec.m / g.bm) * g.bm * math.ceil(spec.n / g.bn) * g.bn
    rows_at = row_alignment(spec, config)
    log2 = math.log2
    return {
        "log2_m": log2(spec.m), "log2_n": log2(spec.n), "log2_k": log2(spec.k),
        "log2_k_per_split": log2(max(1.0, spec.k / g.splits)),
        "log_roofline_s": math.log(roofline_s(spec)),
        "bytes_per_flop": traffic_bytes(spec, g) / spec.flops,
        "log2_tile_m": log2(g.bm), "log2_tile_n": log2(g.bn), "splits": float(g.splits),
        "tile_waste": 1.0 - spec.m * spec.n / padded,
        "waves": waves, "last_wave_full": waves / math.ceil(waves) if waves > 0 else 0.0,
        "sm_fill": min(1.0, g.blocks / sm_count),
        "blocks_per_sm": float(per_sm), "warps_per_sm": float(per_sm * g.threads // 32),
        "log2_threads": log2(g.threads), "smem_kib": g.smem_bytes / 1024, "registers": float(g.registers),
        "persistent": float(g.persistent),
        "split_workspace": float(getattr(config, "split_reduce", "") == "workspace"),
        "log2_row_align": log2(rows_at[0]), "log2_d_row_align": log2(rows_at[1]),
        **schedule_features(spec, config, sm_count, waves, slots),
        **{f"cfg_{k}": float(v) for k, v in config_numbers(config).items()},
    }


def config_numbers(config: Any) -> dict[str, float]:
    """The config's numeric and boolean fields (strings such as simt's kind are left out)."""
    return {f.name: float(getattr(config, f.name)) for f in fields(config)
            if isinstance(getattr(config, f.name), (bool, int, float))}
