"""Controlled experiments on the wgmma kernel: named variants of one config, each verified and timed
by the common path (evaluate: float64 reference, poisoned D) beside cuBLAS in the same process.

A variant is a config, optionally with a change to its generated source that isolates one effect
(these changes exist only here, to answer a question; what proves useful becomes a config option):
- grid128: the persistent grid of 128 blocks a cluster kernel gets, without clusters;
- cluster_launch_only: the same kernel launched in clusters of 2, each block still loading its own
  A and B (cluster placement and launch, without multicast);
- multicast_rank0: clusters of 2 where block 0 loads the whole B tile and multicasts it (instead of
  each block loading half and multicasting it).
Also prints cuOccupancyMaxActiveClusters for the cluster kernels: how many pairs fit at once.

Lists of cases (--set): `bars` (the shipped H100 configs at the bf16/fp16/tf32 4096^3 and bf16/fp16
8192^3 bars), `c_path` (the fused relu+add 4096^3 kernel without and with each step of its C path,
and the same config's GEMM alone), and one list per experiment of the dated results journal
(docs/journal.md: `fused`, `bf16`, `h200`, `stmatrix`, `c4`, `pairs66` ... `c_prefetch_policy`, each named by
the comment above it).
Here they are timed one after another (--rounds N interleaves N rounds); bench_paired.py times the
same lists in alternating rounds, the protocol the journal's late tables use.

    PYTHONPATH=src python bench/probes/wgmma_variants.py --set bars --rounds 3 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from datetime import date
from statistics import median
from typing import Callable

from gemmtune.bench import BenchRow, bench_compiled, bench_cublas
from gemmtune.compiler import compile_kernel
from gemmtune.device import query_device
from gemmtune.kernel_source import KernelSource
from gemmtune.arch import geometry
from gemmtune.kernels.wgmma.config import C_PATH, WgmmaConfig
from gemmtune.kernels.wgmma.render import render
from gemmtune.spec import GemmSpec
from gemmtune.timing import TimingProtocol

Patch = Callable[[KernelSource], KernelSource]
ALONE = ", no epilogue"  # the name suffix of a case's GEMM-alone variants (run on the spec without epilogue)
BASE = WgmmaConfig(bm=128, bn=256, stages=3, consumers=2, specialized=True, persistent=True, group_m=8,
                   tma_store=True)
S4H2 = BASE.with_(stages=4, store_slices=2)


def grid128(src: KernelSource) -> KernelSource:
    return replace(src, grid=(min(src.grid[0], 128), 1, 1))


def cluster_launch_only(src: KernelSource) -> KernelSource:
    code = src.code.replace("__launch_bounds__(384, 1)", "__launch_bounds__(384, 1) __cluster_dims__(2, 1, 1)")
    assert code != src.code
    return replace(grid128(src), code=code)


def multicast_rank0(src: KernelSource) -> KernelSource:
    code = src.code.replace("constexpr int B_SHARE = BN / CLUSTER_M;", "constexpr int B_SHARE = BN;")
    code = code.replace("in_t* b_dst = b + rank * B_SHARE * BK;", "if (rank != 0) return;\n        in_t* b_dst = b;")
    assert code.count("B_SHARE = BN;") == 1 and "if (rank != 0) return;" in code
    b = next(t for t in src.tensor_maps if t.name == "tma_B")
    maps = tuple(replace(t, box=(b.box[0], b.box[1] * 2)) if t.name == "tma_B" else t for t in src.tensor_maps)
    return replace(src, code=code, tensor_maps=maps)


C2 = S4H2.with_(cluster_m=2)
PP = BASE.with_(bn=128, stages=5, pingpong=True)  # 128x128 per consumer, whole tiles in turn
PP4 = BASE.with_(bn=128, stages=6, pingpong=True, store_slices=2)
PPW = BASE.with_(bm=64, bn=256, stages=4, pingpong=True)  # 64x256 per consumer
def no_l2_hints(src: KernelSource) -> KernelSource:
    code = src.code.replace("createpolicy.fractional.L2::evict_first.b64", "createpolicy.fractional.L2::evict_normal.b64")
    assert code != src.code
    return replace(src, code=code)


S4H4 = BASE.with_(stages=4, store_slices=4)
SPLIT = {"split_tail": True}


def tile_ways(spec: GemmSpec) -> list[tuple[str, WgmmaConfig, Patch | None]]:
    """The default tile plain and with its tail split, and smaller tiles split (whole-tile store
    buffers where the epilogue reads C: it is loaded as one tile)."""
    wide, narrow = (BASE, BASE.with_(bn=128, stages=5)) if spec.epilogue.reads_c else (S4H2, S4H2.with_(bn=128, stages=6))
    return [("128x256", wide, None), ("128x256 split", wide.with_(**SPLIT), None),
            ("128x192 s4 split", BASE.with_(bn=192, stages=4, **SPLIT), None),
            ("128x128 split", narrow.with_(**SPLIT), None),
            ("cluster2 128x256 split", wide.with_(cluster_m=2, **SPLIT), None)]


# The short list (--final): the C tile loaded in 16-row boxes a k-block at a time (c_spread) against
# all at once, and the best GEMM alone in the same run.
CSPREAD = {"c_spread": True}
FINAL_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("s3", BASE, None), ("s3 C-spread", BASE.with_(**CSPREAD), None),
        ("cluster2 s3", BASE.with_(cluster_m=2), None),
        ("cluster2 s3 C-spread", BASE.with_(cluster_m=2, **CSPREAD), None),
        ("pingpong 128x128 s4 C-spread", BASE.with_(bn=128, stages=4, pingpong=True, **CSPREAD), None)]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16"), [
        ("s4 slices2", S4H2, None), ("cluster2 s4 slices2", S4H2.with_(cluster_m=2), None)]),
    (GemmSpec(1024, 1024, 16384, "nt", "fp16", "relu+add"), [
        ("128x128 s5 split", BASE.with_(bn=128, stages=5, **SPLIT), None),
        ("128x128 s5 split C-spread", BASE.with_(bn=128, stages=5, **SPLIT, **CSPREAD), None)]),
]

# Set fused: the C words of a fragment row loaded in one batch before D overwrites them
# (writeback.py), C through the ring (c_ring: 4 stages and a sliced store buffer), against the GEMM
# alone. (Run 10 also had 128x192 s4 C-spread, 209-210 µs: dropped.)
FUSED_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("s3 C-spread", BASE.with_(**CSPREAD), None),
        ("cluster2 s3 C-spread", BASE.with_(cluster_m=2, **CSPREAD), None),
        ("s4 slices2 C-in-ring", S4H2.with_(c_ring=True), None),
        ("cluster2 s4 slices2 C-in-ring", S4H2.with_(cluster_m=2, c_ring=True), None),
        ("s4 slices4 C-in-ring", S4H4.with_(c_ring=True), None),
        ("cluster2 s4 slices4 C-in-ring", S4H4.with_(cluster_m=2, c_ring=True), None)]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16"), [
        ("s3 (GEMM alone)", BASE, None), ("s4 slices2 (GEMM alone)", S4H2, None),
        ("cluster2 s4 slices2 (GEMM alone)", S4H2.with_(cluster_m=2), None)]),
]

# Set bf16: where the bf16 bars stand, in interleaved rounds. (Run 10 also had group_m
# 16 and 4 and a 256x128 tile, none better: dropped.)
BF16_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(size, size, size, "nt", "bf16"), [
        ("s4 slices2", S4H2, None),
        ("cluster2 s4 slices2", S4H2.with_(cluster_m=2), None),
        ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None)])
    for size in (4096, 8192)
]

CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "bf16"), [
        ("tma_store s3", BASE, None),
        ("s4 slices2", S4H2, None),
        ("s4 slices2 g16", S4H2.with_(group_m=16), None),
        ("s4 slices4", S4H4, None),
        ("cluster2 s4 slices2", C2, None),
        ("cluster2 s4 slices2 g16", C2.with_(group_m=16), None),
        ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None),
        ("cluster2 s3", BASE.with_(cluster_m=2), None),
        ("pingpong 128x128 s5", PP, None),
        ("pingpong 128x128 s6 slices2", PP4, None),
        ("pingpong 64x256 s4", PPW, None),
        ("pingpong 128x128 s5 cluster2", PP.with_(cluster_m=2), None),
        ("pingpong 64x256 s4 cluster2", PPW.with_(cluster_m=2), None),
    ]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16"), [
        ("s4 slices2", S4H2, None),
        ("s4 slices4", S4H4, None),
        ("cluster2 s4 slices2", C2, None),
        ("cluster2 s4 slices2 g16", C2.with_(group_m=16), None),
        ("pingpong 128x128 s5", PP, None),
        ("pingpong 128x128 s5 cluster2", PP.with_(cluster_m=2), None),
    ]),
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [
        ("s4 slices4", S4H4, None),
        ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None),
        ("cluster2 s4 direct store", BASE.with_(stages=4, tma_store=False, cluster_m=2), None),
        ("pingpong 128x128 s4 slices2 cluster2", PP.with_(stages=4, store_slices=2, cluster_m=2), None),
    ]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("tma_store s3 (C deferred)", BASE, None),
        ("cluster2 s3 (C deferred)", BASE.with_(cluster_m=2), None),
        ("cluster2 s3 g16", BASE.with_(cluster_m=2, group_m=16), None),
        ("pingpong 128x128 s5", PP, None),
        ("pingpong 64x256 s4", PPW, None),
        ("pingpong 128x128 s5 cluster2", PP.with_(cluster_m=2), None),
        ("pingpong 64x256 s4 cluster2", PPW.with_(cluster_m=2), None),
    ]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu"), [
        ("s4 slices2 (relu, no C)", S4H2, None),
        ("cluster2 s4 slices2", C2, None),
    ]),
    (GemmSpec(8192, 8192, 8192, "nt", "bf16"), [
        ("tma_store s3", BASE, None),
        ("s4 slices2", S4H2, None),
        ("cluster2 s4 slices2", C2, None),
        ("cluster2 s4 slices2 g16", C2.with_(group_m=16), None),
        ("cluster2 s3", BASE.with_(cluster_m=2), None),
        ("pingpong 128x128 s5 cluster2", PP.with_(cluster_m=2), None),
        ("pingpong 64x256 s4 cluster2", PPW.with_(cluster_m=2), None),
    ]),
    (GemmSpec(8192, 8192, 8192, "nt", "fp16"), [
        ("s4 slices2", S4H2, None),
        ("cluster2 s4 slices2", C2, None),
        ("cluster2 s4 slices2 g16", C2.with_(group_m=16), None),
    ]),
]


# Set h200: the H100's best configs and their neighbours, to pick known_configs.json
# entries for the H200.
RING2 = S4H2.with_(c_ring=True)
H200_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    *[(GemmSpec(size, size, size, "nt", dtype), [("s4 slices2", S4H2, None), ("cluster2 s4 slices2", C2, None)])
      for size in (4096, 8192) for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [("s4 slices4", S4H4, None), ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None)]),
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("s4 slices2 C-in-ring", RING2, None), ("cluster2 s4 slices2 C-in-ring", RING2.with_(cluster_m=2), None)]),
]

# Set stmatrix: the epilogue with stmatrix/ldmatrix (four words per instruction) and C asked
# of L2 across the main loop (c_l2_prefetch), against the bests of sets fused and bf16.
RING2C = S4H2.with_(cluster_m=2, c_ring=True)
S8_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("cluster2 s4 slices2 C-in-ring", RING2C, None),
        ("+ C-L2-prefetch", RING2C.with_(c_l2_prefetch=True), None),
        ("+ stmatrix", RING2C.with_(stmatrix=True), None),
        ("+ C-L2-prefetch + stmatrix", RING2C.with_(c_l2_prefetch=True, stmatrix=True), None),
        ("cluster2 s4 slices4 C-in-ring + C-L2-prefetch + stmatrix",
         S4H4.with_(cluster_m=2, c_ring=True, c_l2_prefetch=True, stmatrix=True), None)]),
    *[(GemmSpec(4096, 4096, 4096, "nt", dtype), [
        ("cluster2 s4 slices2", C2, None), ("cluster2 s4 slices2 stmatrix", C2.with_(stmatrix=True), None),
        ("cluster2 s4 slices4 stmatrix", S4H4.with_(cluster_m=2, stmatrix=True), None)]) for dtype in ("fp16", "bf16")],
    *[(GemmSpec(8192, 8192, 8192, "nt", dtype), [
        ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None),
        ("cluster2 s4 slices4 stmatrix", S4H4.with_(cluster_m=2, stmatrix=True), None),
        ("cluster2 s4 slices2 stmatrix", C2.with_(stmatrix=True), None)]) for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [
        ("s4 slices4", S4H4, None), ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None)]),
]

# Set c4: clusters of 4 along M (each block loads a quarter of B and multicasts it),
# against the pair; with 4 blocks a unit row spans 4 tile rows, so smaller group_m keep the group's
# height near the pair's.
C2S = C2.with_(stmatrix=True)
C4_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    *[(GemmSpec(size, size, size, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix", C2S, None),
        ("cluster4 s4 slices2 stmatrix g8", C2S.with_(cluster_m=4), None),
        ("cluster4 s4 slices2 stmatrix g4", C2S.with_(cluster_m=4, group_m=4), None),
        ("cluster4 s4 slices2 stmatrix g2", C2S.with_(cluster_m=4, group_m=2), None)])
      for size, dtype in ((8192, "bf16"), (4096, "bf16"))],
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("cluster2 s4 slices2 C-in-ring + C-L2-prefetch + stmatrix", RING2C.with_(c_l2_prefetch=True, stmatrix=True), None),
        ("cluster4 g4 s4 slices2 C-in-ring + C-L2-prefetch + stmatrix",
         RING2C.with_(cluster_m=4, group_m=4, c_l2_prefetch=True, stmatrix=True), None)]),
]



@dataclass(frozen=True)
class GridOf:
    """Not a patch of the source: the variant is rendered for a GPU whose persistent grid for clusters
    of `cluster` CTAs is `blocks`, e.g. the 64 pairs launched before commit 7de9349."""

    cluster: int
    blocks: int

    def __call__(self, src: KernelSource) -> KernelSource:
        return src

    def gpu(self):
        """The arch table's sm_90 GPU with this cluster capacity."""
        table = geometry(None, "sm_90a")
        blocks = dict(table.cluster_blocks)
        blocks[self.cluster] = self.blocks
        return replace(table, cluster_blocks=tuple(sorted(blocks.items())))


