"""The SGEMM ladder written as numba-cuda kernels: one factory per step, one idea per step.

Each factory closes over the shape and the tile sizes of a SimtConfig (the CUDA-C family's ladder
configs, so rows compare). numba freezes closure variables as compile-time constants, the way the
CUDA-C family bakes them in with constexpr: loops over tiles get constant trip counts, unroll, and
per-thread arrays (cuda.local.array) stay in registers. Operands are raw float32 pointers
(types.CPointer), so the kernels take the same three pointer arguments (A, B, D) as the CUDA-C
kernels and launch through gemmtune's runtime. Every edge is predicated: any M, N, K >= 1 and all
four layouts.

What numba cannot say, the kernels do without: there is no cp.async, so the double-buffer step
stages the next k-slice through registers (the pre-Ampere form); there is no `#pragma unroll N`,
so loops unroll fully or not at all, at NVVM's choice; index arithmetic is 64-bit (numba types
integer arithmetic as intp).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from numba import cuda, float32

from ..errors import ConfigError
from ..kernels.simt.config import SimtConfig
from ..spec import GemmSpec
from .intrinsics import SHARED_ALIGNMENT, load_global4, load_shared4

ZERO = float32(0.0)


@dataclass(frozen=True)
class NumbaKernel:
    """A kernel function (not yet compiled) with its launch shape."""

    template: str  # which factory wrote it: naive, coalesced, smem_tiling, blocktile, warptiling, double_buffer
    function: Callable
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    why: str  # the one idea of this step


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- reading A and B in any layout -----------------------------------------------------------------
def _accessors(spec: GemmSpec) -> tuple[Callable, Callable]:
    """a_at(A, m, k) and b_at(B, k, n): one element of the logical A (M×K) and B (K×N)."""
    M, N, K = spec.m, spec.n, spec.k
    a_trans, b_trans = spec.a_trans, spec.b_trans

    @cuda.jit(device=True, inline="always")
    def a_at(A, m, k):
        return A[k * M + m] if a_trans else A[m * K + k]

    @cuda.jit(device=True, inline="always")
    def b_at(B, k, n):
        return B[n * K + k] if b_trans else B[k * N + n]

    return a_at, b_at


# --- steps 1 and 2: one thread per output ------------------------------------------------------------
def naive(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """threadIdx.x walks rows: a warp reads 32 different rows of A and writes D with stride N."""
    M, N, K, BM, BN = spec.m, spec.n, spec.k, config.bm, config.bn
    a_at, b_at = _accessors(spec)

    def gemm_naive(A, B, D):
        row = cuda.blockIdx.x * BM + cuda.threadIdx.x
        col = cuda.blockIdx.y * BN + cuda.threadIdx.y
        if row < M and col < N:
            acc = ZERO
            for k in range(K):
                acc += a_at(A, row, k) * b_at(B, k, col)
            D[row * N + col] = acc

    return NumbaKernel("naive", gemm_naive, (_ceil_div(M, BM), _ceil_div(N, BN), 1), (BM, BN, 1),
                       naive.__doc__)


def coalesced(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """threadIdx.x walks columns: a warp reads one run of B's row and writes one run of D."""
    M, N, K, BM, BN = spec.m, spec.n, spec.k, config.bm, config.bn
    a_at, b_at = _accessors(spec)

    def gemm_coalesced(A, B, D):
        row = cuda.blockIdx.y * BM + cuda.threadIdx.y
        col = cuda.blockIdx.x * BN + cuda.threadIdx.x
        if row < M and col < N:
            acc = ZERO
            for k in range(K):
                acc += a_at(A, row, k) * b_at(B, k, col)
            D[row * N + col] = acc

    return NumbaKernel("coalesced", gemm_coalesced, (_ceil_div(N, BN), _ceil_div(M, BM), 1), (BN, BM, 1),
                       coalesced.__doc__)


# --- shared pieces of the tiled steps ------------------------------------------------------------------
@dataclass(frozen=True)
class _Operand:
    """How one input's k-slice moves global -> registers -> shared memory.

    The shared tile is always k-major, Xs[k, x] (x = m for A, n for B), so the inner product loop
    reads a contiguous row of it. An operand stored k-major (B in nn) is copied straight across;
    one stored x-major (A in nn) is transposed on the way in.
    """

    k_major: bool  # stored with k as the row index
    rows: int  # rows as stored
    row_length: int  # elements per stored row
    tile: int  # BM or BN
    vec: int  # elements per global load: 4 only when stored rows are 16-byte aligned


