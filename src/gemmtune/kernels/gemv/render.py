"""GEMV generator: GemvConfig + GemmSpec (M = 1 or N = 1) -> readable CUDA (KernelSource).

The big operand is called W (P outputs × K, stored either K-contiguous or P-contiguous) and the
vector x (K values). Every element of W is read exactly once, with 16-byte streaming loads that skip
L1 (ld.global.nc.L1::no_allocate): the kernel's job is to keep enough of them in flight to saturate
HBM. x is small and read by every block, so it goes through the caches.
"""
from __future__ import annotations

from ...errors import ConfigError
from ...kernel_source import KernelSource
from ...spec import GemmSpec
from ..config_base import ceil_div
from ..parts.epilogue import CArg, Operands, VectorArg, epilogue_call, epilogue_function, pointer_params
from ..parts.floats import FLOAT_VIEW, HALF_FLOATS, TO_OUT
from ..parts import cluster_barrier, dependent_launch
from . import columns_ring, columns_tensor_cores, tensor_cores
from .config import (NAME, PARTIAL_SUMS_BYTES, VERSION, GemvConfig, block_outputs, block_threads, outputs, quads,
                     rejections, ring_smem_bytes, ring_strip_bytes, stream_kind, streams_b, vec, vectors)

STORAGE_TYPES = {"fp32": "float", "tf32": "float", "bf16": "bf16_t", "fp16": "fp16_t"}


def entry_name(spec: GemmSpec) -> str:
    return f"{spec.slug()}_gemv"


PRELUDE = HALF_FLOATS + FLOAT_VIEW

# After the in_t/out_t typedefs: what reads operands.
LOADS = TO_OUT + r"""// 16 bytes of W that are used once: not kept in L1 (W is streamed; x and C stay cached).
__device__ __forceinline__ uint4 stream_load(const void* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
"""

# unpack(w, f): the VEC values of one 16-byte load as floats, first element first.
UNPACK = {
    "float": """__device__ __forceinline__ void unpack(uint4 w, float (&f)[4]) {
    f[0] = __uint_as_float(w.x); f[1] = __uint_as_float(w.y); f[2] = __uint_as_float(w.z); f[3] = __uint_as_float(w.w);
}
""",
    "bf16_t": """__device__ __forceinline__ void unpack(uint4 w, float (&f)[8]) {
    const u32 words[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {  // a word holds two bf16, the lower address in the low half
        f[2 * i] = __uint_as_float(words[i] << 16);
        f[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
}
""",
    "fp16_t": """__device__ __forceinline__ void unpack(uint4 w, float (&f)[8]) {
    const u32 words[4] = {w.x, w.y, w.z, w.w};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = to_float(fp16_t{(unsigned short)(words[i] & 0xFFFF)});
        f[2 * i + 1] = to_float(fp16_t{(unsigned short)(words[i] >> 16)});
    }
}
""",
}


# --- arguments and the epilogue ------------------------------------------------------------------
def _params(spec: GemmSpec) -> tuple[tuple[str, ...], str]:
    return pointer_params(spec)


# apply_epilogue takes C's element (loaded by the caller) and bias as a FloatView of D's type.
EPILOGUE_OPERANDS = Operands(CArg.VALUE, VectorArg.VIEW)


def _store(spec: GemmSpec, r: str, p: str, value: str) -> str:
    """D[r, p] = apply_epilogue(value) for output p of vector r (row r/col p when B is streamed,
    row p/col 0 when A is)."""
    row, col, at = (r, p, f"(size_t)({r}) * N + {p}") if streams_b(spec) else (p, "0", p)
    result = epilogue_call(spec.epilogue, EPILOGUE_OPERANDS, value, row, col, c=f"to_float(C[{at}])",
                           bias="FloatView<out_t>{bias}")
    return f"D[{at}] = to_out({result});"