# Set pairs66: pairs launched 66 at a time (all 132 SMs) with the last wave shared out in
# even runs of k-blocks (split_tail), and K walked backwards every other tile (serpentine), against
# the 64 pairs of set stmatrix.
PAIRS64 = GridOf(2, 128)
C2S_RING = RING2C.with_(c_l2_prefetch=True, stmatrix=True)
S9_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    *[(GemmSpec(size, size, size, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix, 64 pairs", C2S, PAIRS64),
        ("same, 66 pairs", C2S, None),
        ("66 pairs + split-tail", C2S.with_(split_tail=True), None),
        ("66 pairs + split-tail + serpentine", C2S.with_(split_tail=True, serpentine=True), None),
        ("64 pairs + serpentine", C2S.with_(serpentine=True), PAIRS64)])
      for size, dtype in ((8192, "bf16"), (8192, "fp16"), (4096, "bf16"), (4096, "fp16"))],
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("cluster2 s4 slices2 C-in-ring + C-L2-prefetch + stmatrix, 64 pairs", C2S_RING, PAIRS64),
        ("66 pairs + split-tail", C2S_RING.with_(split_tail=True), None),
        ("66 pairs + split-tail + serpentine", C2S_RING.with_(split_tail=True, serpentine=True), None),
        (f"66 pairs + split-tail{ALONE}", C2S.with_(split_tail=True), None),
        (f"66 pairs + split-tail + serpentine{ALONE}", C2S.with_(split_tail=True, serpentine=True), None)]),
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [
        ("cluster2 s4 slices4, 64 pairs", S4H4.with_(cluster_m=2), PAIRS64),
        ("66 pairs + split-tail", S4H4.with_(cluster_m=2, split_tail=True), None),
        ("66 pairs + split-tail + serpentine", S4H4.with_(cluster_m=2, split_tail=True, serpentine=True), None)]),
]

