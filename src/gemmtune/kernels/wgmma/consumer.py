"""The wgmma kernel's consumer warpgroups, as CUDA text: wait for a ring slot, multiply it, release the
one before, and write each finished tile back (writeback.py) through the config's C path.

Two loops: the plain one (a tile's k-blocks, then its write-back), and the overlapped one
(overlap_epilogue: every wgmma half the tile wide, each half's write-back under the other half's
wgmma). Both step the ring with the ring part and call the write-back through `StoreCall`, which
names the ring position C is read from instead of rewriting a call's text.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...spec import GemmSpec
from . import gated
from .config import SPLIT_BUFFERS, WgmmaConfig
from .groups import CPath
from .writeback import bias_prefetch_call

CONSUMER_REGS = 232  # setmaxnreg budget: 128·40 (producer) + 256·232 ≤ 64K registers
THREE_CONSUMER_REGS = 152  # with 3 consumer warpgroups: 128·40 + 384·152 ≤ 64K


def consumer_regs(config: WgmmaConfig) -> int:
    """The registers a consumer thread asks for (setmaxnreg.inc): the 64K the producer does not keep."""
    return THREE_CONSUMER_REGS if config.consumers == 3 else CONSUMER_REGS


@dataclass(frozen=True)
class StoreCall:
    """How a consumer calls the write-back for its epilogue: `call(first, last, slot)` is the text of
    one call for slices first..last-1 with C read from ring position `slot` (C through the ring)."""

    spec: GemmSpec
    config: WgmmaConfig
    turn_barrier: str  # C's full barrier and phase where C waits in the store buffer

    @property
    def c(self) -> CPath:
        return self.config.c_path(self.spec)

    def _others(self) -> str:
        return "".join(f", {op.name}" for op in self.spec.epilogue.operands() if op.name != "C")

    def c_args(self, slot: str = "ring") -> str:
        """store_tile_smem's arguments after tma_D: C's ring position and barriers, then bias etc."""
        if self.c is CPath.NONE:
            return self._others()
        if not self.c.through_ring:
            return f", {self.turn_barrier}{self._others()}"
        pending = ", c_pending" if self.c.d_over_c else ""
        pending += ", &c_full[0], epi & 1" if self.c.first_in_buffer else ""
        return f", c_slots, full, empty, {slot}{pending}{self._others()}"

    def call(self, first: str = "0", last: str = "STORE_SLICES", slot: str = "ring") -> str:
        if not self.config.tma_store:
            operands = "".join(f", {op.name}" for op in self.spec.epilogue.operands())
            return gated.call(self.spec, f"store_tile(acc, tile_m, tile_n, consumer, D{operands});")
        template = f"<{first}, {last}>" if self.config.overlap_epilogue else ""
        return gated.call(self.spec, f"store_tile_smem{template}(acc, tile_m, tile_n, consumer, out_buf, "
                                     f"tma_D{self.c_args(slot)});")


# --- the plain loop ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConsumerC:
    """The plain loop's C bookkeeping, as text: the pending-slot declaration, the k-block at which the
    buffer goes back (`release_at`), the hand-back inside the k-loop and what follows the store."""

    pending: str = ""
    release_at: str = ""
    hand_back: str = ""
    after_store: str = ""


def _tile_bookkeeping() -> ConsumerC:
    """CPath.TILE: the buffer goes back to the producer early in the next piece, once the last store
    has read it."""
    return ConsumerC(
        pending="bool c_pending = false;",
        release_at="""
            const int release_at = kb_begin + min(C_RELEASE_KB, kb_end - kb_begin - 1);""",
        hand_back="""
                if (kb == release_at && c_pending) {  // the previous tile's store has read the buffer:
                    if (threadIdx.x % 128 == 0) {     // it may take the next tile's C
                        tma_store_wait_read();
                        mbarrier_arrive(&c_empty[turn]);
                    }
                    c_pending = false;
                }""",
        after_store="\n            c_pending = true;  // the buffer goes back to the producer early in the next piece")


def _d_over_c_bookkeeping(c: CPath) -> ConsumerC:
    """CPath.D_OVER_C: the slot of the last slice D was written over goes back once its store has read it."""
    own_back = ("\n                    if (threadIdx.x % 128 == 0) mbarrier_arrive(&c_empty[0]);  // and the first slice's buffer"
                if c.first_in_buffer else "")
    return ConsumerC(pending="int c_pending = -1;  // a ring slot still read by a store of D", hand_back=f"""
                if (c_pending >= 0) {{  // under this piece's first wgmma, the last tile's last store
                    if (threadIdx.x % 128 == 0) tma_store_wait_read();  // has read its ring slot
                    __syncwarp();
                    release_ring_slot(&empty[c_pending]);{own_back}
                    c_pending = -1;
                }}""")


def consumer_c(spec: GemmSpec, config: WgmmaConfig) -> ConsumerC:
    c = config.c_path(spec)
    if c is CPath.TILE:
        return _tile_bookkeeping()
    if c.d_over_c:
        return _d_over_c_bookkeeping(c)
    return ConsumerC()


# Ping-pong: barrier waits go by phase parity, which cannot tell a stage's lap n from lap n + 2: a
# consumer may only wait on its tile's stages once the tile before (the other consumer's) has passed
# all of its own, which also keeps the two main loops in turn.
PINGPONG_NOTE = """
        // Ping-pong: consumer c multiplies the block's tiles c, c + 2, ...; the producer fills the
        // ring tile after tile, so one consumer's main loop starts as the other's ends, and each
        // epilogue runs under the other consumer's wgmma."""