def _header(spec: GemmSpec, config: GemvConfig) -> str:
    matrix, vector = ("B", "the rows of A") if streams_b(spec) else ("A", "B")
    storage = "K-contiguous" if stream_kind(spec) == "rows" else "output-contiguous"
    return (f"// gemmtune {NAME} v{VERSION}: {spec.short()}\n// config: {config.describe()}\n"
            f"// D = x·W with W = {matrix} ({storage}) and x = {vector}: each element of W is read once,\n"
            f"// so the limit is HBM bandwidth; the kernel keeps 16-byte loads of W in flight.\n"
            f"constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};\n"
            f"constexpr int P = {outputs(spec)};  // outputs per vector\n"
            f"constexpr int R = {vectors(spec)};  // vectors (rows of A) that meet each element of W\n"
            f"constexpr int VEC = {vec(spec)};  // elements of W per load (16 bytes when rows are aligned)\n")


def _types(spec: GemmSpec) -> str:
    return f"typedef {STORAGE_TYPES[spec.dtype]} in_t;  // A, B\ntypedef {STORAGE_TYPES[spec.out_dtype]} out_t;  // C, bias, D\n"


def _x_access(spec: GemmSpec, chunks: bool) -> str:
    """x_at(x, r, k): element k of vector r; x_chunk: VEC of them (16 bytes at once where contiguous)."""
    if not streams_b(spec):
        at, contiguous = "x[k]", True  # B is K×1 or 1×K: contiguous either way
    elif spec.a_trans:
        at, contiguous = "x[(size_t)k * M + r]", spec.m == 1  # A stored K×M
    else:
        at, contiguous = "x[(size_t)r * K + k]", True
    chunk = ("    unpack(*reinterpret_cast<const uint4*>(&x_at_ref(x, r, k)), f);  // 16 bytes, through the caches"
             if contiguous and vec(spec) > 1 else
             "    #pragma unroll\n    for (int i = 0; i < VEC; ++i) f[i] = to_float(x_at_ref(x, r, k + i));")
    chunk_function = f"""__device__ __forceinline__ void x_chunk(const in_t* __restrict__ x, int r, int k, float (&f)[VEC]) {{
{chunk}
}}
""" if chunks else ""
    return f"""// The vectors: x_at(x, r, k) is element k of vector r; x_chunk reads VEC of them from k on.
__device__ __forceinline__ const in_t& x_at_ref(const in_t* __restrict__ x, int r, int k) {{ return {at}; }}
__device__ __forceinline__ float x_at(const in_t* __restrict__ x, int r, int k) {{ return to_float(x_at_ref(x, r, k)); }}
{chunk_function}"""


def _operands(spec: GemmSpec) -> str:
    matrix, vector = ("B", "A") if streams_b(spec) else ("A", "B")
    return (f"    const in_t* __restrict__ W = {matrix};  // streamed once\n"
            f"    const in_t* __restrict__ x = {vector};  // small: read through the caches\n")


# Bytes of W a block asks L2 for before it waits for the kernel ahead (parts/dependent_launch.py).
# H100, 2026-11-26 (git show 5f4c93d:bench/probes/gemv_dependent_launch.py, budgets 4-32 KB): the tensor-core kernel's
# blocks (16 rows, all resident at once) streamed best near 16-32 KB and 32 KB cost 4% launched alone;
# the CUDA-core rows kernel's (a few rows, several waves) best at 4-8 KB and worse from 16 KB. The
# columns kernel's budget is the rows kernel's, not yet measured for it (its first step is the first
# rows of the block's strip of outputs: 256 rows of 128 bytes at 16x4096x4096 fp32).
PREFETCH_BYTES = {"tensor_cores": 16384, "cuda_cores": 8192, "columns": 8192, "columns_split": 12288,
                  "columns_ring": 32768}
# columns_ring: the TMA-fed columns kernel asks L2 for whole stages of its strip of W, as many as fit (at least
# one). H100, 2026-11-27, 16x4096x4096 fp32 (git show 5f4c93d:bench/probes/gemv_columns_tma.py): two stages of 16 KB.
# columns_split: the columns kernel with K split over a cluster (k_splits), whose first step is the first
# rows of its split's share. H100, 2026-11-27, 1x1024x4096 fp32 nn in 256-thread blocks 8 across, 16
# splits, back to back (git show 982ee83:bench/results/2026-11-27-h100-gemv-cluster-k-splits-early.md): 8 KB 7.1-7.2 µs,
# 12 KB 6.9, 16-20 KB 7.0-7.1, the whole 32 KB share 8.1.
# One vector on the CUDA-core rows kernel with W of ONE_VECTOR_LARGE_W_BYTES or more: half the budget. H100,
# 2026-11-27, in the one-vector block shape (chooser ONE_VECTOR_ROWS_CONFIG), back to back
# (git show 982ee83:bench/results/2026-11-27-h100-gemv-prefetch-budget.md): 4 KB against 8 KB streamed 1x4096x4096 bf16
# 11.2 -> 10.3 µs, tf32 21.9 -> 20.7, 1x4096x11008 and 1x4096x14336 2-3% faster, 1x11008x4096 and
# 1x32000x4096 level; but 1x1024x4096 (8-16 MB) 3-7% slower and 1x2048x4096 tf32 5% slower.
ONE_VECTOR_LARGE_W_BYTES = 32 << 20
ONE_VECTOR_LARGE_W_PREFETCH = 4096


