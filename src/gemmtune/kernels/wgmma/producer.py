"""The wgmma kernel's producer warpgroup, as CUDA text: one thread walks the block's pieces (schedule.py)
and fills the ring with their k-blocks by TMA, and loads C for the epilogue the way the config's C
path asks (groups.CPath): the whole tile into the store buffer under the main loop (TILE), or a
slice per ring slot after the tile's k-blocks (RING and D_OVER_C), optionally warmed in L2 first.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...spec import GemmSpec
from .config import WgmmaConfig
from .groups import CPath

PRODUCER_REGS = 40  # setmaxnreg budget of the producer warpgroup (consumer.CONSUMER_REGS for the others)


@dataclass(frozen=True)
class ProducerC:
    """The producer's C loads, as text spliced into its loop: before the k-blocks of a piece
    (`before`), at the top (`each_first`) and bottom (`each_last`) of each k-block, after them (`after`)."""

    before: str = ""
    each_first: str = ""
    each_last: str = ""
    after: str = ""


def _tile_loads() -> ProducerC:
    """CPath.TILE: the C tile into the store buffer from k-block c_at on, C_BOXES_PER_KB boxes a k-block."""
    before = """
            // Only a piece that writes D (it holds the tile's first k-block; schedule.py) needs C.
            const int c_at = piece_writes_d(unit, kb_begin) ? min(C_LOAD_KB, kb_end - 1) : K_BLOCKS;
            int c_box = 0;  // C boxes issued for this piece"""
    each_last = """
                if (kb == c_at) {  // C lands early under this tile's main loop
                    mbarrier_wait(&c_empty[epi % TILE_TURNS], ((epi / TILE_TURNS) & 1) ^ 1);
                    mbarrier_arrive_expect_tx(&c_full[epi % TILE_TURNS], C_TILE_BYTES);
                }
                if (kb >= c_at && c_box < C_BOXES) {  // C_BOXES_PER_KB boxes a k-block, the rest at the last
                    const int last = kb == kb_end - 1 ? C_BOXES : min(C_BOXES, c_box + C_BOXES_PER_KB);
                    load_c_boxes(tma_C, out_buf, &c_full[epi % TILE_TURNS], tile_m, tile_n, epi % TILE_TURNS,
                                 c_box, last);
                    c_box = last;
                    if (c_box == C_BOXES) ++epi;
                }"""
    return ProducerC(before=before, each_last=each_last)


# Box b of the tile's C is asked of L2 2·(C_TILE_BOXES - b) k-blocks before the piece's end, where
# the ring's loads of C come: early enough for them to hit L2, late enough that C does not sit in
# L2 through the whole tile, pushing out A and B lines that other blocks still read. (Written from
# kb and kb_end alone: the producer has 40 registers, and two more spilled.)
L2_PREFETCH = """
                    if (piece_writes_d(unit, kb_begin) && (kb_end - kb) % 2 == 0 && (kb_end - kb) / 2 <= C_TILE_BOXES)
                        prefetch_c_box(tma_C, tile_m, tile_n, C_TILE_BOXES - (kb_end - kb) / 2);"""


def _ring_loads(c: CPath, l2_prefetch: bool) -> ProducerC:
    """CPath.RING / D_OVER_C: after a tile's k-blocks, its C a slice per slot (D_OVER_C_FIRST_BUFFER:
    the first slice into the buffer of its own)."""
    own = c.first_in_buffer
    own_load = ("""
                    mbarrier_wait(&c_empty[0], (epi & 1) ^ 1);  // the last tile's first store has read the buffer
                    mbarrier_arrive_expect_tx(&c_full[0], C_SLICE_BYTES);
                    load_c_boxes(tma_C, out_buf, &c_full[0], tile_m, tile_n, 0, 0, C_BOXES, 0);
                    ++epi;""" if own else "")
    others = "the first slice into its own buffer, the others " if own else ""
    after = f"""
                if (piece_writes_d(unit, kb_begin)) {{  // the tile's C, {others}a slice per slot, a ring's depth ahead of its epilogue{own_load}
                    for (int slice = {1 if own else 0}; slice < STORE_SLICES; ++slice) {{
                        mbarrier_wait(&empty[ring.s], ring.phase ^ 1);
                        mbarrier_arrive_expect_tx(&full[ring.s], C_SLICE_BYTES);
                        load_c_boxes(tma_C, c_slots + ring.s * C_SLOT_BYTES, &full[ring.s], tile_m, tile_n, 0, 0, C_BOXES, slice);
                        ring.advance();
                    }}
                }}"""
    return ProducerC(each_first=L2_PREFETCH if l2_prefetch else "", after=after)


def producer_c(spec: GemmSpec, config: WgmmaConfig) -> ProducerC:
    c = config.c_path(spec)
    if c is CPath.TILE:
        return _tile_loads()
    if c.through_ring:
        return _ring_loads(c, config.c_l2_prefetch)
    return ProducerC()


def producer(spec: GemmSpec, config: WgmmaConfig) -> str:
    """The producer warpgroup's branch of the kernel: thread 0 issues every copy; the other threads
    only give back registers. serpentine: odd pieces walk their k-blocks backwards (the sum is the
    same; only the order the producer loads them in changes, and the consumers take stages in ring
    order either way)."""
    c = producer_c(spec, config)
    serpentine = ("""
                const bool backwards = cursor % 2 == 0;  // this piece is the worker's 2nd, 4th, ..."""
                  if config.serpentine else "")
    k_block = "backwards ? kb_begin + kb_end - 1 - kb : kb" if config.serpentine else "kb"
    path = config.c_path(spec)
    epi = ("\n            int epi = 0;  // pieces so far that end in an epilogue (whose C tile is loaded)"
           if path.waits_on_buffer else "")
    return f"""
        // Producer warpgroup: one thread issues every copy; the others only give back registers.
        setmaxnreg_dec<{PRODUCER_REGS}>();
        if (threadIdx.x == 0) {{
            Ring ring;{epi}
            while (next_piece(worker, cursor, unit, kb_begin, kb_end)) {{
                int unit_m, tile_n;
                unit_coords(unit, unit_m, tile_n);
                const int tile_m = unit_m * CLUSTER_M + rank;{c.before}{serpentine}
                for (int kb = kb_begin; kb < kb_end; ++kb) {{{c.each_first}
                    mbarrier_wait(&empty[ring.s], ring.phase ^ 1);  // passes at once on the first lap
                    load_stage(tma_A, tma_B, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, &full[ring.s],
                               tile_m, tile_n, {k_block}, rank);
                    ring.advance();{c.each_last}
                }}{c.after}
            }}
        }}
"""