PINGPONG_WAIT = """
            if (piece > 0) mbarrier_wait(&mainloop_done[1 - turn], ((piece - 1) / TILE_TURNS) & 1);"""
PINGPONG_END = """
            if (threadIdx.x % 128 == 0) mbarrier_arrive(&mainloop_done[turn]);  // the other consumer's turn"""
def split_partial(share: str = "") -> str:
    """A split tile's piece that does not write D: store its partial sums (and, with `share`, sum and
    write its share of the tile: schedule.share_call); else the finisher adds the others'."""
    return f"""
            if (!writes_d) {{  // {_partial_note(share)}
                store_partial(acc, consumer);{share}
                continue;
            }}
            if (kb_end < K_BLOCKS) add_partials(acc, worker, rank, consumer, unit);  // the tile's other K ranges"""


def _partial_note(share: str) -> str:
    """The comment on a piece that stores partial sums: who adds them."""
    if share:
        return "a piece of a tile summed in shares: store these sums, then sum and write this piece's share"
    return "a later K range of a split tile: its finisher adds these sums"


def _plain_write_back(spec: GemmSpec, config: WgmmaConfig) -> tuple[ConsumerC, str, tuple[str, str, str]]:
    """What the plain loop and the 3xtf32 loop share at a tile's end: C's bookkeeping, the store call,
    and the count of pieces that wrote D where C's barriers go by it (its declaration, the skip of
    another consumer's piece, the step after a store; empty texts otherwise)."""
    c = consumer_c(spec, config)
    store = StoreCall(spec, config, "&c_full[turn], (epi / TILE_TURNS) & 1").call() + c.after_store
    if not config.c_path(spec).waits_on_buffer:  # C's barriers go by D's pieces
        return c, store, ("", "", "")
    return c, store, ("\n        int epi = 0;  // pieces before this one that wrote D (each used the C tile and buffer turn)",
                      "\n                epi += writes_d;", "\n            ++epi;")


def _piece_start(more_sums: str = "") -> str:
    """A piece's tile coordinates and its zeroed running sums (`more_sums`: further arrays declared
    beside them, such as 3xtf32's partial)."""
    return f"""int unit_m, tile_n;
            unit_coords(unit, unit_m, tile_n);
            const int tile_m = unit_m * CLUSTER_M + rank;
            float acc[M_BLOCKS][BN / 2]{more_sums};
            #pragma unroll
            for (int mb = 0; mb < M_BLOCKS; ++mb)
                #pragma unroll
                for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;"""


def consumer_plain(spec: GemmSpec, config: WgmmaConfig, split: bool, share: str = "") -> str:
    """Wait for a stage, multiply it, release the one before (one wgmma group stays in flight so the
    tensor cores never wait on the release); after the tile's k-blocks, write it back."""
    c, store, (epi_decl, epi_skip, epi_next) = _plain_write_back(spec, config)
    pingpong = config.pingpong
    return f"""
        // Consumer warpgroups: wait for a stage, multiply it, release the one before (one wgmma
        // group stays in flight so the tensor cores never wait on the release), then write back.{PINGPONG_NOTE if pingpong else ""}
        setmaxnreg_inc<{consumer_regs(config)}>();
        const int consumer = threadIdx.x / 128 - 1;
        const int turn = PINGPONG ? consumer : 0;  // whose epilogue buffer and C barriers
        {c.pending}
        Ring ring;  // the ring position, continued piece after piece as the producer fills it{epi_decl}
        for (int piece = 0; next_piece(worker, cursor, unit, kb_begin, kb_end); ++piece) {{
            const bool writes_d = piece_writes_d(unit, kb_begin);  // finishes the tile (schedule.py)
            if (piece % TILE_TURNS != turn) {{  // the other ping-pong consumer's tile: skip its k-blocks
                ring.skip(kb_end - kb_begin);{epi_skip}
                continue;
            }}
            {_piece_start()}{bias_prefetch_call(spec)}
            int previous = -1;{PINGPONG_WAIT if pingpong else ""}{c.release_at}
            for (int kb = kb_begin; kb < kb_end; ++kb) {{
                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();
                mma_stage(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                wgmma_commit();
                wgmma_wait<1>();{c.hand_back}
                if (previous >= 0) release_stage(previous);
                previous = ring.s;
                ring.advance();
            }}
{PINGPONG_END if pingpong else ""}
            wgmma_wait<0>();
            release_stage(previous);{split_partial(share) if split else ""}
            {store}{epi_next}
        }}"""