def prefetch_budget(spec: GemmSpec, kernel: str) -> int:
    """Bytes of W a block asks L2 for in its prologue (PREFETCH_BYTES, ONE_VECTOR_LARGE_W_PREFETCH)."""
    large = outputs(spec) * spec.k * spec.element_bytes >= ONE_VECTOR_LARGE_W_BYTES
    if kernel == "cuda_cores" and stream_kind(spec) == "rows" and vectors(spec) == 1 and large:
        return ONE_VECTOR_LARGE_W_PREFETCH
    return PREFETCH_BYTES[kernel]


# The CUDA-core columns kernel starts early only for one vector and at least this many outputs. H100,
# 2026-11-26, fp32 nn, streamed, back to back with and without the prologue (bench/results/
# `git show a5c16f7:bench/results/2026-11-26-h100-gemv-columns-dependent-launch.md`): one vector and 4096-32000 outputs 92 -> 95%,
# 97 -> 98%, 94 -> 95%, 93 -> 94%, 101 -> 100% of copy; but 1x1024x4096 61 -> 48%, and 2 and 8 vectors
# 87 -> 82% and 84 -> 78% (the same with no prefetch: the early start itself costs there); 16 vectors
# within a point (77 -> 78%, 87 -> 86%).
COLUMNS_EARLY_MIN_OUTPUTS = 4096


def depends_on_launch(spec: GemmSpec, arch: str, config: GemvConfig) -> bool:
    """Whether the kernel starts with the dependent-launch prologue (parts/dependent_launch.py): on
    sm_90 and later for the rows kernels; the columns kernel on CUDA cores only for one vector and
    COLUMNS_EARLY_MIN_OUTPUTS outputs or more, or with K split over a cluster (k_splits: without the
    prologue 1x1024x4096 fp32 streamed at 62% of copy, with it 78-80%, H100 2026-11-27), on tensor cores
    never (its warps start at spans far apart along K, so its first bytes are no single run to prefetch)."""
    if not dependent_launch.supported(arch):
        return False
    if stream_kind(spec) == "columns":
        if config.k_splits > 1 or config.ring_stages:  # (both are sm_90+ only)
            return True
        return (not config.tensor_cores and vectors(spec) == 1
                and outputs(spec) >= COLUMNS_EARLY_MIN_OUTPUTS)
    return True


def _columns_start(spec: GemmSpec, budget: int, config: GemvConfig) -> str:
    """The columns kernel's prologue: its block streams a strip of COLS outputs down all of K (with
    k_splits, down its split's share of K), and its first step reads the first FIRST_ROWS rows of that;
    it asks L2 for as many of those as fit `budget` bytes."""
    split = config.k_splits > 1
    split_first = "    const int block_k = blockIdx.y * K_SHARE;  // the first row of W it reads (its split's)\n"
    rows = ("    const int block_first = blockIdx.x * COLS;  // the block's first output (column of W)\n"
            + (split_first if split else "") +
            f"    const size_t strip_bytes = (size_t)min(COLS, P - block_first) * sizeof(in_t);  // of each row\n"
            f"    const size_t strip_lines = (strip_bytes + 127) / 128 * 128;  // what L2 fetches of each row\n"
            f"    const int prefetch_rows = (int)min((size_t)min(FIRST_ROWS, {'K - block_k' if split else 'K'}), "
            f"max((size_t)1, (size_t){budget} / strip_lines));\n")
    begin = "W + (size_t)block_k * P + block_first" if split else "W + block_first"
    return _operands(spec) + rows + dependent_launch.prologue(
        begin, "prefetch_rows", "(size_t)P * sizeof(in_t)", "strip_bytes", budget)