# Set pairs66_final: the bests after the pairs66 runs. The grid is now the schedule's choice (64
# pairs unless all 66 take fewer tile-times: at 8192^3 with the split tail's shares).
S9_BEST = C2S.with_(split_tail=True, serpentine=True)
S9_FINAL_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    *[(GemmSpec(8192, 8192, 8192, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix (best at bb1ef35)", C2S, None),
        ("+ split-tail + serpentine", S9_BEST, None),
        ("+ split-tail + serpentine g16", S9_BEST.with_(group_m=16), None)]) for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("cluster2 s4 slices2 C-in-ring + C-L2-prefetch + stmatrix", C2S_RING, None),
        ("+ serpentine", C2S_RING.with_(serpentine=True), None),
        (f"+ serpentine{ALONE}", C2S.with_(serpentine=True), None)]),
    *[(GemmSpec(4096, 4096, 4096, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix", C2S, None), ("+ serpentine", C2S.with_(serpentine=True), None)])
      for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [
        ("cluster2 s4 slices4", S4H4.with_(cluster_m=2), None),
        ("+ serpentine", S4H4.with_(cluster_m=2, serpentine=True), None)]),
]

# Set fused_probes: where the fused kernel's extra time goes. Each probe removes one
# part of what the fused epilogue adds to the GEMM alone; the probes write wrong results on purpose,
# so they are timed only (Unverified), never verified and never kept.
@dataclass(frozen=True)
class Unverified:
    """A source patch whose kernel computes a wrong D on purpose (a timing probe): bench_paired
    times it without the verification every other variant passes first."""

    patch: Patch

    def __call__(self, src: KernelSource) -> KernelSource:
        return self.patch(src)


def _replace_once(src: KernelSource, old: str, new: str) -> KernelSource:
    assert src.code.count(old) == 1, old
    return replace(src, code=src.code.replace(old, new))


def c_not_read(src: KernelSource) -> KernelSource:
    """The epilogue adds zeros instead of reading C from its ring slot (C still lands there)."""
    old = "ldmatrix_x4(c_tile + block_row_offset(r_at, jj + q / 2), c_words[jj / 2]);"
    return _replace_once(src, old, "for (int w = 0; w < 4; ++w) c_words[jj / 2][w] = 0u;")


def c_from_one_tile(src: KernelSource) -> KernelSource:
    """Every tile loads (and prefetches) the C slices of tile (0, 0): the same ring traffic and
    epilogue, with C an L2 hit instead of 32 MB of DRAM reads."""
    src = _replace_once(src, "&full[s], tile_m, tile_n, 0, 0, C_BOXES, slice);", "&full[s], 0, 0, 0, 0, C_BOXES, slice);")
    return _replace_once(src, "prefetch_c_box(tma_C, tile_m, tile_n,", "prefetch_c_box(tma_C, 0, 0,")


def c_slots_empty(src: KernelSource) -> KernelSource:
    """The producer hands the consumers each C slot without loading anything into it: the ring's
    turns and the epilogue's work stay, the C traffic goes."""
    src = _replace_once(src, "mbarrier_arrive_expect_tx(&full[s], C_SLICE_BYTES);\n"
                             "                        load_c_boxes(tma_C, c_slots + s * C_SLOT_BYTES, &full[s], tile_m, tile_n, 0, 0, C_BOXES, slice);",
                        "mbarrier_arrive(&full[s]);")
    return _replace_once(src, "prefetch_c_box(tma_C, tile_m, tile_n, (kb - kb_begin) / c_stride);", "{}")


def no_store(src: KernelSource) -> KernelSource:
    """The GEMM without its write-back (D is never written): what hiding the epilogue could gain."""
    old = "            store_tile_smem(acc, "
    return _replace_once(src, old, "            if (acc[0][0] == 1234.5f) store_tile_smem(acc, ")


S10_FUSED = C2S_RING.with_(serpentine=True)
S10_PROBE_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("C-in-ring + C-L2-prefetch + stmatrix + serpentine", S10_FUSED, None),
        ("probe: C not read (zeros added)", S10_FUSED, Unverified(c_not_read)),
        ("probe: C from tile (0,0) (L2 hits)", S10_FUSED, Unverified(c_from_one_tile)),
        ("probe: C slots empty (no C traffic)", S10_FUSED, Unverified(c_slots_empty)),
        (f"probe: no store{ALONE}", S10_FUSED.without_c_options(), Unverified(no_store))]),
]