def _operands(spec: GemmSpec, config: SimtConfig) -> tuple[_Operand, _Operand]:
    a_k_major, b_k_major = spec.a_trans, not spec.b_trans
    a_rows, a_len = (spec.k, spec.m) if a_k_major else (spec.m, spec.k)
    b_rows, b_len = (spec.k, spec.n) if b_k_major else (spec.n, spec.k)
    a_vec = 4 if config.vec == 4 and a_len % 4 == 0 else 1
    b_vec = 4 if config.vec == 4 and b_len % 4 == 0 else 1
    return (_Operand(a_k_major, a_rows, a_len, config.bm, a_vec),
            _Operand(b_k_major, b_rows, b_len, config.bn, b_vec))


def _slice_loader(op: _Operand, bk: int, threads: int, pad: int) -> tuple[Callable, Callable, int]:
    """fetch(X, staged, tid, x0, k0): this thread's share of one BK-deep k-slice into registers;
    put(Xs, staged, tid): those registers into the k-major shared tile Xs[k, x].

    Kept apart so double buffering can fetch the next slice while the current one is multiplied.
    Returns (fetch, put, registers per thread).
    """
    K_MAJOR, ROWS, ROW_LEN, VEC = op.k_major, op.rows, op.row_length, op.vec
    PER_ROW = (op.tile if op.k_major else bk) // VEC  # loads across one stored row of the tile
    LOADS = (bk * op.tile) // (threads * VEC)  # loads per thread per slice
    THREADS = threads

    @cuda.jit(device=True, inline="always")
    def where(tid, i):
        """(k offset, x offset) in the tile of this thread's i-th load."""
        unit = tid + i * THREADS
        if K_MAJOR:
            return unit // PER_ROW, (unit % PER_ROW) * VEC
        return (unit % PER_ROW) * VEC, unit // PER_ROW

    @cuda.jit(device=True, inline="always")
    def fetch(X, staged, tid, x0, k0):
        for i in range(LOADS):
            dk, dx = where(tid, i)
            row, col = (k0 + dk, x0 + dx) if K_MAJOR else (x0 + dx, k0 + dk)
            inside = row < ROWS and col < ROW_LEN  # with VEC=4, ROW_LEN % 4 == 0: all four or none
            if VEC == 4:
                v = load_global4(X, row * ROW_LEN + col) if inside else (ZERO, ZERO, ZERO, ZERO)
                staged[4 * i], staged[4 * i + 1], staged[4 * i + 2], staged[4 * i + 3] = v
            else:
                staged[i] = X[row * ROW_LEN + col] if inside else ZERO

    @cuda.jit(device=True, inline="always")
    def put(Xs, staged, tid):
        for i in range(LOADS):
            dk, dx = where(tid, i)
            for j in range(VEC):  # along the stored row: x when k-major, else k (the transpose)
                if K_MAJOR:
                    Xs[dk, dx + j] = staged[VEC * i + j]
                else:
                    Xs[dk + j, dx] = staged[VEC * i + j]

    return fetch, put, LOADS * VEC


def _fragment_loader(count: int, vec: int) -> Callable:
    """fragment(Xs, k, x, out, offset): out[offset : offset+count] = Xs[k, x : x+count], in 128-bit
    shared reads when vec == 4 (x is then a multiple of 4 and the rows 16-byte aligned)."""
    COUNT, VEC = count, (4 if vec == 4 and count % 4 == 0 else 1)

    @cuda.jit(device=True, inline="always")
    def fragment(Xs, k, x, out, offset):
        if VEC == 4:
            row_length = Xs.shape[1]
            for j in range(0, COUNT, 4):
                out[offset + j], out[offset + j + 1], out[offset + j + 2], out[offset + j + 3] = \
                    load_shared4(Xs, k * row_length + x + j)
        else:
            for j in range(COUNT):
                out[offset + j] = Xs[k, x + j]

    return fragment


def _store_tile(spec: GemmSpec) -> Callable:
    """store(D, acc, r0, c0, rows, cols, ar, ac): D[r0+i, c0+j] = acc[ar+i, ac+j] inside the matrix."""
    M, N = spec.m, spec.n

    @cuda.jit(device=True, inline="always")
    def store(D, acc, r0, c0, rows, cols, ar, ac):
        for i in range(rows):
            for j in range(cols):
                if r0 + i < M and c0 + j < N:
                    D[(r0 + i) * N + c0 + j] = acc[ar + i, ac + j]

    return store


def _check_tiled(spec: GemmSpec, config: SimtConfig) -> None:
    a, b = _operands(spec, config)
    for name, op in (("A", a), ("B", b)):
        if (config.bk * op.tile) % (config.threads * op.vec):
            raise ConfigError(f"numba: the {name} slice of {config.bk}x{op.tile} does not split over "
                              f"{config.threads} threads x vec{op.vec}")