def _start(spec: GemmSpec, arch: str, kernel: str, config: GemvConfig) -> str:
    """The kernel's first statements: its operands, then (where it applies) the dependent-launch
    prologue, which prefetches the first FIRST_K values of each of the block's rows of W (GROUPS
    groups of NW outputs; what its first step loads), at most prefetch_budget() bytes in all; the
    columns kernel the first rows of its strip (_columns_start)."""
    if not depends_on_launch(spec, arch, config):
        return _operands(spec)
    if stream_kind(spec) == "columns":
        return _columns_start(spec, prefetch_budget(spec, kernel), config)
    rows = ("    const int block_first = blockIdx.x * GROUPS * NW;  // the block's first output (row of W)\n"
            "    const int block_rows = min(block_first + GROUPS * NW, P) - block_first;\n")
    return _operands(spec) + rows + dependent_launch.prologue(
        "W + (size_t)block_first * K", "block_rows", "(size_t)K * sizeof(in_t)",
        "(size_t)min(K, FIRST_K) * sizeof(in_t)", prefetch_budget(spec, kernel))


# --- the rows kernel: W is P rows of K contiguous values --------------------------------------------
# rows: the lanes' sums of each output meet by a shuffle tree, the warps of a group in shared memory.
ROWS_REDUCE = """    #pragma unroll
    for (int j = 0; j < NW; ++j)
        #pragma unroll
        for (int r = 0; r < R; ++r)
            #pragma unroll
            for (int offset = 16; offset > 0; offset /= 2)
                acc[j][r] += __shfl_xor_sync(0xFFFFFFFFu, acc[j][r], offset);
    if (WPO > 1) {  // the warps of one group meet in shared memory
        __shared__ float partial[THREADS / 32][NW][R];
        if (lane == 0)
            #pragma unroll
            for (int j = 0; j < NW; ++j)
                #pragma unroll
                for (int r = 0; r < R; ++r) partial[warp][j][r] = acc[j][r];
        __syncthreads();
        if (part != 0 || lane != 0 || p0 >= P) return;
        #pragma unroll
        for (int w = 1; w < WPO; ++w)
            #pragma unroll
            for (int j = 0; j < NW; ++j)
                #pragma unroll
                for (int r = 0; r < R; ++r) acc[j][r] += partial[warp + w][j][r];
    }
"""