# Set overlap: the overlapped epilogue (overlap_epilogue: half-width wgmma, each tile's
# write-back split around the next tile's first k-block) against the bests it builds on.
OVERLAP = {"overlap_epilogue": True}
S10_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    *[(GemmSpec(8192, 8192, 8192, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix split-tail serpentine (best at 0677b29)", S9_BEST, None),
        ("+ overlapped epilogue", S9_BEST.with_(**OVERLAP), None),
        ("+ overlapped epilogue, 4 slices", S9_BEST.with_(store_slices=4, **OVERLAP), None)]) for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("cluster2 s4 slices2 C-in-ring C-L2-prefetch stmatrix serpentine", S10_FUSED, None),
        ("+ overlapped epilogue", S10_FUSED.with_(**OVERLAP), None),
        ("+ overlapped epilogue, 4 slices", S10_FUSED.with_(store_slices=4, **OVERLAP), None),
        (f"+ overlapped epilogue{ALONE}", S10_FUSED.without_c_options().with_(**OVERLAP), None),
        (f"probe: no store{ALONE}", S10_FUSED.without_c_options(), Unverified(no_store))]),
    *[(GemmSpec(4096, 4096, 4096, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix serpentine", C2S.with_(serpentine=True), None),
        ("+ overlapped epilogue", C2S.with_(serpentine=True, **OVERLAP), None)]) for dtype in ("bf16", "fp16")],
    (GemmSpec(4096, 4096, 4096, "nt", "tf32"), [
        ("cluster2 s4 slices4 serpentine", S4H4.with_(cluster_m=2, serpentine=True), None),
        ("+ overlapped epilogue", S4H4.with_(cluster_m=2, serpentine=True, **OVERLAP), None)]),
]