# --- the overlapped loop -------------------------------------------------------------------------------
def _first_k_block(indent: str, between: list[str] = ()) -> str:
    """A piece's first k-block: the lower half's group, then `between`, then the upper half's."""
    lines = ["mbarrier_wait(&full[ring.s], ring.phase);",
             "wgmma_fence();",
             "mma_stage<0>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer, true);",
             "wgmma_commit();",
             *between,
             "mma_stage<1>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer, true);",
             "wgmma_commit();",
             "wgmma_wait<1>();  // the lower group: one group in flight here, as after every k-block",
             "previous = ring.s;",
             "ring.advance();"]
    return f"\n{indent}".join(lines)


def _finish_split(finish: str, share: str = "") -> str:
    """A piece of a split tile that may end with a partial sum (no `continue`: the iteration must still
    start the next piece's first k-block)."""
    return f"""if (!writes_d) {{  // {_partial_note(share)}
                    store_partial(acc, consumer);{share.replace(chr(10), chr(10) + "    ")}
                }} else {{
                    if (kb_end < K_BLOCKS) add_partials(acc, worker, rank, consumer, unit);  // the tile's other K ranges
                    {finish}
                }}"""


def _overlapped_loop_body(store: StoreCall, ring_c: bool, split: bool, share: str = "", prefetch: str = "") -> str:
    """One piece of the overlapped loop, from its second k-block to the next piece's first (`prefetch`:
    the bias prefetch's call, writeback.bias_prefetch_call)."""
    upper = store.call("STORE_SLICES / 2", "STORE_SLICES", "upper_c")
    finish = store.call("0", "STORE_SLICES", "ring")
    finish = _finish_split(finish, share) if split else finish
    skip_c_slot = """
                upper_c = ring;  // the upper half's C slices wait in the next slots
                for (int slice = 0; slice < STORE_SLICES / 2; ++slice)
                    ring.advance();""" if ring_c else ""
    upper_under_lower = ["if (whole) {  // the tile before's upper half, written back under the lower group",
                         f"    {upper}",
                         "}",
                         "wgmma_fence();"]
    return f"""
        while (more) {{  // the piece's first k-block is in flight
            const bool writes_d = piece_writes_d(unit, kb_begin);  // finishes the tile (schedule.py)
            const bool whole = writes_d && kb_end == K_BLOCKS;  // a whole tile: its write-back overlaps
            int unit_m, tile_n;
            unit_coords(unit, unit_m, tile_n);
            const int tile_m = unit_m * CLUSTER_M + rank;{prefetch}
            for (int kb = kb_begin + 1; kb < (whole ? kb_end - 1 : kb_end); ++kb) {{
                mbarrier_wait(&full[ring.s], ring.phase);
                wgmma_fence();
                mma_stage<0>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                mma_stage<1>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                wgmma_commit();
                wgmma_wait<1>();
                release_stage(previous);
                previous = ring.s;
                ring.advance();
            }}
            if (whole) {{
                if (kb_end - kb_begin > 1) {{  // the last k-block, a group per half
                    mbarrier_wait(&full[ring.s], ring.phase);
                    wgmma_fence();
                    mma_stage<0>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                    wgmma_commit();
                    mma_stage<1>(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                    wgmma_commit();
                    wgmma_wait<1>();  // all but the upper group
                    release_stage(previous);
                    previous = ring.s;
                    ring.advance();
                }}  // (a one-k-block tile: its lower group is done, its upper group in flight)
                // The lower half, written back while the upper group runs.
                {store.call("0", "STORE_SLICES / 2", "ring")}{skip_c_slot}
                wgmma_wait<0>();  // the upper group, done under that store
                release_stage(previous);  // the last k-block's slot, free before the next tile loads
            }} else {{
                wgmma_wait<0>();
                release_stage(previous);
                {finish}
            }}
            more = next_piece(worker, cursor, unit, kb_begin, kb_end);
            if (more) {{  // the next piece's first k-block
                {_first_k_block(" " * 16, upper_under_lower)}
            }} else if (whole) {{  // the worker's last tile
                {upper}
            }}
        }}"""