def _rows_body(spec: GemmSpec, config: GemvConfig, arch: str) -> str:
    v = vec(spec)
    main = """        int k = (part * 32 + lane) * VEC;
        for (; k + (UNROLL - 1) * STEP < K_VEC; k += UNROLL * STEP) {
            uint4 w[UNROLL][NW];  // all loads first, so UNROLL·NW of them are in flight at once
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                #pragma unroll
                for (int j = 0; j < NW; ++j) w[u][j] = row_load(p0 + j, k + u * STEP);
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) multiply(w[u], k + u * STEP);
        }
        for (; k < K_VEC; k += STEP) {
            uint4 w[NW];
            #pragma unroll
            for (int j = 0; j < NW; ++j) w[j] = row_load(p0 + j, k);
            multiply(w, k);
        }
""" if v > 1 else ""
    lambdas = """        // Row j of the group, 16 bytes from k (zeros past the last output).
        auto row_load = [&](int p, int k) {
            return p < P ? stream_load(W + (size_t)p * K + k) : make_uint4(0u, 0u, 0u, 0u);
        };
        // acc[j][r] += W[p0 + j, k .. k+VEC) · x_r[k .. k+VEC): each vector chunk serves NW rows of W.
        auto multiply = [&](const uint4 (&w)[NW], int k) {
            float wf[NW][VEC];
            #pragma unroll
            for (int j = 0; j < NW; ++j) unpack(w[j], wf[j]);
            #pragma unroll
            for (int r = 0; r < R; ++r) {
                float f[VEC];
                x_chunk(x, r, k, f);
                #pragma unroll
                for (int j = 0; j < NW; ++j)
                    #pragma unroll
                    for (int i = 0; i < VEC; ++i) acc[j][r] = fmaf(wf[j][i], f[i], acc[j][r]);
            }
        };
""" if v > 1 else ""
    return f"""constexpr int THREADS = {config.threads}, UNROLL = {config.unroll};
constexpr int WPO = {config.warps_per_output};  // warps sharing one group's K
constexpr int NW = {config.outputs_per_warp};  // outputs of one group (a warp computes them together)
constexpr int GROUPS = THREADS / 32 / WPO;  // groups per block
constexpr int STEP = 32 * WPO * VEC;  // K covered by one load of every lane of a group
constexpr int FIRST_K = UNROLL * STEP;  // K a group reads in its first step
constexpr int K_VEC = VEC > 1 ? K - K % VEC : 0;  // K handled by 16-byte loads; the rest one value at a time

// rows: the WPO warps of a group reduce NW rows of W against the R vectors; lanes stride along K with
// 16-byte loads, then a shuffle tree (and shared memory across warps) sums the lanes.
extern "C" __global__ void __launch_bounds__(THREADS) {entry_name(spec)}({_params(spec)[1]}) {{
{_start(spec, arch, "cuda_cores", config)}    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = warp / WPO, part = warp % WPO;  // part: which interleaved share of K
    const int p0 = (blockIdx.x * GROUPS + group) * NW;  // first output of the group
    float acc[NW][R] = {{}};
    if (p0 < P) {{
{lambdas}{main}        for (int t = K_VEC + part * 32 + lane; t < K; t += 32 * WPO)  // scalar tail
            #pragma unroll
            for (int j = 0; j < NW; ++j) {{
                const float w = p0 + j < P ? to_float(W[(size_t)(p0 + j) * K + t]) : 0.0f;
                #pragma unroll
                for (int r = 0; r < R; ++r) acc[j][r] = fmaf(w, x_at(x, r, t), acc[j][r]);
            }}
    }}
{ROWS_REDUCE}    if (lane != 0) return;
    #pragma unroll
    for (int j = 0; j < NW; ++j) {{
        const int p = p0 + j;
        if (p < P)
            #pragma unroll
            for (int r = 0; r < R; ++r) {_store(spec, "r", "p", "acc[j][r]")}
    }}
}}
"""


# --- the columns kernel: W is K rows of P contiguous values -----------------------------------------
def _columns_body(spec: GemmSpec, config: GemvConfig, arch: str) -> str:
    v = vec(spec)
    if quads(spec):
        walk = """            uint4 w[UNROLL][4];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                #pragma unroll
                for (int q = 0; q < 4; ++q) w[u][q] = stream_load(W + (size_t)(k + u * TK4 + q) * P + p0);
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) add_quad(w[u], k + u * TK4);"""
        tail = """            uint4 w[4];
            #pragma unroll
            for (int q = 0; q < 4; ++q) w[q] = stream_load(W + (size_t)(k + q) * P + p0);
            add_quad(w, k);"""
        add_row = """        // acc[r][i] += Σ_q x_r[k + q] · W[k + q, p0 + i]: four rows of W, and each vector's four values
        // at those k in one 16-byte load (through L1: every thread of the block reads the same x).
        auto add_quad = [&](const uint4 (&w)[4], int k) {
            float f[4][VEC];
            #pragma unroll
            for (int q = 0; q < 4; ++q) unpack(w[q], f[q]);
            #pragma unroll
            for (int r = 0; r < R; ++r) {
                const float4 xq = __ldg(reinterpret_cast<const float4*>(&x_at_ref(x, r, k)));
                #pragma unroll
                for (int i = 0; i < VEC; ++i)
                    acc[r][i] = fmaf(xq.w, f[3][i], fmaf(xq.z, f[2][i], fmaf(xq.y, f[1][i], fmaf(xq.x, f[0][i], acc[r][i]))));
            }
        };
"""
        return _columns_kernel(spec, config, arch, add_row, walk, tail, quad=True)
    if v > 1:  # P % VEC == 0: a thread's VEC outputs are all inside or all outside
        walk = """            uint4 w[UNROLL];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) w[u] = stream_load(W + (size_t)(k + u * TK) * P + p0);
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) add_row(w[u], k + u * TK);"""
        tail = "            add_row(stream_load(W + (size_t)k * P + p0), k);"
        add_row = """        // acc[r][i] += x_r[k] · W[k, p0 + i]: one 16-byte row piece of W serves all R vectors.
        auto add_row = [&](uint4 w, int k) {
            float f[VEC];
            unpack(w, f);
            #pragma unroll
            for (int r = 0; r < R; ++r) {
                const float xk = x_at(x, r, k);
                #pragma unroll
                for (int i = 0; i < VEC; ++i) acc[r][i] = fmaf(xk, f[i], acc[r][i]);
            }
        };
"""
    else:
        walk = """            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) add_one(W[(size_t)(k + u * TK) * P + p0], k + u * TK);"""
        tail = "            add_one(W[(size_t)k * P + p0], k);"
        add_row = """        auto add_one = [&](in_t w, int k) {
            #pragma unroll
            for (int r = 0; r < R; ++r) acc[r][0] = fmaf(x_at(x, r, k), to_float(w), acc[r][0]);
        };
"""
    return _columns_kernel(spec, config, arch, add_row, walk, tail)