# Set overlap_confirm: a second run of the 8192^3 bests in a fresh process and machine, with the overlapped
# epilogue also without the split tail (what each of the two adds).
S10_CONFIRM_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(8192, 8192, 8192, "nt", dtype), [
        ("cluster2 s4 slices2 stmatrix split-tail serpentine (best at 0677b29)", S9_BEST, None),
        ("+ overlapped epilogue", S9_BEST.with_(**OVERLAP), None),
        ("overlapped epilogue, no split tail", S9_BEST.with_(split_tail=False, **OVERLAP), None)])
    for dtype in ("bf16", "fp16")]

# Set c_patches: where C's cost goes, by source patches. Two change where L2
# keeps what: A and B loaded with an evict_last policy (C and D are already evict_first), and C's
# L2 prefetches issued over the piece's last `window` k-blocks instead of all of them (C then sits
# in L2 for a few µs, not a whole tile). One probe (timed only) drops the wait between the two
# store slices for the previous slice's TMA store to have read the buffer. (The call ran on commit
# 2e102bc's kernel, whose own prefetch was that of 64d187d's kernel; the kernel's prefetch now is the
# 16-k-block window, so rows that ran without a prefetch patch now patch 64d187d's back in. The write-back
# reorder since then is not undone.)
AB_EVICT_LAST = r"""
// (set c_patches) A and B tiles are reused by the other blocks of a round: keep them in L2 ahead
// of the C and D lines, which are read or written once.
__device__ __forceinline__ u64 l2_evict_last_policy() {
    u64 policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void tma_load_2d_last(void* dst, const TmaDescriptor* map, u64* bar, int c0, int c1) {
    tma_load_2d_hinted(dst, map, bar, c0, c1, l2_evict_last_policy());
}
__device__ __forceinline__ void tma_load_2d_multicast_last(void* dst, const TmaDescriptor* map, u64* bar,
                                                           int c0, int c1, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster.L2::cache_hint [%0], [%1, {%3, %4}], [%2], %5, %6;"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask),
                    "l"(l2_evict_last_policy()) : "memory");
}
"""


def ab_evict_last(src: KernelSource) -> KernelSource:
    head = "\n// Producer: copy k-block `kb` of tile"
    src = _replace_once(src, head, AB_EVICT_LAST + head)
    code = src.code.replace("tma_load_2d(a", "tma_load_2d_last(a").replace(
        "tma_load_2d_multicast(b_dst", "tma_load_2d_multicast_last(b_dst").replace("tma_load_2d(b_dst", "tma_load_2d_last(b_dst")
    return replace(src, code=code)


# The producer's C prefetch as the kernel has it since commit 41a6aad: box b, 2·(C_TILE_BOXES - b)
# k-blocks before the piece's end.
C_PREFETCH = ("if (kb_begin == 0 && (kb_end - kb) % 2 == 0 && (kb_end - kb) / 2 <= C_TILE_BOXES)\n"
              "                        prefetch_c_box(tma_C, tile_m, tile_n, C_TILE_BOXES - (kb_end - kb) / 2);")


def c_prefetch_from(first: str) -> Patch:
    """C's prefetches spread evenly over the piece's k-blocks from `first` (a CUDA expression) to its
    end, as 64d187d's kernel spread them from kb_begin; written inline (no producer variables)."""
    stride = f"max(1, (kb_end - ({first})) / C_TILE_BOXES)"
    at = f"(kb - ({first}))"
    def patch(src: KernelSource) -> KernelSource:
        return _replace_once(src, C_PREFETCH,
                             f"if (kb_begin == 0 && kb >= ({first}) && {at} % {stride} == 0 && {at} / {stride} < C_TILE_BOXES)\n"
                             f"                        prefetch_c_box(tma_C, tile_m, tile_n, {at} / {stride});  // (patched)")
    return patch


def c_prefetch_window(window: int) -> Patch:
    """C's prefetches over the piece's last `window` k-blocks (16 is the kernel's own schedule for
    8 boxes, written the way set c_patches patched it)."""
    return c_prefetch_from(f"max(kb_begin, kb_end - {window})")


c_prefetch_whole_tile = c_prefetch_from("kb_begin")  # 64d187d's kernel's: from the piece's first k-block


def both(*patches: Patch) -> Patch:
    def patch(src: KernelSource) -> KernelSource:
        for one in patches:
            src = one(src)
        return src
    return patch


def no_wait_between_slices(src: KernelSource) -> KernelSource:
    """Slice 1 is written without waiting for slice 0's TMA store to have read the buffer (a race:
    D may be wrong), so the probe shows what that wait costs."""
    return _replace_once(src, "if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the previous slice's store",
                         "if (slice == 0 && threadIdx.x % 128 == 0) tma_store_wait_read();  // the previous slice's store")


S11B_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add"), [
        ("C-in-ring C-L2-prefetch stmatrix serpentine (kernel of 64d187d)", S10_FUSED, c_prefetch_whole_tile),
        ("C prefetched over the last 16 k-blocks", S10_FUSED, c_prefetch_window(16)),
        ("C prefetched over the last 8 k-blocks", S10_FUSED, c_prefetch_window(8)),
        ("A, B evict_last", S10_FUSED, both(ab_evict_last, c_prefetch_whole_tile)),
        ("A, B evict_last, C prefetched over the last 16", S10_FUSED, both(ab_evict_last, c_prefetch_window(16))),
        ("probe: no wait between store slices", S10_FUSED, Unverified(both(no_wait_between_slices, c_prefetch_whole_tile))),
        (f"A, B evict_last{ALONE}", S10_FUSED.without_c_options(), ab_evict_last),
        (f"probe: no wait between store slices{ALONE}", S10_FUSED.without_c_options(), Unverified(no_wait_between_slices)),
        (f"overlapped epilogue{ALONE}", S10_FUSED.without_c_options().with_(**OVERLAP), None)]),
]