# --- step 3: shared-memory tiling --------------------------------------------------------------------
def smem_tiling(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """Each block stages BK-deep slices of A and B in shared memory, so a global element is read
    once per block instead of once per thread; every thread still makes one output."""
    _check_tiled(spec, config)
    M, N, K, BM, BN, BK, PAD = spec.m, spec.n, spec.k, config.bm, config.bn, config.bk, config.pad
    THREADS = config.threads
    A_WIDTH, B_WIDTH = BM + PAD, BN + PAD  # shared rows, padded against bank conflicts
    a_op, b_op = _operands(spec, config)
    fetch_a, put_a, A_REGS = _slice_loader(a_op, BK, THREADS, PAD)
    fetch_b, put_b, B_REGS = _slice_loader(b_op, BK, THREADS, PAD)

    def gemm_smem_tiling(A, B, D):
        As = cuda.shared.array((BK, A_WIDTH), float32)
        Bs = cuda.shared.array((BK, B_WIDTH), float32)
        a_staged = cuda.local.array(A_REGS, float32)
        b_staged = cuda.local.array(B_REGS, float32)
        tid = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        ty, tx = tid // BN, tid % BN
        acc = ZERO
        for k0 in range(0, K, BK):
            fetch_a(A, a_staged, tid, row0, k0)
            fetch_b(B, b_staged, tid, col0, k0)
            put_a(As, a_staged, tid)
            put_b(Bs, b_staged, tid)
            cuda.syncthreads()
            for k in range(BK):
                acc += As[k, ty] * Bs[k, tx]
            cuda.syncthreads()  # before the next slice overwrites the tiles
        if row0 + ty < M and col0 + tx < N:
            D[(row0 + ty) * N + col0 + tx] = acc

    return NumbaKernel("smem_tiling", gemm_smem_tiling, (_ceil_div(N, BN), _ceil_div(M, BM), 1),
                       (THREADS, 1, 1), smem_tiling.__doc__)


# --- steps 4-6: register blocking (1D, 2D, then 128-bit loads) -----------------------------------------
def blocktile(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """Each thread computes a TM×TN patch from TM values of A and TN of B held in registers, so
    each shared read feeds TN (or TM) multiply-adds (1D: TN=1, 2D: both > 1). With vec=4 the slices
    come in 128-bit global loads and the register fragments in 128-bit shared reads."""
    _check_tiled(spec, config)
    M, N, K, BM, BN, BK, PAD = spec.m, spec.n, spec.k, config.bm, config.bn, config.bk, config.pad
    TM, TN, THREADS, VEC = config.tm, config.tn, config.threads, config.vec
    A_WIDTH, B_WIDTH = BM + PAD, BN + PAD  # shared rows, padded against bank conflicts
    a_op, b_op = _operands(spec, config)
    fetch_a, put_a, A_REGS = _slice_loader(a_op, BK, THREADS, PAD)
    fetch_b, put_b, B_REGS = _slice_loader(b_op, BK, THREADS, PAD)
    store = _store_tile(spec)
    a_fragment, b_fragment = _fragment_loader(TM, VEC), _fragment_loader(TN, VEC)

    def gemm_blocktile(A, B, D):
        As = cuda.shared.array((BK, A_WIDTH), float32, alignment=SHARED_ALIGNMENT)
        Bs = cuda.shared.array((BK, B_WIDTH), float32, alignment=SHARED_ALIGNMENT)
        a_staged = cuda.local.array(A_REGS, float32)
        b_staged = cuda.local.array(B_REGS, float32)
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TN, float32)
        acc = cuda.local.array((TM, TN), float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = ZERO
        tid = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        ty, tx = tid // (BN // TN), tid % (BN // TN)  # this thread's patch in the block tile
        for k0 in range(0, K, BK):
            fetch_a(A, a_staged, tid, row0, k0)
            fetch_b(B, b_staged, tid, col0, k0)
            put_a(As, a_staged, tid)
            put_b(Bs, b_staged, tid)
            cuda.syncthreads()
            for k in range(BK):
                a_fragment(As, k, ty * TM, a_frag, 0)
                b_fragment(Bs, k, tx * TN, b_frag, 0)
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        store(D, acc, row0 + ty * TM, col0 + tx * TN, TM, TN, 0, 0)

    return NumbaKernel("blocktile", gemm_blocktile, (_ceil_div(N, BN), _ceil_div(M, BM), 1), (THREADS, 1, 1),
                       blocktile.__doc__)


# --- steps 7-8: warp tiles, then double buffering ---------------------------------------------------------
def warptiling(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """Each warp owns a WM×WN patch of the block tile and walks it in WMITER×WNITER sub-tiles, so a
    warp's shared reads touch few distinct addresses (broadcasts) and the register fragments are
    reused across sub-tiles. With stages=2 the next k-slice is fetched into registers before the
    current one is multiplied and stored to the other shared buffer after: its global latency hides
    behind the math, and one barrier per slice is enough (numba has no cp.async)."""
    _check_tiled(spec, config)
    M, N, K, BM, BN, BK, PAD = spec.m, spec.n, spec.k, config.bm, config.bn, config.bk, config.pad
    TM, TN, THREADS, VEC, STAGES = config.tm, config.tn, config.threads, config.vec, config.stages
    WM, WN, WMITER, WNITER = config.wm, config.wn, config.wmiter, config.wniter
    SUB_M, SUB_N = WM // WMITER, WN // WNITER  # one sub-tile: 32 threads of TM×TN
    A_WIDTH, B_WIDTH = BM + PAD, BN + PAD  # shared rows, padded against bank conflicts
    ROWS, COLS = WMITER * TM, WNITER * TN  # this thread's accumulators
    a_op, b_op = _operands(spec, config)
    fetch_a, put_a, A_REGS = _slice_loader(a_op, BK, THREADS, PAD)
    fetch_b, put_b, B_REGS = _slice_loader(b_op, BK, THREADS, PAD)
    store = _store_tile(spec)
    a_fragment, b_fragment = _fragment_loader(TM, VEC), _fragment_loader(TN, VEC)
    SLICES = _ceil_div(K, BK)

    @cuda.jit(device=True, inline="always")
    def multiply_slice(As, Bs, acc, a_frag, b_frag, a_x, b_x):
        for k in range(BK):
            for wm in range(WMITER):
                a_fragment(As, k, a_x + wm * SUB_M, a_frag, wm * TM)
            for wn in range(WNITER):
                b_fragment(Bs, k, b_x + wn * SUB_N, b_frag, wn * TN)
            for i in range(ROWS):
                for j in range(COLS):
                    acc[i, j] += a_frag[i] * b_frag[j]

    def gemm_warptiling(A, B, D):
        As = cuda.shared.array((STAGES, BK, A_WIDTH), float32, alignment=SHARED_ALIGNMENT)
        Bs = cuda.shared.array((STAGES, BK, B_WIDTH), float32, alignment=SHARED_ALIGNMENT)
        a_staged = cuda.local.array(A_REGS, float32)
        b_staged = cuda.local.array(B_REGS, float32)
        a_frag = cuda.local.array(ROWS, float32)
        b_frag = cuda.local.array(COLS, float32)
        acc = cuda.local.array((ROWS, COLS), float32)
        for i in range(ROWS):
            for j in range(COLS):
                acc[i, j] = ZERO
        tid = cuda.threadIdx.x
        warp, lane = tid // 32, tid % 32
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
        a_x = (warp // (BN // WN)) * WM + (lane // (SUB_N // TN)) * TM  # first row of this thread's patch
        b_x = (warp % (BN // WN)) * WN + (lane % (SUB_N // TN)) * TN  # first column
        fetch_a(A, a_staged, tid, row0, 0)
        fetch_b(B, b_staged, tid, col0, 0)
        put_a(As[0], a_staged, tid)
        put_b(Bs[0], b_staged, tid)
        cuda.syncthreads()
        for s in range(SLICES):
            buf = s % STAGES
            more = s + 1 < SLICES
            if STAGES == 2 and more:  # next slice into registers; its loads fly during the math
                fetch_a(A, a_staged, tid, row0, (s + 1) * BK)
                fetch_b(B, b_staged, tid, col0, (s + 1) * BK)
            multiply_slice(As[buf], Bs[buf], acc, a_frag, b_frag, a_x, b_x)
            if STAGES == 1:
                cuda.syncthreads()  # everyone is done reading before the tile is overwritten
                if more:
                    fetch_a(A, a_staged, tid, row0, (s + 1) * BK)
                    fetch_b(B, b_staged, tid, col0, (s + 1) * BK)
            if more:
                put_a(As[(s + 1) % STAGES], a_staged, tid)
                put_b(Bs[(s + 1) % STAGES], b_staged, tid)
                cuda.syncthreads()
        for wm in range(WMITER):
            for wn in range(WNITER):
                store(D, acc, row0 + a_x + wm * SUB_M, col0 + b_x + wn * SUB_N, TM, TN, wm * TM, wn * TN)

    return NumbaKernel("warptiling" if STAGES == 1 else "double_buffer", gemm_warptiling,
                       (_ceil_div(N, BN), _ceil_div(M, BM), 1), (THREADS, 1, 1), warptiling.__doc__)


def kernel_for(spec: GemmSpec, config: SimtConfig) -> NumbaKernel:
    """The factory a SimtConfig maps to: its kind, then register blocking, then warp tiles."""
    if config.kind == "naive":
        return naive(spec, config)
    if config.kind == "coalesced":
        return coalesced(spec, config)
    if config.warptiled:
        return warptiling(spec, config)
    if config.tm == 1 and config.tn == 1:
        return smem_tiling(spec, config)
    return blocktile(spec, config)