def _columns_kernel(spec: GemmSpec, config: GemvConfig, arch: str, add_row: str, walk: str, tail: str,
                    quad: bool = False) -> str:
    """The columns kernel around its per-row (or per-quad) step: `add_row` defines it, `walk` is the
    unrolled main loop's body, `tail` one step past it."""
    step, first, note = (("TK4", "4 * tk", "sums rows k = 4tk .. 4tk + 3, then the next quad 4·TK on, ...")
                         if quad else ("TK", "tk", "sums rows k = tk, tk + TK, ..."))
    quad_step = "constexpr int TK4 = 4 * TK;  // k one quad step of the block covers\n" if quad else ""
    first_rows = (f"constexpr int FIRST_ROWS = UNROLL * {step};  // rows of W the block's first step reads (0 ..)\n"
                  if depends_on_launch(spec, arch, config) else "")
    store = _store(spec, "r", "p", "sum")
    split = config.k_splits > 1
    k_first, k_end = ("k_lo + ", "k_end") if split else ("", "K")
    keep = ("cluster_store(&split_sums[blockIdx.y][r][c], sum);  // this split's sum, into the cluster's first block"
            if split else store)
    return f"""constexpr int THREADS = {config.threads}, UNROLL = {config.unroll};
constexpr int TX = {config.threads_x}, TK = THREADS / TX;  // threads across outputs × threads along K
constexpr int COLS = TX * VEC;  // outputs per block
constexpr int WARPS = THREADS / 32;
// Vectors whose warp sums share the buffer at once: as many as fit 16 KB (one at least).
constexpr int GROUP_FIT = {PARTIAL_SUMS_BYTES} / (WARPS * COLS * 4);
constexpr int GROUP = GROUP_FIT < 1 ? 1 : GROUP_FIT > R ? R : GROUP_FIT;
{quad_step}{first_rows}{_split_declarations(config) if split else ""}
// columns: thread (tx, tk) owns VEC neighbouring outputs and {note} of W;
// a warp reads 32/TX rows, TX·16 contiguous bytes each. The TK partial sums meet at the end (below).
extern "C" __global__ void __launch_bounds__(THREADS){" __cluster_dims__(1, SPLITS, 1)" if split else ""} {entry_name(spec)}({_params(spec)[1]}) {{
{_start(spec, arch, "columns_split" if split else "columns", config)}    __shared__ float partial[WARPS][GROUP][COLS];
    const int tx = threadIdx.x % TX, tk = threadIdx.x / TX;
    const int p0 = blockIdx.x * COLS + tx * VEC;
    float acc[R][VEC] = {{}};{SPLIT_RANGE if split else ""}
    if (p0 < P) {{
{add_row}        int k = {k_first}{first};
        for (; k + (UNROLL - 1) * {step} < {k_end}; k += UNROLL * {step}) {{
{walk}
        }}
        for (; k < {k_end}; k += {step}) {{
{tail}
        }}
    }}
    // The block's TK partial sums of each output meet in two stages: the 32/TX K-shares inside a warp
    // by shuffles (lanes tx, tx + TX, ... hold the same outputs), then the warps' sums in shared
    // memory, GROUP vectors a pass, two barriers a pass (a tree per vector took ~2·log2(TK) each).
    #pragma unroll
    for (int r = 0; r < R; ++r)
        #pragma unroll
        for (int i = 0; i < VEC; ++i)
            #pragma unroll
            for (int lanes = TX; lanes < 32; lanes *= 2) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], lanes);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;{SPLIT_ONE_PASS if split else ""}
    #pragma unroll
    for (int r0 = 0; r0 < R; r0 += GROUP) {{
        if (lane < TX) {{
            #pragma unroll
            for (int g = 0; g < GROUP; ++g)
                #pragma unroll
                for (int i = 0; i < VEC; ++i)
                    if (r0 + g < R) partial[warp][g][tx * VEC + i] = acc[r0 + g < R ? r0 + g : 0][i];
        }}
        __syncthreads();{CLUSTER_STARTED if split else ""}
        for (int idx = threadIdx.x; idx < GROUP * COLS; idx += THREADS) {{
            const int g = idx / COLS, c = idx % COLS, r = r0 + g, p = blockIdx.x * COLS + c;
            if (r < R && p < P) {{
                float sum = 0.0f;
                #pragma unroll 8
                for (int w = 0; w < WARPS; ++w) sum += partial[w][g][c];  // warp order: deterministic
                {keep}
            }}
        }}{"" if split else PASS_END}
    }}{_split_finish(store) if split else ""}
}}
"""