# A set (removed) timed c_regs, an option that read C into registers a ring's
# depth before each tile's end; it was slower in every run and was removed (commit 2e102bc has it).

# Set c_window: the code as changed after c_patches (C's L2 prefetch over the 16
# k-blocks before its loads; a slice computed into registers before the wait for the buffer), with
# 64d187d's whole-tile prefetch restored by a patch for comparison in the same rounds. (The call
# also timed c_regs, since removed: see the note above.)


S11C_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("C-in-ring C-L2-prefetch stmatrix serpentine", S10_FUSED, None),
        ("C prefetched across the whole tile (kernel of 64d187d)", S10_FUSED, c_prefetch_whole_tile),
        ("+ overlapped epilogue", S10_FUSED.with_(**OVERLAP), None),
        (f"overlapped epilogue{ALONE}", S10_FUSED.without_c_options().with_(**OVERLAP), None)])
    for dtype in ("fp16", "bf16")]

# Set epilogue_probes: the fused epilogue's arithmetic (C's conversion to fp32, relu, add: 384
# instructions a thread a tile in the SASS, against none in the GEMM alone) timed by leaving it out.
def epilogue_math_skipped(src: KernelSource) -> KernelSource:
    """D = A·B rounded: C still lands and is read from its slot (ldmatrix), but nothing is done with it."""
    return _replace_once(src, "    v = fmaxf(v, 0.0f);\n    v += c;\n", "")


S12_PROBE_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("C-in-ring C-L2-prefetch stmatrix serpentine", S10_FUSED, None),
        ("probe: C read, epilogue arithmetic left out", S10_FUSED, Unverified(epilogue_math_skipped)),
        ("probe: no wait between store slices", S10_FUSED, Unverified(no_wait_between_slices))])
    for dtype in ("fp16", "bf16")]

# Set c_path: the fused write-back without its store buffer (d_over_c: D written over C in
# its ring slot, stored from there), and with C's first slice in that buffer's room (c_first_buffer).
# (Call 2 of bench/results/2026-11-23-h100-paired-5.md ran this set at commit 5076657 with relu+add
# finished on the packed pair, max(rn(v + c), c), against the per-value epilogue from before c8761d8:
# slower without d_over_c, equal with it; removed.)
S12_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("C-in-ring C-L2-prefetch stmatrix serpentine", S10_FUSED, None),
        ("+ D over C", S10_FUSED.with_(d_over_c=True), None),
        ("+ D over C, C's first slice in its own buffer", S10_FUSED.with_(d_over_c=True, c_first_buffer=True), None)])
    for dtype in ("fp16", "bf16")]

# Set c_traffic: what C's traffic still costs (calls numbered as in
# git show dcdd80f:bench/results/2026-11-23-h100-fused-clock.md). Call 1 found the fused kernel's cycles equal
# to its GEMM alone's (ncu, power_probe.py) and its clock 1.2-1.6% lower at the 700 W limit (34 MB
# more DRAM reads, C's own). Guesses at spending less: C's L2 prefetches as evict_first lines
# (plain prefetched lines might push out A/B lines until the ring's load reads them), and group_m 16.
# Calls 1-6 timed the rounds in a rotated fixed order, in which the variant listed first (always
# right after torch's eager launches) measured ~1% slow: their +1% for evict_first (listed second
# in call 1) and -0.5-0.9% (listed first in calls 5-6) were that. In a balanced order (call 7 on,
# timing.round_order) evict_first and plain prefetches measured the same; the kernel kept plain ones.
def c_prefetch_evict_first(src: KernelSource) -> KernelSource:
    """C's L2 prefetches carry the evict_first policy that the ring's loads of C already carry."""
    old = ('    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"\n'
           '                 :: "l"(map), "r"(c0), "r"(c1) : "memory");')
    new = ('    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile.L2::cache_hint [%0, {%1, %2}], %3;"\n'
           '                 :: "l"(map), "r"(c0), "r"(c1), "l"(l2_evict_first_policy()) : "memory");')
    return _replace_once(src, old, new)


S12_FINAL = S10_FUSED.with_(d_over_c=True, c_first_buffer=True)
G16 = S12_FINAL.with_(group_m=16)
S13_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [  # (as call 2 ran it)
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("group_m 16, D over C, first slice buffer, C prefetch evict_first", G16, c_prefetch_evict_first),
        ("+ A, B evict_last", G16, both(c_prefetch_evict_first, ab_evict_last)),
        ("group_m 8 (config of 0eaf197), C prefetch evict_first", S12_FINAL, c_prefetch_evict_first),
        ("group_m 8, C prefetch plain (kernel of 0eaf197)", S12_FINAL, None),
        (f"A, B evict_last{ALONE}", G16.without_c_options(), ab_evict_last),
        (f"group_m 8{ALONE}", S12_FINAL.without_c_options(), None),
        (f"overlapped epilogue (best){ALONE}", S12_FINAL.without_c_options().with_(**OVERLAP), None)])
    for dtype in ("fp16", "bf16")]


# Set c_box_rows (call 3; run with and without --lead-us): the final kernel at a lower duty
# cycle, where the card is not held at its power limit, and C's prefetches a whole box row (the
# tile's 512 contiguous bytes of each of 64 rows) at once instead of one 128-byte-wide box every
# second k-block (fewer DRAM pages opened per byte of C, if the controller sees them together).
def c_prefetch_by_row(src: KernelSource) -> KernelSource:
    """C's prefetches four boxes (one box row of the tile) every eighth k-block of the last 16."""
    return _replace_once(src, C_PREFETCH,
                         "if (kb_begin == 0 && (kb_end - kb) % 8 == 0 && (kb_end - kb) / 2 <= C_TILE_BOXES)\n"
                         "                        for (int b = 0; b < BN / OUT_CHUNK; ++b)  // (patched)\n"
                         "                            prefetch_c_box(tma_C, tile_m, tile_n, C_TILE_BOXES - (kb_end - kb) / 2 + b);")