def consumer_overlapped(spec: GemmSpec, config: WgmmaConfig, split: bool, share: str = "") -> str:
    """The consumers' loop with overlap_epilogue: every wgmma is half the tile wide, and a whole tile's
    write-back runs while the tensor cores work on the other half. The tile's last k-block is two
    groups (lower, then upper): the lower half is written back while the upper group runs, and the
    last k-block's ring slot goes back as soon as that group is done. The upper half is written back
    while the next piece's first k-block runs on the lower half (its own group, fresh), before that
    k-block's upper group starts. Pieces that end with a partial sum (split tails) end as in the
    plain loop.

    ptxas keeps wgmma asynchronous only where it can prove that no other instruction touches the
    registers of a wgmma in flight. A 256-wide wgmma over both halves serialised the whole kernel
    (C7511), as did a group in flight across the loop's back edge, or paths that meet with different
    numbers of groups in flight (C7514). So every wgmma is 128 wide; the loop is rotated (an
    iteration ends by starting the next piece's first k-block); every piece ends with no group in
    flight, and every k-block with one. No instruction zeroes the accumulator: each piece's first
    k-block overwrites it (fresh). Without the ring an overlapped epilogue reads no C (constraint),
    so c_full is passed unused."""
    ring_c = config.c_path(spec).through_ring
    store = StoreCall(spec, config, "&c_full[0], 0")
    ring_slot = "\n        Ring upper_c;  // the upper half's first C slot" if ring_c else ""
    return f"""
        setmaxnreg_inc<{consumer_regs(config)}>();
        const int consumer = threadIdx.x / 128 - 1;
        Ring ring;  // the ring position, continued piece after piece as the producer fills it
        int previous = 0;          // the ring slot of the last k-block issued
        float acc[M_BLOCKS][BN / 2];{ring_slot}
        bool more = next_piece(worker, cursor, unit, kb_begin, kb_end);
        if (more) {{  // the first piece's first k-block: the lower half's group, then the upper half's
            {_first_k_block(" " * 12)}
        }}{_overlapped_loop_body(store, ring_c, split, share, bias_prefetch_call(spec))}"""


# --- the 3xtf32 loop -------------------------------------------------------------------------------
SPLIT_BARRIER = 4  # named barrier of the consumers' residual tiles (1 + consumer are the write-back's)
UNSPLIT_BARRIER = 5  # named barrier that ORs, over a piece, whether a value was too small to split