# k_splits: a block may write into the first block's shared memory only once every block of the cluster
# runs (each says so at its start, SPLIT_RANGE, and waits here, long after, before its sums go there).
# The wait is the part's non-aligned form (cluster_barrier.py), and no block barrier follows it: a thread
# leaves that wait on its own, so a warp may come out of it split, and the compiler's reconvergence points
# (BSSY/BSYNC) after it only regather threads that reached them together. An aligned __syncthreads() there
# then met a split warp: synccheck's "Divergent thread(s) in warp" at the BAR.SYNC after UCGABAR_WAIT
# (issue 66; ptxas removes a __syncwarp() placed between them). So the wait comes after the pass's only
# block barrier, and a split kernel sums all its vectors in one pass (config.py's _k_splits).
CLUSTER_STARTED = """
        cluster_wait();  // every block of the cluster is running (after the block barrier: see render.py)"""

PASS_END = """
        __syncthreads();  // the buffer is reused by the next pass"""

SPLIT_ONE_PASS = """
    static_assert(GROUP == R, "a K split sums all its vectors in one pass: no block barrier after its cluster wait");"""

# A split's contiguous share of K, in whole quads (4 values) so the quads walk keeps its alignment.
SPLIT_RANGE = """
    const int k_lo = blockIdx.y * K_SHARE, k_end = min(K, k_lo + K_SHARE);  // this block's share of K
    __shared__ float split_sums[SPLITS][R][COLS];  // the first block's: every split's sums of the strip
    cluster_arrive_relaxed();  // this block runs (CLUSTER_STARTED)"""


def _split_declarations(config: GemvConfig) -> str:
    """k_splits: each split's share of K; the splits of a strip are one cluster, and their sums meet in the
    shared memory of its first block (distributed shared memory: no global memory, nothing kept between launches)."""
    barriers = cluster_barrier.ARRIVE_AND_WAIT + cluster_barrier.SYNC
    return f"""
constexpr int SPLITS = {config.k_splits};  // blocks sharing each strip of outputs (one cluster), each a share of K
constexpr int K_SHARE = ((K + SPLITS - 1) / SPLITS + 3) / 4 * 4;
{barriers}
// Store one float into the same place of the cluster's first block's shared memory (mapa: its address there).
__device__ __forceinline__ void cluster_store(float* local, float value) {{
    const unsigned int here = static_cast<unsigned int>(__cvta_generic_to_shared(local));
    asm volatile("{{\\n .reg .u32 there;\\n mapa.shared::cluster.u32 there, %0, 0;\\n st.shared::cluster.f32 [there], %1;\\n}}"
                 :: "r"(here), "f"(value) : "memory");
}}"""