S13B_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [  # (calls 3-4: evict_first)
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("D over C, first slice buffer, C prefetch evict_first", S12_FINAL, c_prefetch_evict_first),
        ("+ C prefetched a box row at a time", S12_FINAL, both(c_prefetch_evict_first, c_prefetch_by_row))])
    for dtype in ("fp16", "bf16")]


# Set untuned_fused (call 4): shapes nobody tuned, fused: the chooser's pick (C through the
# ring, nothing else of the C path) against the same with the rest of it (stmatrix, C's L2
# prefetch, D over C, C's first slice in its own buffer), before the chooser and default_config
# take the rest on.
def _chooser_pick(spec: GemmSpec) -> WgmmaConfig:
    from gemmtune.chooser import rank
    return rank(spec, "sm_90a", geometry(None, "sm_90a").sm_count, "wgmma")[0].config


RING_128x256 = WgmmaConfig(bm=128, bn=256, stages=4, consumers=2, specialized=True, persistent=True, group_m=8,
                           tma_store=True, split_tail=True, store_slices=2, c_ring=True)
S13C_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (spec, [("chooser's pick", _chooser_pick(spec), None),
            ("128x256, C through the ring (the chooser's ring candidate)", RING_128x256, None),
            ("+ stmatrix, C L2 prefetch, D over C, first slice buffer", RING_128x256.with_(**C_PATH), None)])
    for spec in (GemmSpec(2048, 2048, 2048, "nt", "fp16", "relu+add"), GemmSpec(3072, 4096, 768, "nt", "fp16", "relu+add"),
                 GemmSpec(1024, 1024, 16384, "nt", "bf16", "relu+add"), GemmSpec(8192, 8192, 8192, "nt", "bf16", "relu+add"),
                 GemmSpec(4096, 4096, 4096, "nn", "fp16", "relu+add"))]

# Set c_prefetch_policy (call 5): C's prefetch, policy and grouping crossed, on the H200 where call 4
# saw a box row at a time +0.5-0.6% (H100 call 3: +0.6% fp16, 0.0 bf16).
S13D_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(4096, 4096, 4096, "nt", dtype, "relu+add"), [
        ("D over C, first slice buffer, C prefetch evict_first", S12_FINAL, c_prefetch_evict_first),
        ("C prefetch plain (kernel of 0eaf197)", S12_FINAL, None),
        ("C prefetch evict_first, a box row at a time", S12_FINAL, both(c_prefetch_evict_first, c_prefetch_by_row)),
        ("C prefetch plain, a box row at a time", S12_FINAL, c_prefetch_by_row)])
    for dtype in ("fp16", "bf16")]

# Set bars (calls 8-9): the GEMM-alone bars again in the balanced order, with
# the configs known_configs.json ships for the H100 (the H200 entries are the same configs).
def _known(m: int, dtype: str) -> WgmmaConfig:
    from gemmtune.export.config_source import load_known_configs
    for row in load_known_configs():
        if (row.family, row.gpu, row.m, row.layout, row.dtype, row.epilogue) == ("wgmma", "H100", m, "nt", dtype, "none"):
            return row.config
    raise LookupError(f"no H100 entry for {m}^3 nt {dtype}")


S13E_CASES: list[tuple[GemmSpec, list[tuple[str, WgmmaConfig, Patch | None]]]] = [
    (GemmSpec(m, m, m, "nt", dtype), [("known_configs.json's H100 entry", _known(m, dtype), None)])
    for m, dtype in ((4096, "bf16"), (4096, "fp16"), (4096, "tf32"), (8192, "bf16"), (8192, "fp16"))]

SETS = {"all": CASES, "final": FINAL_CASES, "fused": FUSED_CASES, "bf16": BF16_CASES, "h200": H200_CASES,
        "stmatrix": S8_CASES, "c4": C4_CASES, "pairs66": S9_CASES,
        "pairs66_final": S9_FINAL_CASES, "fused_probes": S10_PROBE_CASES, "overlap": S10_CASES,
        "overlap_confirm": S10_CONFIRM_CASES, "c_patches": S11B_CASES, "c_window": S11C_CASES,
        "epilogue_probes": S12_PROBE_CASES, "c_path": S12_CASES, "c_traffic": S13_CASES, "c_box_rows": S13B_CASES,
        "untuned_fused": S13C_CASES, "c_prefetch_policy": S13D_CASES,
        "bars": S13E_CASES}

def max_active_clusters(compiled, cluster_m: int = 2) -> str:
    """How many clusters of this kernel the GPU holds at once (driver's occupancy calculator)."""
    try:
        from cuda.bindings import driver as cu

        from gemmtune.runtime import LoadedKernel

        with LoadedKernel(compiled) as kern:
            config = cu.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = compiled.source.grid
            config.blockDimX, config.blockDimY, config.blockDimZ = compiled.source.block
            config.sharedMemBytes = compiled.source.dynamic_smem
            err, count = cu.cuOccupancyMaxActiveClusters(kern.function, config)
            return f"{count} (of {compiled.source.grid[0] // cluster_m} launched)" if int(err) == 0 else f"error {err}"
    except Exception as exc:  # a diagnostic only: say why it is missing
        return f"unavailable: {type(exc).__name__}: {exc}"


def row_line(name: str, row: BenchRow, cublas_s: float | None, note: str) -> str:
    if not row.median_s:
        return f"| {name} | — | — | — | {row.status}: {row.message[:120]} |"
    ratio = f"{cublas_s / row.median_s:.3f}" if cublas_s else "—"
    return f"| {name} | {row.median_s * 1e6:.1f} | {row.tflops:.0f} | {ratio} | {note} |"


