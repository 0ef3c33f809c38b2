"""mma.sync GEMM generator: MmaConfig + GemmSpec -> readable CUDA (KernelSource).

Sizes are baked in as constants. Each operand is copied to shared memory as stored (no transpose:
A as M×K or K×M, B as K×N or N×K), so cp.async can move it; the fragment loads do the rest:
ldmatrix for K-major tiles, ldmatrix.trans for MN-major 16-bit tiles, plain 32-bit loads where
ldmatrix does not fit (MN-major tf32, or the smem_mma step). With transpose_copy an MN-major tf32
operand goes through registers instead and is stored K-major, so ldmatrix reads it as K-major. The copy width comes from the spec:
16 bytes where every stored row of the operand allows it, else 8, 4, or 2-byte elements. Edges are
zero-filled at the copy (K too), so the main loop never branches on them; the write-back is guarded.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import ConfigError
from ...kernel_source import KernelSource
from ...spec import GemmSpec
from ..config_base import arch_number
from ..parts.epilogue import POINTER_DECLS, CArg, Operands, VectorArg, epilogue_function, pointer_params
from ..parts.floats import FLOAT_VIEW, HALF_FLOATS, PACK_PAIR, TO_OUT
from ..parts.ring import SLICE_RING
from ..parts.writeback import CRead, PairFragment, PairOutput, pair_epilogue, pair_io, pair_stores, staged_bias
from .config import (
    INPUT_BYTES,
    KSTEP_BYTES,
    NAME,
    VERSION,
    FP8_BLOCK,
    MmaConfig,
    block_scaled,
    copy_width,
    ldmatrix_reads,
    operand_extent,
    rejections,
    splits_fp32,
    stored_row,
    tensor_dtype,
)
from .ptx import CP_ASYNC, LDMATRIX, SMEM_ADDR, SPLIT_TF32, mma_helper

STORAGE_TYPES = {"fp32": "float", "tf32": "float", "bf16": "bf16_t", "fp16": "fp16_t",
                 "e4m3": "unsigned char", "e5m2": "unsigned char"}  # fp8: the 8-bit codes
COPY_TYPES = {16: "uint4", 8: "uint2", 4: "u32", 2: "unsigned short"}
# apply_epilogue takes C's element (loaded by the caller, a pair at a time where aligned) and the bias:
# its element, read by the caller once per column (row) a thread holds (STAGED_BIAS), or as a
# FloatView of D's type that apply_epilogue indexes, guarded, per element (VIEWED_BIAS).
STAGED_BIAS = Operands(CArg.VALUE, VectorArg.VALUE)
VIEWED_BIAS = Operands(CArg.VALUE, VectorArg.VIEW)
# The mma.sync accumulator fragment: thread (g, t) of a warp holds rows g and g + 8, columns 2t and
# 2t + 1 of each 16x8 tile (acc[i][j][0..1] and [2..3]).
# The columns loop innermost: a row's pairs are stored together, so the write-back reads that row's C
# before its first store (parts/writeback.py staged_c) instead of one read after each store.
FRAGMENT = PairFragment(
    loops=(("i", "MT"), ("h", "2"), ("j", "NT")), row="m0 + wrow + i * 16 + g + h * 8",
    col="n0 + wcol + j * 8 + 2 * t", values=("acc[i][j][2 * h]", "acc[i][j][2 * h + 1]"), row_depth=2,
    note="Thread (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each 16x8 tile.",
    col_loop="j", row_loops=("i", "h"))
# Beside C's reads, staging the bias spilled 8-16 B where a thread holds 128 sums (64x64 warp tiles,
# NVRTC 13.0, sm_80 and sm_90); those read it in place.
STAGED_BIAS_MAX_SUMS_WITH_C = 64


def epilogue_operands(spec: GemmSpec, config: MmaConfig) -> Operands:
    """STAGED_BIAS (the write-back reads each column's or row's bias once: parts/writeback.py's
    staged_bias over FRAGMENT's loops), except beside C in the largest warp tiles."""
    if spec.epilogue.reads_c and config.accumulators > STAGED_BIAS_MAX_SUMS_WITH_C:
        return VIEWED_BIAS
    return STAGED_BIAS


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def entry_name(spec: GemmSpec) -> str:
    return f"{spec.slug()}_mma"


@dataclass(frozen=True)
class Operand:
    """How one input is held in shared memory and read into fragments."""

    name: str        # "A" or "B"
    extent: str      # "M" or "N": the dimension that is not K
    tile: int        # BM or BN
    bk: int          # the k-slice depth in elements
    k_major: bool    # K contiguous in shared memory: the tile is [tile][bk], else [bk][tile] (as stored,
                     # except where `transposed`)
    elem: int        # bytes per element
    copy_bytes: int  # bytes per global -> shared copy
    use_async: bool  # cp.async (else through registers)
    use_ldmatrix: bool
    swizzle: bool
    transposed: bool = False  # stored MN-major in the matrix, K-major in shared memory (transpose_copy)

    @property
    def rows(self) -> int:
        return self.tile if self.k_major else self.bk

    @property
    def cols(self) -> int:
        return self.bk if self.k_major else self.tile

    @property
    def row_bytes(self) -> int:
        return self.cols * self.elem

    @property
    def tile_bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def lower(self) -> str:
        return self.name.lower()


def operands(spec: GemmSpec, config: MmaConfig, arch: str) -> tuple[Operand, Operand]:
    elem, bk = INPUT_BYTES[tensor_dtype(spec)], config.bk(tensor_dtype(spec))
    cp_async = config.async_copy and arch_number(arch) >= 80
    found = []
    for name, extent, tile, k_major in (("A", "M", config.bm, not spec.a_trans), ("B", "N", config.bn, spec.b_trans)):
        width = copy_width(stored_row(spec, name, k_major), elem)
        if config.transpose_copy and not k_major:  # through registers, K-major in shared memory
            found.append(Operand(name, extent, tile, bk, True, elem, width, False, config.ldmatrix, config.swizzle, True))
            continue
        ldm = config.ldmatrix and ldmatrix_reads(spec, k_major)
        found.append(Operand(name, extent, tile, bk, k_major, elem, width, cp_async and width >= 4, ldm, config.swizzle))
    return found[0], found[1]


# --- shared-memory layout ------------------------------------------------------------------------
def _swizzle(op: Operand) -> tuple[str, int]:
    """The row's XOR mask over 16-byte chunks, and the rows after which it repeats (offset(row + p, c)
    = offset(row, c) + p rows): the 8 rows one ldmatrix phase reads land on 8 distinct chunk positions
    of a 128-byte bank line (rows of 32 or 64 bytes share a line). ("", 1): rows stored plainly."""
    if not op.swizzle or op.row_bytes < 32:
        return "", 1
    if op.elem == 4 and not op.use_ldmatrix and op.row_bytes >= 128:
        # Plain 32-bit fragment loads of an MN-major tf32 tile: one load reads rows k+t (t = 0..3) at 8
        # consecutive words (two chunks); shifting each row's chunk pair by 2t puts the four rows on
        # four distinct 32-byte bank groups.
        return "((row & 3) << 1)", 4
    if op.row_bytes >= 128:
        return "(row & 7)", 8
    return ("((row >> 1) & 3)" if op.row_bytes == 64 else "((row >> 2) & 1)"), 8


def _offset_function(op: Operand) -> str:
    term = _swizzle(op)[0]
    layout = f"[{op.rows}][{op.cols}]"
    if term:
        body = (f"    const int byte = col * {op.elem};\n"
                f"    return row * {op.row_bytes} + ((((byte >> 4) ^ {term}) << 4) | (byte & 15));")
        how = "16-byte chunks XOR-swizzled by row"
    else:
        body = f"    return row * {op.row_bytes} + col * {op.elem};"
        how = "plain rows (ldmatrix's rows may share banks)"
    what = "[x][k]: K contiguous" if op.k_major else "[k][x]: " + op.extent + " contiguous"
    return (f"// {op.name}'s tile in shared memory: {layout} elements, {what}, {how}.\n"
            f"__device__ __forceinline__ int {op.lower}_offset(int row, int col) {{\n{body}\n}}\n")


# --- global -> shared ---------------------------------------------------------------------------
def _unit_bytes(op: Operand) -> int:
    """Bytes of the shared row one copy unit fills: 2-byte operands go 16 bytes (8 elements) at a time."""
    return 16 if op.copy_bytes == 2 else op.copy_bytes


def register_words(op: Operand) -> int:
    """32-bit registers one register-staged copy unit holds between its global loads and its shared store."""
    return 5 if op.copy_bytes == 2 else op.copy_bytes // 4


def register_loads(op: Operand, threads: int) -> int:
    return _ceil_div(op.rows * (op.row_bytes // _unit_bytes(op)), threads)


def _unit_loop(op: Operand, threads: int, unroll: str = "") -> str:
    """The head of the loop over a thread's copy units (row, col in the shared tile; gx, gk in the
    matrix). `unroll`: the pragma's count ("" unrolls whole)."""
    unit = _unit_bytes(op)
    x, k = ("row", "col") if op.k_major else ("col", "row")
    pragma = f"#pragma unroll {unroll}" if unroll else "#pragma unroll"
    return f"""    constexpr int PER_ROW = {op.row_bytes // unit}, UNITS = {op.rows} * PER_ROW;
    {pragma}
    for (int l = 0; l < (UNITS + THREADS - 1) / THREADS; ++l) {{
        const int idx = threadIdx.x + l * THREADS;
        if (UNITS % THREADS != 0 && idx >= UNITS) break;
        const int row = idx / PER_ROW, col = (idx % PER_ROW) * {unit // op.elem};
        const int gx = x0 + {x}, gk = k0 + {k};"""


def _global_at(op: Operand) -> str:
    """The element offset of (gx, gk) in the stored matrix."""
    return "(unsigned)gx * K + gk" if op.k_major and not op.transposed else f"(unsigned)gk * {op.extent} + gx"


def _strided_units(spec: GemmSpec, op: Operand, threads: int) -> bool:
    """Whether a thread's 16-byte copy units all sit in one chunk column, STEP rows apart, with the
    swizzle repeating every STEP rows (and every unit's offset from the first fits an int): one global
    pointer and one shared address a thread then cover every unit, the others at compile-time offsets."""
    per_row = op.row_bytes // 16
    if op.copy_bytes != 16 or threads % per_row:
        return False
    step = threads // per_row
    return op.rows % step == 0 and step % _swizzle(op)[1] == 0 and op.rows * stored_row(spec, op.name, op.k_major) * op.elem < 2**31


def _strided_async_copy(spec: GemmSpec, op: Operand, threads: int) -> str:
    """cp.async of 16-byte units from one per-thread pointer: thread t copies chunk column t % PER_ROW
    of rows t / PER_ROW + l * STEP, each unit at a compile-time byte offset from the first (written
    into the instruction; as a C++ offset NVVM split it into one 64-bit pointer a unit, and 128x128
    tiles spilled). A slice's address work is one pointer add, and the bounds checks are only those
    the shape needs: an operand whose extent is a multiple of its tile, or a K that is a multiple of
    BK, drops them; a unit that fails one reads nothing (src-size 0) and lands as zeros.
    Measured on an H100 (forced bf16 4096^3 nt, 128x256 tile): 342 -> 329 us at 64-byte slices, and
    128-byte slices went from slower (377 us) to faster (309 us) than 64-byte ones."""
    full_x, full_k = operand_extent(spec, op.name) % op.tile == 0, spec.k % op.bk == 0
    per_row, step, stride = op.row_bytes // 16, threads // (op.row_bytes // 16), stored_row(spec, op.name, op.k_major)
    if op.k_major:  # rows are x (M or N), the chunk column runs along K
        x_ok, k_ok = f"x0 + row0 + {{l}} * STEP < {op.extent}", "k0 + col < K"
        start = "(size_t)(x0 + row0) * K + (k0 + col)"
    else:  # rows are k, the chunk column runs along x
        x_ok, k_ok = f"x0 + col < {op.extent}", "k0 + row0 + {l} * STEP < K"
        start = f"(size_t)(k0 + row0) * {op.extent} + (x0 + col)"
    checks = [c for c, needed in ((x_ok, not full_x), (k_ok, not full_k)) if needed]
    copies = "\n".join(
        f"    cp_async_16_at<{l * step * stride * op.elem}>(dst + {l * step * op.row_bytes}, src, "
        f"{' && '.join(checks).format(l=l) or 'true'});" for l in range(op.rows // step))
    return f"""// {op.name}: global -> shared (cp.async, 16 B each); thread t copies chunk column t % PER_ROW of rows
// t / PER_ROW + l * STEP: one pointer and one shared address (the swizzle repeats every STEP rows) with
// compile-time offsets. {"Units outside the matrix read nothing and land as zeros, so edge tiles need no branches later." if checks else "The shape is whole tiles of this operand: no bounds checks."}
__device__ __forceinline__ void load_{op.lower}(unsigned char* stage, const in_t* __restrict__ {op.name}, int x0, int k0) {{
    constexpr int PER_ROW = {per_row}, STEP = THREADS / PER_ROW;
    const int row0 = threadIdx.x / PER_ROW, col = (threadIdx.x % PER_ROW) * {16 // op.elem};
    const in_t* src = {op.name} + {start};
    const u32 dst = smem_addr(stage + {op.lower}_offset(row0, col));
    (void)STEP;
{copies}
}}
"""


def _async_copy(spec: GemmSpec, op: Operand, threads: int) -> str:
    """cp.async straight into shared memory. Narrow copies are many per thread: unrolled whole, ptxas
    hoists every one's address out of the k-loop and spills (64x64 warp tiles of tf32 at odd sizes);
    a partial unroll keeps them in the loop."""
    if _strided_units(spec, op, threads):
        return _strided_async_copy(spec, op, threads)
    narrow = op.rows * (op.row_bytes // _unit_bytes(op)) > 4 * threads
    return f"""// {op.name}: global -> shared (cp.async, {op.copy_bytes} B each); zeros outside the matrix, so edge tiles need no branches later.
__device__ __forceinline__ void load_{op.lower}(unsigned char* stage, const in_t* __restrict__ {op.name}, int x0, int k0) {{
{_unit_loop(op, threads, "4" if narrow else "")}
        const bool ok = gx < {op.extent} && gk < K;
        const unsigned at = ok ? {_global_at(op)} : 0u;
        cp_async_{op.copy_bytes}(smem_addr(stage + {op.lower}_offset(row, col)), ok ? (const void*)({op.name} + at) : (const void*){op.name}, ok);
    }}
}}
"""


@dataclass(frozen=True)
class RegisterCopy:
    """A register-staged copy unit, as text: what the copy does (`how`), its global loads into r[l]
    (`fetch`), its shared store from r[l] (`store`), and the matrix as words where it needs one."""

    how: str
    fetch: str
    store: str
    words_ptr: str = ""


def _wide_register_copy(op: Operand) -> RegisterCopy:
    """4-, 8- or 16-byte units: one vector load, one vector store."""
    kind = COPY_TYPES[op.copy_bytes]
    fetch = f"""        const bool ok = gx < {op.extent} && gk < K;
        const {kind} v = ok ? *reinterpret_cast<const {kind}*>({op.name} + ({_global_at(op)})) : {kind}{{}};
        *reinterpret_cast<{kind}*>(r[l]) = v;"""
    store = f"""        *reinterpret_cast<{kind}*>(stage + {op.lower}_offset(row, col)) = *reinterpret_cast<const {kind}*>(r[l]);"""
    return RegisterCopy(f"{op.copy_bytes}-byte loads", fetch, store)


def _odd_row_register_copy(spec: GemmSpec, op: Operand) -> RegisterCopy:
    """Rows of odd length: 8 elements (one 16-byte shared chunk) from the five aligned 32-bit words
    that cover them, shifted by one element where the unit starts at an odd element."""
    row, length, rows = (("gx", "K", op.extent) if op.k_major else ("gk", op.extent, "K"))
    first = "gk" if op.k_major else "gx"
    how = ("2-byte elements, below cp.async's 4-byte minimum: each unit is 8 elements of a stored row, read\n"
           "// as the five aligned 32-bit words covering them (addresses clamped to the row's last word, so no\n"
           "// read leaves the row) and funnel-shifted into place at the store")
    total = spec.k * operand_extent(spec, op.name)
    # An odd element count leaves the matrix's last element alone in the low half of a word whose
    # high half lies past the end: that word is read as one 2-byte element.
    word = (f"(w_at < {total // 2}u ? words[w_at] : (u32)reinterpret_cast<const unsigned short*>({op.name})[2 * w_at])"
            if total % 2 else "words[w_at]")
    fetch = f"""        const unsigned start = (unsigned){row} * {length} + {first}, last = ((unsigned){row} * {length} + {length} - 1) >> 1;
        #pragma unroll
        for (int w = 0; w < 5; ++w) {{
            const unsigned w_at = min((start >> 1) + w, last);
            r[l][w] = {row} < {rows} ? {word} : 0u;
        }}"""
    store = f"""        const bool odd = (((unsigned){row} * {length} + {first}) & 1u) != 0;
        const int valid = {length} - {first};  // elements of this unit inside the row (may be <= 0 or > 8)
        u32 v[4];
        #pragma unroll
        for (int w = 0; w < 4; ++w) {{
            const u32 word = odd ? __funnelshift_r(r[l][w], r[l][w + 1], 16) : r[l][w];
            v[w] = word & (2 * w + 1 < valid ? 0xFFFFFFFFu : 2 * w < valid ? 0x0000FFFFu : 0u);
        }}
        *reinterpret_cast<uint4*>(stage + {op.lower}_offset(row, col)) = make_uint4(v[0], v[1], v[2], v[3]);"""
    return RegisterCopy(how, fetch, store, f"    const u32* words = reinterpret_cast<const u32*>({op.name});\n")


def _transposed_unit_loop(op: Operand, unroll: str = "") -> str:
    """The head of the loop over a thread's copy units of a transposed operand: unit idx is the E
    elements x..x+E-1 of stored row k (one vector load along M or N), k = idx % BK fastest, so a
    warp's 32 units cover 32/BK consecutive units c at every k of the slice."""
    per = op.copy_bytes // op.elem
    pragma = f"#pragma unroll {unroll}" if unroll else "#pragma unroll"
    return f"""    constexpr int E = {per}, UNITS = {op.bk} * ({op.tile} / E);  // E elements along {op.extent} per unit
    {pragma}
    for (int l = 0; l < (UNITS + THREADS - 1) / THREADS; ++l) {{
        const int idx = threadIdx.x + l * THREADS;
        if (UNITS % THREADS != 0 && idx >= UNITS) break;
        const int k = idx % {op.bk}, c = idx / {op.bk};
        const int gx = x0 + c * E, gk = k0 + k;"""


def _rotation_step(op: Operand) -> int:
    """Units c whose rows share a 128-byte bank line (32 / BK of them in a warp) over the E rows a unit
    stores: the rotation advances every this many units (see _transposed_store)."""
    per, lines = op.copy_bytes // op.elem, 32 // op.bk
    return max(1, lines // per)


def _transposed_store(op: Operand) -> str:
    """The scattered shared store of a transposed unit: its E words go to rows x .. x+E-1 of the
    K-major tile, each at column k. Why this is free of bank conflicts: a warp's 32 lanes hold every k
    of the slice (BK = 8, 16 or 32 words, one row's bank line share) for 32/BK consecutive units c.
    Store s of every lane writes one row per c; rows x and x' fall on distinct banks iff they sit in
    different parts of a 128-byte line, i.e. x mod (32/BK) differs (the XOR swizzle only permutes
    16-byte chunks inside a row). Storing the words in program order would give every lane the same
    x mod E, so each store instruction would hit one part: 2-way (BK 16) or 4-way (BK 8) conflicts.
    Rotating each unit's words by rot(c) = (c / step) % E (step = _rotation_step) makes
    x = E*c + (s + rot) % E distinct mod 32/BK across the warp's units, so every store instruction
    touches 32 distinct banks. The rotation is a few selects on registers (constant indices)."""
    per = op.copy_bytes // op.elem
    rotate = ""
    if per == 2:
        rotate = "        if (rot & 1) { const u32 t0 = w[0]; w[0] = w[1]; w[1] = t0; }\n"
    elif per == 4:
        rotate = ("        if (rot & 1) { const u32 t0 = w[0]; w[0] = w[1]; w[1] = w[2]; w[2] = w[3]; w[3] = t0; }\n"
                  "        if (rot & 2) { u32 t0 = w[0]; w[0] = w[2]; w[2] = t0; t0 = w[1]; w[1] = w[3]; w[3] = t0; }\n")
    return f"""        // Words rotated by rot: store s writes element (s + rot) % E (rows spread over the bank line).
        const int rot = (c / {_rotation_step(op)}) % E;
        u32 w[E];
        #pragma unroll
        for (int e = 0; e < E; ++e) w[e] = r[l][e];
{rotate}        #pragma unroll
        for (int s = 0; s < E; ++s)
            *reinterpret_cast<u32*>(stage + {op.lower}_offset(c * E + (s + rot) % E, k)) = w[s];"""


def _transposed_register_copy(op: Operand) -> RegisterCopy:
    """A transposed operand: one vector load along M or N (as the wide copy), E scalar stores down the
    K-major tile's rows."""
    wide = _wide_register_copy(op)
    how = f"{op.copy_bytes}-byte loads along {op.extent}, stored transposed: K-major in shared memory"
    return RegisterCopy(how, wide.fetch, _transposed_store(op))


def _copy_function(spec: GemmSpec, op: Operand, threads: int) -> str:
    if op.use_async:
        return _async_copy(spec, op, threads)
    if op.transposed:
        copy = _transposed_register_copy(op)
    else:
        copy = _wide_register_copy(op) if op.copy_bytes >= 4 else _odd_row_register_copy(spec, op)
    how, fetch, store, words_ptr = copy.how, copy.fetch, copy.store, copy.words_ptr
    words = register_words(op)
    regs = f"u32 (&r)[{register_loads(op, threads)}][{words}]"
    signature = f"const in_t* __restrict__ {op.name}, int x0, int k0"
    loop = _transposed_unit_loop(op) if op.transposed else _unit_loop(op, threads)
    # The unstaged copy goes unit by unit (a few units unrolled: unrolled whole, ptxas hoists every
    # unit's addresses out of the k-loop and spills).
    one = _transposed_unit_loop(op, "2") if op.transposed else _unit_loop(op, threads, "2")
    return f"""// {op.name}: global -> registers -> shared ({how}); zeros outside the matrix, so edge tiles need no
// branches later. fetch/store: the loads early, the store after the mma work they hide behind; copy: both at once.
__device__ __forceinline__ void fetch_{op.lower}({regs}, {signature}) {{
{words_ptr}{loop}
{fetch}
    }}
}}
__device__ __forceinline__ void store_{op.lower}(unsigned char* stage, const {regs}, int x0, int k0) {{
{loop}
        (void)gx; (void)gk;
{store}
    }}
}}
__device__ __forceinline__ void copy_{op.lower}(unsigned char* stage, {signature}) {{
{words_ptr}{one}
        u32 r[1][{words}];
        {{ const int l = 0;
{fetch}
{store}
        }}
    }}
}}
"""


# --- shared -> fragments ------------------------------------------------------------------------
def _at(op: Operand, x: str, k: str) -> str:
    """Byte offset of element (x, k) of the operand's tile."""
    return f"{op.lower}_offset({x}, {k})" if op.k_major else f"{op.lower}_offset({k}, {x})"


def _a_fragments(op: Operand) -> str:
    """a[i][0..3] for the warp's MT 16-row blocks at k-step kk (the m16n8k16 / m16n8k8 A layout)."""
    half = 16 // op.elem  # elements in 16 bytes: the k extent of one 8x8 ldmatrix block
    if op.use_ldmatrix and op.k_major:
        load = f"ldmatrix_x4(a[i], a_base + {_at(op, 'x + (lane & 15)', f'kk + (lane >> 4) * {half}')});"
        why = "ldmatrix: lanes 0-15 give rows 0-15 at k, lanes 16-31 the same rows at k + 16 bytes"
    elif op.use_ldmatrix:
        load = (f"ldmatrix_x4_trans(a[i], a_base + "
                f"{_at(op, 'x + (((lane >> 3) & 1) << 3)', 'kk + (lane & 7) + ((lane >> 4) << 3)')});")
        why = "ldmatrix.trans: the M-contiguous tile transposed into the row-major A fragment"
    elif op.elem == 1:  # fp8, K-major: four 8-bit values a word
        load = " ".join(f"a[i][{r}] = lds32(a_ptr + {_at(op, f'x + g + {dx}', f'kk + 4 * t + {dk}')});"
                        for r, (dx, dk) in enumerate(((0, 0), (8, 0), (0, 16), (8, 16))))
        why = "plain loads: a0 (g, 4t..4t+3), a1 (g+8, ..), a2 (g, 4t+16..), a3 (g+8, 4t+16..)"
    elif op.elem == 4:
        load = " ".join(f"a[i][{r}] = lds32(a_ptr + {_at(op, f'x + g + {dx}', f'kk + t + {dk}')});"
                        for r, (dx, dk) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))))
        why = "plain loads: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)"
    else:
        load = " ".join(f"a[i][{r}] = {_pair(op, 'a_ptr', f'x + g + {dx}', f'kk + 2 * t + {dk}')};"
                        for r, (dx, dk) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))))
        why = "plain loads: a0 (g, 2t..2t+1), a1 (g+8, ..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)"
    return f"""            // A fragments ({why}).
            #pragma unroll
            for (int i = 0; i < MT; ++i) {{
                const int x = wrow + i * 16;
                {load}
            }}
"""


def _pair(op: Operand, ptr: str, x: str, k: str) -> str:
    """Two 16-bit elements (x, k) and (x, k + 1) in one register, k in the low half."""
    if op.k_major:
        return f"lds32({ptr} + {_at(op, x, k)})"
    return f"pack16(lds16({ptr} + {_at(op, x, k)}), lds16({ptr} + {_at(op, x, f'{k} + 1')}))"


def _b_fragments(op: Operand) -> str:
    """b[j][0..1] for the warp's NT 8-column blocks at k-step kk (the col-major B layout)."""
    half = 16 // op.elem
    if op.use_ldmatrix:
        if op.k_major:
            at = _at(op, "x + ((lane >> 4) << 3) + (lane & 7)", f"kk + ((lane >> 3) & 1) * {half}")
            load, why = f"ldmatrix_x4(r, b_base + {at});", "ldmatrix: two 8-column blocks, both k halves"
        else:
            at = _at(op, "x + ((lane >> 4) << 3)", "kk + (lane & 7) + (((lane >> 3) & 1) << 3)")
            load, why = f"ldmatrix_x4_trans(r, b_base + {at});", "ldmatrix.trans of the N-contiguous tile"
        return f"""            // B fragments ({why}).
            #pragma unroll
            for (int j = 0; j < NT; j += 2) {{
                const int x = wcol + j * 8;
                u32 r[4];
                {load}
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }}
"""
    if op.elem == 1:  # fp8, K-major
        load = (f"b[j][0] = lds32(b_ptr + {_at(op, 'x + g', 'kk + 4 * t')}); "
                f"b[j][1] = lds32(b_ptr + {_at(op, 'x + g', 'kk + 4 * t + 16')});")
        why = "plain loads: b0 (k 4t..4t+3, n g), b1 (k 4t+16.., n g)"
    elif op.elem == 4:
        load = (f"b[j][0] = lds32(b_ptr + {_at(op, 'x + g', 'kk + t')}); "
                f"b[j][1] = lds32(b_ptr + {_at(op, 'x + g', 'kk + t + 4')});")
        why = "plain loads: b0 (k t, n g), b1 (k t+4, n g)"
    else:
        load = (f"b[j][0] = {_pair(op, 'b_ptr', 'x + g', 'kk + 2 * t')}; "
                f"b[j][1] = {_pair(op, 'b_ptr', 'x + g', 'kk + 2 * t + 8')};")
        why = "plain loads: b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)"
    return f"""            // B fragments ({why}).
            #pragma unroll
            for (int j = 0; j < NT; ++j) {{
                const int x = wcol + j * 8;
                {load}
            }}
"""


LDS = r"""
// Plain shared-memory reads of fragment elements (the smem_mma step, and MN-major tf32 tiles).
__device__ __forceinline__ u32 lds32(const unsigned char* p) { return *reinterpret_cast<const u32*>(p); }
__device__ __forceinline__ u32 lds16(const unsigned char* p) { return *reinterpret_cast<const unsigned short*>(p); }
__device__ __forceinline__ u32 pack16(u32 lo, u32 hi) { return lo | (hi << 16); }
"""


# --- write-back ---------------------------------------------------------------------------------
def _output(spec: GemmSpec, config: MmaConfig, arch: str) -> PairOutput:
    """C and bias come as plain pointers: C read a pair at a time where N is even, bias as a FloatView
    of D's type; offsets fit 32 bits (the spec caps each matrix's elements)."""
    return PairOutput(epilogue_operands(spec, config), CRead.POINTER, bias="FloatView<out_t>{bias}", index="unsigned",
                      cvt_pairs=arch_number(arch) >= 80)


def staged_write_back(spec: GemmSpec, config: MmaConfig) -> bool:
    """Whether D goes out through shared memory in 16-byte rows (else each thread stores its pairs
    straight from registers): where D's rows are whole 16-byte units (so every chunk store is aligned)
    and the padded output tile fits in the ring it reuses."""
    out = spec.out_element_bytes
    return spec.n * out % 16 == 0 and config.bm * (config.bn * out + _OUT_PAD[out]) <= config.smem_bytes()


# Bytes after each output row in shared memory: a warp's pair writes (rows g = 0..7, 4 or 8 bytes at
# column 2t) then land on 32 distinct banks (16-bit pairs) or, per half-warp, 16 (fp32 pairs).
_OUT_PAD = {2: 16, 4: 32}


def _staged_stores(spec: GemmSpec, config: MmaConfig, output: PairOutput, uses_async: bool) -> str:
    """The write-back through shared memory: every thread applies the epilogue to its pairs and writes
    them into a [BM][BN] tile of D's type (the ring's bytes, free once every warp is past the main
    loop), then the block copies the tile out in 16-byte row chunks, so each store instruction fills
    whole 32-byte sectors (the pairs' 4-byte stores fill half a sector each and leave the rest to
    another instruction)."""
    out = spec.out_element_bytes
    e = 16 // out
    c0 = c1 = None
    read_c = []
    if spec.epilogue.reads_c:
        read_c = ["float c0 = 0.0f, c1 = 0.0f;",
                  "if (row < M && col < N) read_pair(C + (unsigned)row * N + col, c0, c1);  // C's pair (N is even)"]
        c0, c1 = "c0", "c1"
    staged = staged_bias(spec, FRAGMENT, output)
    first, second = pair_epilogue(spec, output, _fragment(spec).values, (c0, c1), staged.elements)
    body = "\n".join("                " + line for line in read_c + [
        f"write_pair(tile + r * PITCH + c, {first}, {second});"])
    bias = "".join(f"    {line}\n" for line in staged.lines)
    return f"""    // Write-back through shared memory (16-byte row chunks). Thread (g, t) holds rows g and g + 8,
    // columns 2t and 2t + 1 of each 16x8 tile; the tile's rows are padded so those writes miss each other's banks.
    constexpr int PITCH = BN + {_OUT_PAD[out] // out};  // elements per output row in shared memory
    constexpr int E = {e}, CHUNKS = BN / E;  // elements per 16-byte chunk, chunks per row
    out_t* tile = reinterpret_cast<out_t*>(smem);
    {"cp_async_wait<0>();" if uses_async else ""}
    __syncthreads();  // every warp is done with the ring (and no copy is in flight): it holds D's tile now
{bias}    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {{
                const int r = wrow + i * 16 + g + h * 8, c = wcol + j * 8 + 2 * t;
                const int row = m0 + r, col = n0 + c;
                (void)row; (void)col;
{body}
            }}
    __syncthreads();
    #pragma unroll 4
    for (int idx = threadIdx.x; idx < BM * CHUNKS; idx += THREADS) {{
        const int r = idx / CHUNKS, c = (idx % CHUNKS) * E, row = m0 + r, col = n0 + c;
        // N is a multiple of E, so a chunk is wholly inside D or wholly past it.
        if (row < M && col < N)
            *reinterpret_cast<uint4*>(D + (unsigned)row * N + col) = *reinterpret_cast<const uint4*>(tile + r * PITCH + c);
    }}
"""


def _write_back(spec: GemmSpec, config: MmaConfig, arch: str, uses_async: bool) -> str:
    if staged_write_back(spec, config):
        return _staged_stores(spec, config, _output(spec, config, arch), uses_async)
    return pair_stores(spec, _fragment(spec), _output(spec, config, arch))


# --- the kernel ---------------------------------------------------------------------------------
FP8_SCALE_DECLS = {"scale_a": "const float* __restrict__ scale_a", "scale_b": "const float* __restrict__ scale_b"}


def _params(spec: GemmSpec) -> tuple[tuple[str, ...], str]:
    """Every operand as a plain pointer (or scalar); fp8 adds A's and B's float32 scales after B
    (laid out as gemmtune.fp8.gemm_inputs says)."""
    if not spec.fp8:
        return pointer_params(spec)
    names = ("A", "B", *FP8_SCALE_DECLS, *(op.name for op in spec.epilogue.operands()), "D")
    decls = {**POINTER_DECLS, **FP8_SCALE_DECLS}
    return names, ", ".join(decls[n] for n in names)


def _constants(spec: GemmSpec, config: MmaConfig, a: Operand, b: Operand) -> str:
    bk = config.bk(tensor_dtype(spec))
    return f"""constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};
constexpr int BM = {config.bm}, BN = {config.bn}, BK = {bk};  // block tile; BK = {config.k_bytes} bytes of K
constexpr int WM = {config.wm}, WN = {config.wn};  // one warp's tile of D
constexpr int WARPS_N = BN / WN, THREADS = {config.threads};
constexpr int MT = WM / 16, NT = WN / 8;  // 16x8 mma tiles per warp tile
constexpr int KSTEP = {KSTEP_BYTES // INPUT_BYTES[tensor_dtype(spec)]};  // K of one mma
constexpr int STAGES = {config.stages};  // shared-memory buffers in the ring
constexpr int A_TILE_BYTES = {a.tile_bytes}, B_TILE_BYTES = {b.tile_bytes};  // one slice of each operand in shared memory
constexpr int TILES_M = (M + BM - 1) / BM, TILES_N = (N + BN - 1) / BN, KTILES = (K + BK - 1) / BK;
constexpr int GROUP_M = {config.group_m};  // rasterization: blocks walk GROUP_M tile rows before moving right
constexpr int KSTEPS = BK / KSTEP;  // mma k-steps per slice
constexpr int MIN_BLOCKS = {config.blocks_per_sm};  // blocks per SM the registers are bounded for
""" + (f"""constexpr int K_BLOCKS = (K + {FP8_BLOCK} - 1) / {FP8_BLOCK};  // fp8 block scales: k-blocks of {FP8_BLOCK} along K
constexpr int SLICES_PER_BLOCK = {FP8_BLOCK} / BK;  // k-slices a k-block spans (slices never straddle one)
""" if block_scaled(spec) else "") + "".join(f"constexpr int {op.name}_LOADS = {register_loads(op, config.threads)}, {op.name}_WORDS = {register_words(op)};"
              f"  // {op.name}'s register-staged copy units per thread, 32-bit words each\n"
              for op in (a, b) if not op.use_async)


def _shared_storage(config: MmaConfig) -> str:
    """The block's dynamic shared memory as a struct: the ring's slots, each a slice of A then of B,
    in the layout MmaConfig.smem_bytes() allocates (checked here, so host and kernel cannot drift)."""
    return f"""
// The block's dynamic shared memory: STAGES ring slots, each one k-slice of A's tile and B's tile
// (a_offset / b_offset address inside them). The host allocates SMEM_BYTES, exactly the struct.
struct Slot {{
    unsigned char a[A_TILE_BYTES];
    unsigned char b[B_TILE_BYTES];
}};
struct SharedStorage {{
    Slot ring[STAGES];
}};
// Slot s starts s * SLOT_BYTES into the ring, its B tile A_TILE_BYTES further: the copies and
// fragment loads add these in 32-bit ints (indexing ring[s] makes the product a 64-bit one, and
// ptxas then schedules the addresses differently).
constexpr int SLOT_BYTES = (int)sizeof(Slot);
constexpr int SMEM_BYTES = {config.smem_bytes()};
// Checked by sizes: NVRTC 13.0 rejects the offset-of builtin in a static_assert. The byte arrays (multiples of 16
// bytes) pack without padding, so B's tile starts A_TILE_BYTES into its slot.
static_assert(sizeof(Slot) == sizeof(Slot::a) + sizeof(Slot::b), "B's tile right after A's");
static_assert(sizeof(SharedStorage) == SMEM_BYTES, "the shared storage is what the host allocates");
"""


def double_buffered(a: Operand, b: Operand) -> bool:
    """Two fragment sets (k-step ks+1 read while ks multiplies) where both operands come by ldmatrix;
    plain 32-bit fragment loads (MN-major tf32, the smem_mma step) need more address registers, and
    with two sets ptxas spills: those multiply each k-step right after loading it."""
    return a.use_ldmatrix and b.use_ldmatrix


def staged_in_registers(config: MmaConfig, a: Operand, b: Operand) -> bool:
    """Whether the register-copied operands' next slice stays in registers across the mma work (else
    each copy stores right after its loads): only where those registers fit beside the accumulators
    and both fragment sets (ptxas would spill otherwise)."""
    held = sum(register_loads(op, config.threads) * register_words(op) for op in (a, b) if not op.use_async)
    fragments = 2 * (config.wm // 16 * 4 + config.wn // 8 * 2)
    cap = min(255, 65536 // (config.threads * config.blocks_per_sm))
    return held > 0 and config.stages > 1 and double_buffered(a, b) and config.accumulators + fragments + held + 48 <= cap


def _stage_functions(config: MmaConfig, a: Operand, b: Operand) -> str:
    """issue_stage: slice kt's cp.async copies and the register operands' global loads; store_regs: those
    registers into the slice's buffer (after the mma work they were hidden behind). Where the registers
    do not fit (staged_in_registers), issue_stage stores right after loading and store_regs is empty."""
    staged = staged_in_registers(config, a, b)
    issue, store = [], []
    for op, x0 in ((a, "m0"), (b, "n0")):
        at = f"slots + s * SLOT_BYTES{' + A_TILE_BYTES' if op.name == 'B' else ''}"
        if op.use_async:
            issue.append(f"load_{op.lower}({at}, {op.name}, {x0}, kt * BK);")
        elif not staged:
            issue.append(f"copy_{op.lower}({at}, {op.name}, {x0}, kt * BK);")
        else:
            issue.append(f"fetch_{op.lower}({op.lower}_regs, {op.name}, {x0}, kt * BK);")
            store.append(f"store_{op.lower}({at}, {op.lower}_regs, {x0}, kt * BK);")
    regs = "" if not staged else "".join(f"    u32 {op.lower}_regs[{op.lower.upper()}_LOADS][{op.lower.upper()}_WORDS];  "
                   f"// {op.name}'s next slice in flight through registers\n" for op in (a, b) if not op.use_async)
    return (regs + "    auto issue_stage = [&](int s, int kt) {\n        " + "\n        ".join(issue) + "\n    };\n"
            + "    auto store_regs = [&](int s, int kt) {\n        " + ("\n        ".join(store) or "(void)s; (void)kt;")
            + "\n    };\n")


def _slice_body(config: MmaConfig, uses_async: bool, has_regs: bool, kt: str, parity: int, indent: str,
                hooks: tuple[str, str] = ("", "")) -> str:
    """One k-slice of the ring: KSTEPS k-steps, fragments of step ks+1 loaded before step ks's mma.
    `hooks`: statements at the slice's start and after its last mma (fp8 block scales: _block_hooks)."""
    commit = "cp_async_commit();" if uses_async else ""
    wait = "cp_async_wait<STAGES - 2>();  " if uses_async else ""
    early = config.stages == 2 and has_regs
    lines = f"""{{
    const int kt = {kt}, next = kt + STAGES - 1;
    #pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {{
        if (ks == 0) {{
            // Slice kt+STAGES-1 into the buffer of slice kt-1 (every warp left it before the last barrier).
            if (next < KTILES) issue_stage(RING_SLOT(next), next);
            {commit}{hooks[0]}
        }}
        if (ks == KSTEPS - 1) {{
            {"if (next < KTILES) store_regs(RING_SLOT(next), next);  // two buffers: store before the barrier" if early else ""}
            {wait}__syncthreads();  // slice kt+1 is in shared memory; every warp is done with slice kt's fragments
        }}
        // Fragments of the next k-step (slice kt+1's first after the last) while this one multiplies.
        const int fs = ks + 1 < KSTEPS ? RING_SLOT(kt) : RING_SLOT(kt + 1);
        load_fragments(a[(ks + {parity + 1}) & 1], b[(ks + {parity + 1}) & 1], fs, ((ks + 1) % KSTEPS) * KSTEP);
        multiply(a[(ks + {parity}) & 1], b[(ks + {parity}) & 1]);
    }}{hooks[1]}
    {"" if early or not has_regs else "if (next < KTILES) store_regs(RING_SLOT(next), next);  // registers -> the free buffer, after the mma work"}
}}"""
    return "\n".join(indent + line if line.strip() else "" for line in lines.splitlines())


def _main_loop(config: MmaConfig, uses_async: bool, has_regs: bool, double: bool,
               hooks: tuple[str, str] = ("", "")) -> str:
    commit = "cp_async_commit();" if uses_async else ""
    if config.stages == 1:
        wait = "cp_async_wait<0>();\n        " if uses_async else ""
        steps = ("""        load_fragments(a[0], b[0], 0, 0);
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if (ks + 1 < KSTEPS) load_fragments(a[(ks + 1) & 1], b[(ks + 1) & 1], 0, (ks + 1) * KSTEP);
            multiply(a[ks & 1], b[ks & 1]);
        }""" if double else """        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            load_fragments(a[0], b[0], 0, ks * KSTEP);
            multiply(a[0], b[0]);
        }""")
        return f"""    // One buffer: load a k-slice, wait for it, multiply it (fragments one k-step ahead), wait before overwriting it.
    for (int kt = 0; kt < KTILES; ++kt) {{
        issue_stage(0, kt);
        store_regs(0, kt);
        {commit}
        {wait}__syncthreads();{hooks[0]}
{steps}{hooks[1]}
        __syncthreads();
    }}
"""
    if not double:
        wait = "cp_async_wait<STAGES - 2>();  // slice kt has landed (this thread's copies)\n        " if uses_async else ""
        return f"""    // A ring of STAGES buffers: slices kt+1 .. kt+STAGES-1 are in flight while slice kt is multiplied.
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {{
        if (s < KTILES) issue_stage(s, s);  // slices 0 .. STAGES - 2 into slots 0 .. STAGES - 2
        {commit}
    }}
    for (int kt = 0; kt < KTILES; ++kt) {{
        {wait}__syncthreads();  // everyone's copies of slice kt are visible; slice kt-1's buffer is free
        const int next = kt + STAGES - 1;
        if (next < KTILES) issue_stage(RING_SLOT(next), next);
        {commit}{hooks[0]}
        #pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {{
            load_fragments(a[0], b[0], RING_SLOT(kt), ks * KSTEP);
            multiply(a[0], b[0]);
        }}{hooks[1]}
    }}
"""
    wait = "cp_async_wait<STAGES - 2>();  // slice 0 has landed (this thread's copies)\n    " if uses_async else ""
    if config.k_bytes // KSTEP_BYTES % 2 == 0:
        loop = "    for (int kt0 = 0; kt0 < KTILES; ++kt0)\n" + _slice_body(config, uses_async, has_regs, "kt0", 0, "    ", hooks)
    else:  # an odd number of k-steps per slice: two slices per trip keep the fragment sets compile-time
        loop = ("    for (int kt0 = 0; kt0 < KTILES; kt0 += 2) {\n"
                + _slice_body(config, uses_async, has_regs, "kt0", 0, "        ", hooks) + "\n        if (kt0 + 1 < KTILES)\n"
                + _slice_body(config, uses_async, has_regs, "kt0 + 1", 1, "        ", hooks) + "\n    }")
    return f"""    // A ring of STAGES buffers: slices kt+1 .. kt+STAGES-1 are in flight while slice kt is multiplied
    // (one commit group per slice, so wait_group STAGES-2 means slice kt+1 has landed), and the fragments
    // of each k-step are read from shared memory while the previous k-step's mma.sync run.
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {{
        if (s < KTILES) {{ issue_stage(s, s); store_regs(s, s); }}  // slice s into slot s
        {commit}
    }}
    {wait}__syncthreads();
    load_fragments(a[0], b[0], 0, 0);
{loop}
"""


def _multiply(spec: GemmSpec) -> str:
    """The warp tile's mma work for one k-step: one mma per 16x8 tile (into the k-block's raw sums
    where fp8 block scales are applied per k-block), or three for 3xtf32."""
    if not splits_fp32(spec):
        sums = "part" if block_scaled(spec) else "acc"
        return f"""    auto multiply = [&](const u32 (&a)[MT][4], const u32 (&b)[NT][2]) {{
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int j = 0; j < NT; ++j) mma_tile({sums}[i][j], a[i], b[j]);
    }};
"""
    return """    // 3xTF32: every fp32 fragment value x = big + small (both tf32), and each 16x8 tile takes
    // small·big + big·small + big·big (small·small, under 2^-22 of the product, is left out). The three
    // products of a k-step are summed in a fresh 4-register partial, which then joins the accumulator by
    // an fp32 add: the tensor core's own accumulation rounds toward zero, a bias that, applied to the
    // whole running sum every k-step, grew the error with K (17x SGEMM's at K=1024, 175x at 16384 on an
    // H100); applied to one k-step's partial it stays at fp32's level.
    auto multiply = [&](const u32 (&a)[MT][4], const u32 (&b)[NT][2]) {
        u32 a_big[MT][4], a_small[MT][4], b_big[NT][2], b_small[NT][2];
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int r = 0; r < 4; ++r) split_tf32(a[i][r], a_big[i][r], a_small[i][r]);
        #pragma unroll
        for (int j = 0; j < NT; ++j)
            #pragma unroll
            for (int r = 0; r < 2; ++r) split_tf32(b[j][r], b_big[j][r], b_small[j][r]);
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int j = 0; j < NT; ++j) {
                float part[4] = {0.f, 0.f, 0.f, 0.f};
                mma_tile(part, a_small[i], b_big[j]);
                mma_tile(part, a_big[i], b_small[j]);
                mma_tile(part, a_big[i], b_big[j]);
                #pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] += part[r];
            }
    };
"""


# --- fp8 scales -------------------------------------------------------------------------------------
def _scale_setup(spec: GemmSpec) -> str:
    """fp8 tensor scales, read after the main loop for the write-back, which multiplies each sum by them
    before the epilogue (_fragment; as gemmtune.fp8 defines D: the scaled product, then bias and activation)."""
    if spec.fp8 and spec.scaling == "tensor":
        return "    const float scale = scale_a[0] * scale_b[0];  // fp8: A's and B's one scale each\n"
    return ""


def _fragment(spec: GemmSpec) -> PairFragment:
    """FRAGMENT, its values times the fp8 tensor scale (_scale_setup) or the rowwise scales of the pair's
    row and columns, read where the write-back stores it (`row`, `col` in scope; rows and columns past the
    edge read the last scale: their outputs are not stored), where the spec has them."""
    if not spec.fp8 or block_scaled(spec):
        return FRAGMENT
    if spec.scaling == "tensor":
        values = tuple(f"{v} * scale" for v in FRAGMENT.values)
    else:
        values = tuple(f"{v} * (scale_a[min(row, M - 1)] * scale_b[min(col{' + 1' if e else ''}, N - 1)])"
                       for e, v in enumerate(FRAGMENT.values))
    return replace(FRAGMENT, values=values)


def _block_scales(spec: GemmSpec) -> str:
    """fp8 block scales (A: 1x128 along K a row, B: 128x128 blocks; gemmtune.fp8): two-level accumulation.
    The mma work of one k-block goes into `part`; at the block's end each 16x8 tile's raw sums join `acc`
    times scale_a[row, kb] · scale_b[column block, kb] and `part` restarts at zero. The scales are loaded at
    the block's first slice (in flight during its mma work) and multiplied at its end. A warp's columns lie
    in one 128-column block of B (its tile's width divides 128 and starts at a multiple of it)."""
    if not block_scaled(spec):
        return ""
    return """    // fp8 block scales: the current k-block's raw sums, and its scales (rows g, g + 8 of each 16-row block).
    float part[MT][NT][4] = {};
    float row_scale[MT][2], col_scale = 0.0f;
    const int scale_col_block = min(n0 + wcol, N - 1) / 128;  // the warp's one 128-column block of B
    auto load_scales = [&](int kb) {
        col_scale = scale_b[scale_col_block * K_BLOCKS + kb];
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int h = 0; h < 2; ++h)
                row_scale[i][h] = scale_a[(unsigned)min(m0 + wrow + i * 16 + g + h * 8, M - 1) * K_BLOCKS + kb];
    };
    auto promote = [&]() {  // acc += part * (scale_a[row, kb] * scale_b[column block, kb]); part = 0
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float scale = row_scale[i][h] * col_scale;
                #pragma unroll
                for (int j = 0; j < NT; ++j)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        acc[i][j][2 * h + e] = fmaf(part[i][j][2 * h + e], scale, acc[i][j][2 * h + e]);
                        part[i][j][2 * h + e] = 0.0f;
                    }
            }
    };
"""


def _block_hooks(spec: GemmSpec) -> tuple[str, str]:
    """The main loop's statements at a slice's start (a k-block's first slice: its scales) and after its
    last mma (a k-block's last slice, or K's: promote)."""
    if not block_scaled(spec):
        return "", ""
    return ("\n            if (kt % SLICES_PER_BLOCK == 0) load_scales(kt / SLICES_PER_BLOCK);  // this k-block's scales",
            "\n    if ((kt + 1) % SLICES_PER_BLOCK == 0 || kt + 1 == KTILES) promote();  // the k-block's sums, scaled, into acc")


def _kernel(spec: GemmSpec, config: MmaConfig, arch: str, a: Operand, b: Operand) -> str:
    uses_async = a.use_async or b.use_async
    has_regs = not (a.use_async and b.use_async)
    return f"""
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) {entry_name(spec)}({_params(spec)[1]}) {{
    extern __shared__ __align__(128) unsigned char smem[];
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);
    unsigned char* slots = reinterpret_cast<unsigned char*>(shared.ring);  // the ring's slots, as bytes
    // Grouped rasterization: block pid -> (tile_m, tile_n), GROUP_M tile rows at a time.
    const int pid = blockIdx.x, per_group = GROUP_M * TILES_N;
    const int first_m = (pid / per_group) * GROUP_M;
    const int rows_here = min(TILES_M - first_m, GROUP_M);
    const int tile_m = first_m + (pid % per_group) % rows_here, tile_n = (pid % per_group) / rows_here;
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;  // the mma fragments' row group and thread-in-group
    const int wrow = (warp / WARPS_N) * WM, wcol = (warp % WARPS_N) * WN;
    float acc[MT][NT][4] = {{}};
    u32 a[{2 if double_buffered(a, b) else 1}][MT][4], b[{2 if double_buffered(a, b) else 1}][NT][2];  // fragment sets: {"k-step ks multiplies set ks & 1 while the next loads" if double_buffered(a, b) else "one, loaded right before its mma"}

{_stage_functions(config, a, b)}    // Fragments of k-step kk of the slice in buffer s.
    auto load_fragments = [&](u32 (&a)[MT][4], u32 (&b)[NT][2], int s, int kk) {{
        const unsigned char* a_ptr = slots + s * SLOT_BYTES;
        const unsigned char* b_ptr = a_ptr + A_TILE_BYTES;
        const u32 a_base = smem_addr(a_ptr), b_base = smem_addr(b_ptr);
        (void)a_base; (void)b_base; (void)a_ptr; (void)b_ptr;
        {{
{_a_fragments(a)}{_b_fragments(b)}        }}
    }};
{_block_scales(spec)}{_multiply(spec)}    (void)g; (void)t;

{_main_loop(config, uses_async, has_regs, double_buffered(a, b), _block_hooks(spec))}
{_scale_setup(spec)}{_write_back(spec, config, arch, uses_async)}}}
"""


def _source_text(spec: GemmSpec, config: MmaConfig, arch: str) -> str:
    a, b = operands(spec, config, arch)
    uses_async = a.use_async or b.use_async
    header = (f"// gemmtune {NAME} v{VERSION}: {spec.short()} on {arch}\n// config: {config.describe()}\n"
              f"// A is stored {'K×M' if spec.a_trans else 'M×K'}, B {'N×K' if spec.b_trans else 'K×N'}, D M×N; all row-major.\n"
              f"// copies: A {a.copy_bytes} B{' cp.async' if a.use_async else ''}, "
              f"B {b.copy_bytes} B{' cp.async' if b.use_async else ''}"
              + "".join(f"; {op.name} transposed to K-major" for op in (a, b) if op.transposed) + "\n")
    types = (f"typedef {STORAGE_TYPES[spec.dtype]} in_t;  // A, B\n"
             f"typedef {STORAGE_TYPES[spec.out_dtype]} out_t;  // C, bias, D\n")
    return (header + HALF_FLOATS + FLOAT_VIEW + types + TO_OUT + (PACK_PAIR if arch_number(arch) >= 80 else "") + SMEM_ADDR
            + (LDMATRIX if a.use_ldmatrix or b.use_ldmatrix else "") + (CP_ASYNC if uses_async else "")
            + mma_helper(tensor_dtype(spec), arch_number(arch)) + (SPLIT_TF32 if splits_fp32(spec) else "") + LDS + pair_io(spec, _output(spec, config, arch))
            + "\n" + _constants(spec, config, a, b) + _shared_storage(config) + (SLICE_RING if config.stages > 1 else "") + "\n"
            + epilogue_function(spec.epilogue, epilogue_operands(spec, config), "c is C[row, col], loaded by the caller.",
                                out_dtype=spec.out_dtype)
            + _offset_function(a) + _offset_function(b)
            + _copy_function(spec, a, config.threads) + _copy_function(spec, b, config.threads) + _kernel(spec, config, arch, a, b))


def render(spec: GemmSpec, config: MmaConfig, arch: str = "sm_80") -> KernelSource:
    """Generate the kernel for `spec` with `config` on `arch`; ConfigError lists every broken constraint."""
    broken = rejections(config, spec, arch)
    if broken:
        raise ConfigError(f"config rejected for {spec.short()} on {arch}: " + "; ".join(broken.values()))
    grid = (_ceil_div(spec.m, config.bm) * _ceil_div(spec.n, config.bn), 1, 1)
    return KernelSource(code=_source_text(spec, config, arch), entry=entry_name(spec), grid=grid,
                        block=(config.threads, 1, 1), args=_params(spec)[0], spec=spec, family=NAME,
                        family_version=VERSION, config=config.to_json(), dynamic_smem=config.smem_bytes())