def _split_finish(store: str) -> str:
    """k_splits: the cluster meets (every split's sums are in its first block); that block sums them in split
    order and writes D."""
    return f"""
    // Every block's stores into the first block's shared memory are done and visible to it past this barrier;
    // the other blocks may then end (the first block reads only its own shared memory).
    cluster_sync();
    if (blockIdx.y != 0) return;
    for (int idx = threadIdx.x; idx < R * COLS; idx += THREADS) {{
        const int r = idx / COLS, c = idx % COLS, p = blockIdx.x * COLS + c;
        if (p < P) {{
            float sum = 0.0f;
            #pragma unroll
            for (int z = 0; z < SPLITS; ++z) sum += split_sums[z][r][c];  // split order: deterministic
            {store}
        }}
    }}"""


def _tensor_core_code(spec: GemmSpec, config: GemvConfig, arch: str) -> str:
    """The rows (tensor_cores.py) or columns (columns_tensor_cores.py) kernel on tensor cores: no
    unpacking, A read 16 bytes at a time."""
    kernel = tensor_cores if stream_kind(spec) == "rows" else columns_tensor_cores
    epilogue = epilogue_function(spec.epilogue, EPILOGUE_OPERANDS, out_dtype=spec.out_dtype)
    body = kernel.body(spec, config, entry_name(spec), _params(spec)[1], _start(spec, arch, "tensor_cores", config))
    return (_header(spec, config) + PRELUDE + _types(spec) + LOADS + _launch_helpers(spec, arch, config)
            + kernel.helpers(spec, arch) + "\n" + (epilogue + "\n" if epilogue else "") + body)


def _ring_code(spec: GemmSpec, config: GemvConfig, arch: str) -> str:
    """The columns kernel fed by TMA through a ring of shared-memory stages (columns_ring.py)."""
    epilogue = epilogue_function(spec.epilogue, EPILOGUE_OPERANDS, out_dtype=spec.out_dtype)
    prefetch_stages = max(1, prefetch_budget(spec, "columns_ring") // ring_strip_bytes(config))
    body = columns_ring.body(spec, config, entry_name(spec), _params(spec)[1], _store(spec, "r", "p", "sum"),
                             prefetch_stages)
    return (_header(spec, config) + PRELUDE + _types(spec) + TO_OUT + dependent_launch.HELPERS
            + columns_ring.helpers() + "\n" + (epilogue + "\n" if epilogue else "") + body)


def _launch_helpers(spec: GemmSpec, arch: str, config: GemvConfig) -> str:
    return dependent_launch.HELPERS if depends_on_launch(spec, arch, config) else ""


def _cuda_core_code(spec: GemmSpec, config: GemvConfig, arch: str) -> str:
    rows = stream_kind(spec) == "rows"
    body = _rows_body(spec, config, arch) if rows else _columns_body(spec, config, arch)
    unpack = UNPACK[STORAGE_TYPES[spec.dtype]] if vec(spec) > 1 else ""
    epilogue = epilogue_function(spec.epilogue, EPILOGUE_OPERANDS, out_dtype=spec.out_dtype)
    return (_header(spec, config) + PRELUDE + _types(spec) + LOADS + _launch_helpers(spec, arch, config) + unpack
            + _x_access(spec, rows) + "\n" + (epilogue + "\n" if epilogue else "") + body)


def render(spec: GemmSpec, config: GemvConfig, arch: str = "sm_90") -> KernelSource:
    broken = rejections(config, spec, arch)
    if broken:
        raise ConfigError(f"config rejected for {spec.short()} on {arch}: " + "; ".join(broken.values()))
    if config.ring_stages:  # TMA reads W and x: their tensor maps follow the pointers
        code, maps = _ring_code(spec, config, arch), columns_ring.tensor_maps(spec, config)
        smem = ring_smem_bytes(config, spec)
    else:
        code = _tensor_core_code(spec, config, arch) if config.tensor_cores else _cuda_core_code(spec, config, arch)
        maps, smem = (), 0
    grid = (ceil_div(outputs(spec), block_outputs(config, spec)), config.k_splits, 1)
    return KernelSource(code=code, entry=entry_name(spec), grid=grid, block=(block_threads(config), 1, 1),
                        args=(*_params(spec)[0], *(m.name for m in maps)), spec=spec, family=NAME,
                        family_version=VERSION, config=config.to_json(), dynamic_smem=smem, tensor_maps=maps,
                        dependent_launch=depends_on_launch(spec, arch, config), cluster_blocks=config.k_splits)