def compile_variant(spec: GemmSpec, config: WgmmaConfig, patch: Patch | None):
    src = render(spec, config, "sm_90a", patch.gpu() if isinstance(patch, GridOf) else None)
    return compile_kernel(patch(src) if patch else src, "sm_90a")




def with_gemm_alone(spec: GemmSpec, variants: list) -> list:
    """`variants`, plus (where `spec` has an epilogue) the first variant's GEMM alone: the same config
    with its options about loading C dropped, run on the spec without its epilogue (variant_spec)."""
    if spec.epilogue.is_identity:
        return list(variants)
    name, config, patch = variants[0]
    grid = patch if isinstance(patch, GridOf) else None  # the same grid; source patches are the epilogue's
    return [*variants, (f"{name}{ALONE}", config.without_c_options(), grid)]


def variant_spec(spec: GemmSpec, name: str) -> GemmSpec:
    """The spec a variant of `spec`'s case runs: its GEMM alone for the added variant."""
    return spec.without_epilogue() if name.endswith(ALONE) else spec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every row here (rewritten after each row)")
    parser.add_argument("--only", help="run the cases whose spec contains this text")
    parser.add_argument("--skip", help="leave out the variants whose name contains this text")
    parser.add_argument("--final", action="store_true", help="the short list: C loaded in boxes a k-block at a time against all at once (same as --set final)")
    parser.add_argument("--set", choices=sorted(SETS), default="all", help="which list of cases to run")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time cuBLAS and every variant this many times in turn (interleaved, so clock and "
                             "temperature drift fall on all alike); a summary gives medians over the rounds")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    dev = query_device()
    protocol = TimingProtocol()
    results: list[dict] = []
    print(f"# wgmma variants, {dev.name}, {date.today().isoformat()}\n", flush=True)

    def emit(spec: GemmSpec, name: str, row: BenchRow, cublas_s: float | None, note: str = "", round_: int = 0) -> None:
        print(row_line(name, row, cublas_s, note), flush=True)  # each row as soon as it exists
        results.append({"spec": spec.short(), "variant": name, "config": row.config, "median_s": row.median_s,
                        "cublas_s": cublas_s, "status": row.status, "message": row.message, "note": note,
                        "round": round_})
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"device": dev.name, "date": date.today().isoformat(), "rows": results}, fh, indent=1)
        if "context is lost" in row.message:  # nothing after this in the process can run
            raise SystemExit(f"stopped: {name} on {spec.short()} lost the CUDA context")

    summaries: list[str] = []
    for spec, variants in SETS["final" if args.final else args.set]:
        if args.only and args.only not in spec.short():
            continue
        plain = GemmSpec(spec.m, spec.n, spec.k, spec.layout, spec.dtype)
        variants = [v for v in variants if not (args.skip and args.skip in v[0])]
        variants = with_gemm_alone(spec, variants)
        kernels = {}
        for name, config, patch in variants:  # compiled once, timed every round
            try:
                kernels[name] = compile_variant(variant_spec(spec, name), config, patch)
            except Exception as exc:  # every variant is a row
                kernels[name] = BenchRow(name, config.describe(), None, None, None, type(exc).__name__, str(exc)[:200])
        cublas_times: list[float] = []
        ours: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        ratios: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for round_ in range(args.rounds):
            cublas = bench_cublas(plain, protocol)
            if cublas.median_s:
                cublas_times.append(cublas.median_s)
            label = f", round {round_ + 1} of {args.rounds}" if args.rounds > 1 else ""
            print(f"\n## {spec.short()}{label} (cuBLAS GEMM {cublas.median_s * 1e6:.1f} µs)\n" if cublas.median_s
                  else f"\n## {spec.short()}{label} (cuBLAS failed: {cublas.message})\n", flush=True)
            print("| variant | µs | TFLOP/s | × cuBLAS | note |\n|---|---|---|---|---|", flush=True)
            for name, config, _ in variants:
                kernel, note = kernels[name], ""
                row = kernel if isinstance(kernel, BenchRow) else bench_compiled(name, config.describe(), kernel, protocol)
                if "cluster" in name and row.median_s and round_ == 0 and not isinstance(kernel, BenchRow):
                    note = "max active clusters " + max_active_clusters(kernel, config.cluster_m)
                emit(spec, name, row, cublas.median_s, note, round_)
                if row.median_s:
                    ours[name].append(row.median_s)
                    if cublas.median_s:
                        ratios[name].append(cublas.median_s / row.median_s)
        last = bench_cublas(plain, protocol)
        emit(spec, "cuBLAS again", last, cublas_times[0] if cublas_times else None, "same spec, after the variants")
        if last.median_s:
            cublas_times.append(last.median_s)
        if args.rounds > 1 and cublas_times:
            ref = median(cublas_times)
            lines = [f"\n## {spec.short()}: medians over {args.rounds} interleaved rounds "
                     f"(cuBLAS {ref * 1e6:.1f} µs, {len(cublas_times)} timings from "
                     f"{min(cublas_times) * 1e6:.1f} to {max(cublas_times) * 1e6:.1f})\n",
                     "| variant | µs | × cuBLAS | per-round ratios |", "|---|---|---|---|"]
            for name, _, _ in variants:
                if ours[name]:
                    spread = ", ".join(f"{r:.3f}" for r in ratios[name])
                    lines.append(f"| {name} | {median(ours[name]) * 1e6:.1f} | {ref / median(ours[name]):.3f} | {spread} |")
                else:
                    lines.append(f"| {name} | — | — | failed |")
            summaries.append("\n".join(lines))
    if summaries:
        print("\n# Summary\n" + "\n".join(summaries), flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