def consumer_split(spec: GemmSpec, config: WgmmaConfig, split: bool, share: str = "") -> str:
    """fp32 as 3xtf32: the plain loop, with each k-block split into tf32 parts first. The residuals
    of k-block kb + 1 are written while kb's wgmma run (into the other of SPLIT_BUFFERS tiles), and
    a named barrier of all consumers at the top of each k-block says both shares of B's residual
    are written (each consumer splits half of B). Each k-block's three products go into a fresh
    partial sum, added to the running sum in fp32 once the group is done: the tensor cores'
    accumulation truncates, and carried across all of K it loses bits with every k-block. A piece
    whose operands hold a value too small to split is summed again with fp32 FMAs after its loop
    (render.exact_piece): that value's residual would fall below fp32's normal range, where the
    tensor cores read zero."""
    c, store, (epi_decl, _, epi_next) = _plain_write_back(spec, config)  # (no other consumer's pieces)
    split_next = ("unsplittable |= split_stage(a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, "
                  f"a_small + (splits % {SPLIT_BUFFERS}) * A_ELEMS, b_small + (splits % {SPLIT_BUFFERS}) * B_ELEMS, consumer);")
    return f"""
        // Consumer warpgroups (3xtf32): split a stage into tf32 parts, multiply them into a fresh
        // partial sum, add it to the running sum in fp32; the next stage is split under the wgmma.
        setmaxnreg_inc<{consumer_regs(config)}>();
        const int consumer = threadIdx.x / 128 - 1;
        const int turn = 0;  // the epilogue buffer and C barriers (cooperative consumers: one)
        {c.pending}
        Ring ring;  // the ring position, continued piece after piece as the producer fills it
        int splits = 0;  // k-blocks split so far: the next goes to residual tile splits % {SPLIT_BUFFERS}{epi_decl}
        for (int piece = 0; next_piece(worker, cursor, unit, kb_begin, kb_end); ++piece) {{
            const bool writes_d = piece_writes_d(unit, kb_begin);  // finishes the tile (schedule.py)
            {_piece_start(', part[M_BLOCKS][BN / 2]')}{bias_prefetch_call(spec)}{c.release_at}
            bool unsplittable = false;  // this thread found a value too small to split in the piece
            mbarrier_wait(&full[ring.s], ring.phase);
            {split_next}
            for (int kb = kb_begin; kb < kb_end; ++kb) {{
                const int slot = ring.s, residual = splits % {SPLIT_BUFFERS};
                fence_async_shared();  // the residuals written here are visible to wgmma (async proxy)
                named_barrier({SPLIT_BARRIER}, CONSUMERS * 128);  // and the other consumer's share of B's
                wgmma_fence();
                mma_stage_split(part, a_tiles + slot * A_ELEMS, b_tiles + slot * B_ELEMS,
                                a_small + residual * A_ELEMS, b_small + residual * B_ELEMS, consumer);
                wgmma_commit();
                ++splits;
                ring.advance();
                if (kb + 1 < kb_end) {{  // the next k-block's residuals, under this one's wgmma
                    mbarrier_wait(&full[ring.s], ring.phase);
                    {split_next}
                }}
                wgmma_wait<0>();
                #pragma unroll
                for (int mb = 0; mb < M_BLOCKS; ++mb)
                    #pragma unroll
                    for (int i = 0; i < BN / 2; ++i) acc[mb][i] += part[mb][i];{c.hand_back}
                release_stage(slot);
            }}
            // A value too small to split in the piece, found by any thread of either consumer: the
            // tensor cores lost its residual, so the piece is summed again on CUDA cores.
            if (named_barrier_or({UNSPLIT_BARRIER}, CONSUMERS * 128, unsplittable))
                exact_piece(acc, A, B, tile_m, tile_n, consumer, kb_begin, kb_end);{split_partial(share) if split else ""}
            {store}{epi_next}
        }}"""


# --- tf32 stored MN-major: the transposing loop ------------------------------------------------------
def consumer_transposing(spec: GemmSpec, config: WgmmaConfig, split: bool, share: str = "") -> str:
    """tf32 with an MN-major operand: the plain loop, with each stage's MN-major rows transposed in
    place first (render.transpose_stage). The next stage is transposed while this one's wgmma run;
    a named barrier of all consumers at the top of each k-block says both shares of B are done (each
    consumer transposes half of B), and one wgmma group stays in flight as in the plain loop."""
    c, store, (epi_decl, _, epi_next) = _plain_write_back(spec, config)  # (no other consumer's pieces)
    transpose_next = "transpose_stage(a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);"
    return f"""
        // Consumer warpgroups (tf32 stored MN-major): transpose a stage into the K-major layout wgmma
        // reads, multiply it, release the one before; the next stage is transposed under the wgmma.
        setmaxnreg_inc<{consumer_regs(config)}>();
        const int consumer = threadIdx.x / 128 - 1;
        const int turn = 0;  // the epilogue buffer and C barriers (cooperative consumers: one)
        {c.pending}
        Ring ring;  // the ring position, continued piece after piece as the producer fills it{epi_decl}
        for (int piece = 0; next_piece(worker, cursor, unit, kb_begin, kb_end); ++piece) {{
            const bool writes_d = piece_writes_d(unit, kb_begin);  // finishes the tile (schedule.py)
            {_piece_start()}{bias_prefetch_call(spec)}
            int previous = -1;{c.release_at}
            mbarrier_wait(&full[ring.s], ring.phase);
            {transpose_next}
            for (int kb = kb_begin; kb < kb_end; ++kb) {{
                fence_async_shared();  // the transposed tiles written here are visible to wgmma (async proxy)
                named_barrier({SPLIT_BARRIER}, CONSUMERS * 128);  // and the other consumer's share of B
                wgmma_fence();
                mma_stage(acc, a_tiles + ring.s * A_ELEMS, b_tiles + ring.s * B_ELEMS, consumer);
                wgmma_commit();
                const int slot = ring.s;
                ring.advance();
                if (kb + 1 < kb_end) {{  // the next stage, under this one's wgmma
                    mbarrier_wait(&full[ring.s], ring.phase);
                    {transpose_next}
                }}
                wgmma_wait<1>();{c.hand_back}
                if (previous >= 0) release_stage(previous);
                previous = slot;
            }}
            wgmma_wait<0>();
            release_stage(previous);{split_partial(share) if split else ""}
            {store}{epi_next}
        }}"""
