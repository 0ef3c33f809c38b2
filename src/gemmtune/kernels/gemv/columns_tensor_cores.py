"""The gemv family's tensor-core columns kernel: 2-16 rows of fp32 or tf32 A (stored M×K) against B
stored K×N (layout nn: the outputs contiguous), fp32 as 3xtf32.

At 16 rows the CUDA-core columns kernel spends 16 FMAs and a load of each vector's value on every
weight it streams, and stops near 78% of copy bandwidth on an H100 (bench/results/
2026-11-26-h100-gemv-columns-quads-2.md). Here the vectors are the A operand of mma.sync m16n8k8
(tf32: 16 rows, zero-padded past R, read as the rows kernel on tensor cores reads them) and W = B
is its B operand: a lane's load of W holds one value of each of the warp's TILES 8-output tiles, so
no value moves between lanes. fp32 runs each product as three (big·big + big·small + small·big, the
split of parts/tf32_split.py): fp32 accuracy. A chunk holding a value too small to split is summed
on CUDA cores instead (rare: values below 2^-103). On an H100 this made tf32 at 8-16 vectors stream
88-89% of copy; fp32, with three times the mma, was no faster back to back than the CUDA-core kernel
(git show 982ee83:bench/results/2026-11-26-h100-gemv-columns-tensor-cores.md).
"""
from __future__ import annotations

from ...spec import GemmSpec
from ..config_base import arch_number
from ..mma.ptx import mma_helper
from ..parts.floats import PACK_PAIR
from ..parts.tf32_split import TF32_PARTS
from ..parts.writeback import PairFragment, pair_io, pair_stores
from .config import GemvConfig, a_fragment_rows
from .tensor_cores import GROUP_SETUP, OUTPUT, PERMUTATION_TF32, VECTOR_LOAD, VECTOR_ROWS, constants, reduce_partials


def fragment(tiles: int) -> PairFragment:
    """Thread (g, t)'s pairs: column c of tile q is output n0 + TILES·c + q, and the thread holds
    columns 2t and 2t + 1 of each tile for vectors g (and g + 8): with one tile a pair of one tile,
    with more, tiles q and q + 1 at one column."""
    if tiles == 1:
        return PairFragment(loops=(("h", "A_ROWS"),), row="g + 8 * h", col="n0 + 2 * t",
                            values=("acc[0][2 * h]", "acc[0][2 * h + 1]"), row_depth=1,
                            note="Thread (g, t) holds vectors g (and g + 8) of outputs n0 + 2t and + 1.")
    return PairFragment(
        loops=(("h", "A_ROWS"), ("e", "2"), ("q", "TILES / 2")), row="g + 8 * h",
        col="n0 + TILES * (2 * t + e) + 2 * q", values=("acc[2 * q][2 * h + e]", "acc[2 * q + 1][2 * h + e]"),
        row_depth=1,
        note="Thread (g, t) holds vectors g (and g + 8) of outputs n0 + TILES·(2t + e) + q: tiles q and q + 1 are a pair.")


W_LOAD = """// TILES neighbouring outputs of one row of W, used once: not kept in L1 (4, 8 or 16 bytes, aligned:
// N and the group's first output are multiples of TILES).
__device__ __forceinline__ void w_load(const in_t* p, u32 (&w)[TILES]) {
    if constexpr (TILES == 4) {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    } else if constexpr (TILES == 2) {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
        asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
}
"""

PERMUTATION_W = """// W's side of the same permutation: lane (g, t) loads rows k0 + 4t .. k0 + 4t + 3 of W at the TILES
// neighbouring outputs n0 + TILES·g .. (one load per row: value q of each is tile q's), so for tile q
//     B register 0 (mma k t,     column g) <- W[k0 + 4t + 2s][n0 + TILES·g + q]      (row 2s of the lane)
//     B register 1 (mma k t + 4, column g) <- W[k0 + 4t + 2s + 1][n0 + TILES·g + q]  (row 2s + 1)
// the same stored k as A's registers, and column c of tile q is output n0 + TILES·c + q.
"""

# 3xtf32's three products of one tile, small terms first (they are the smallest: summed before the
# big product, less of them is lost to rounding). Each chunk's 16 k are summed on the tensor cores
# from zero and added to the fp32 sums with an FADD, as the wgmma family sums each k-block: the
# tensor cores' own accumulation is not an IEEE fp32 add (the mma family's 3xtf32 accumulates there
# over all of K and measured 2.2-3.3x SGEMM's worst error, tests/test_gpu_3xtf32.py; this kernel
# 0.87-1.5x, tests/test_gpu_gemv_tensor_cores.py).
SPLIT_MMA = """// acc += a·b in fp32 accuracy: a = a_big + a_small and b = b_big + b_small, each part an exact tf32
// value (a_big is a itself: the tensor cores drop its low 13 bits); small·small is under 2^-22 of it.
__device__ __forceinline__ void mma_3xtf32(float (&acc)[4], const u32 (&a)[4], const u32 (&a_small)[4],
                                           const u32 (&b)[2]) {
    const u32 b_small[2] = {__float_as_uint(tf32_residual(__uint_as_float(b[0]))),
                            __float_as_uint(tf32_residual(__uint_as_float(b[1])))};
    mma_tile(acc, a_small, b);
    mma_tile(acc, a, b_small);
    mma_tile(acc, a, b);
}
"""


def splits(spec: GemmSpec) -> bool:
    """Whether the kernel multiplies as 3xtf32 (fp32), rather than one tf32 product (tf32)."""
    return spec.dtype == "fp32"


def helpers(spec: GemmSpec, arch: str) -> str:
    """Device functions the kernel calls: the mma (and the split), the loads, D's pair stores."""
    split = TF32_PARTS + SPLIT_MMA if splits(spec) else ""
    return mma_helper("tf32", arch_number(arch)) + split + PACK_PAIR + VECTOR_LOAD + pair_io(spec, OUTPUT)


def _constants(spec: GemmSpec, config: GemvConfig) -> str:
    return constants(spec, config, tiles_note="8-output mma tiles of a group: one value of each in a lane's load of a row of W",
                     piece_note="k in one lane's 16-byte load of A (and rows of W it loads per chunk)",
                     chunk_note="k of one chunk: the 4 lanes of a row group take PIECE neighbouring k each")


def _multiply(spec: GemmSpec) -> str:
    upper = "a[1]" if a_fragment_rows(spec) == 2 else "make_uint4(0u, 0u, 0u, 0u)"
    if splits(spec):
        halves = """            const uint4 first_small = residuals(a[0]), upper_small = residuals(upper);
            const u32 small_first[4] = {first_small.x, upper_small.x, first_small.y, upper_small.y};
            const u32 small_second[4] = {first_small.z, upper_small.z, first_small.w, upper_small.w};
"""
        first = "float part[4] = {0.f, 0.f, 0.f, 0.f};  // the chunk's sum, added to acc on CUDA cores (below)\n                mma_3xtf32(part, a_first, small_first, b_first)"
        second = ("mma_3xtf32(part, a_second, small_second, b_second);\n"
                  "                #pragma unroll\n"
                  "                for (int v = 0; v < 4; ++v) acc[q][v] += part[v]")
    else:
        halves, first, second = "", "mma_tile(acc[q], a_first, b_first)", "mma_tile(acc[q], a_second, b_second)"
    return f"""        // acc[q] += the chunk's two mma per tile (s = 0, 1), from the lane's 4 rows of W (w[row][q]) and
        // 4 k of vectors g (a[0]) and g + 8 (upper); see the permutation above.
        auto multiply = [&](const u32 (&w)[PIECE][TILES], const uint4 (&a)[A_ROWS]) {{
            const uint4 upper = {upper};  // vector g + 8
            const u32 a_first[4] = {{a[0].x, upper.x, a[0].y, upper.y}};  // s = 0: stored k 4t, 4t + 1
            const u32 a_second[4] = {{a[0].z, upper.z, a[0].w, upper.w}};  // s = 1: stored k 4t + 2, 4t + 3
{halves}            #pragma unroll
            for (int q = 0; q < TILES; ++q) {{
                const u32 b_first[2] = {{w[0][q], w[1][q]}}, b_second[2] = {{w[2][q], w[3][q]}};
                {first};
                {second};
            }}
        }};
"""


RESIDUALS = """// The tf32 residuals of 4 values (parts/tf32_split.py).
__device__ __forceinline__ uint4 residuals(uint4 v) {
    return make_uint4(__float_as_uint(tf32_residual(__uint_as_float(v.x))), __float_as_uint(tf32_residual(__uint_as_float(v.y))),
                      __float_as_uint(tf32_residual(__uint_as_float(v.z))), __float_as_uint(tf32_residual(__uint_as_float(v.w))));
}
"""

# The exact path: a chunk with a value too small to split, summed on CUDA cores by each lane for
# the outputs and vectors it holds (W and x read again: they are in L2, and this is rare).
EXACT = """        // A chunk holding a value below 2^-103 (tf32_split_key): its residual would fall below fp32's
        // normal range, which the tensor cores read as zero. Each lane then sums the chunk's k for
        // its own outputs and vectors with fp32 FMAs, as SGEMM does (rare: W and x are read again).
        auto exact_chunk = [&](int k0) {
            #pragma unroll  // acc's indices must be constants, or acc would live in local memory
            for (int h = 0; h < A_ROWS; ++h) {
                const int v = g + 8 * h;
                #pragma unroll
                for (int q = 0; q < TILES; ++q)
                    #pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int n = n0 + TILES * (2 * t + e) + q;
                        if (v >= R || n >= P) continue;
                        float sum = 0.0f;  // the chunk's own sum, then one add: as short a chain as the tensor-core path's
                        for (int kk = k0; kk < min(k0 + CHUNK, K); ++kk)
                            sum = fmaf(x[(size_t)v * K + kk], W[(size_t)kk * P + n], sum);
                        acc[q][2 * h + e] += sum;
                    }
            }
        };
        // Whether any value of the step's loads (W's rows, the vectors) is too small to split, in any lane.
        auto unsplittable = [&](const u32 (&w)[UNROLL][PIECE][TILES], const uint4 (&a)[UNROLL][A_ROWS]) {
            u32 least = 0xFFFFFFFFu;
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                #pragma unroll
                for (int i = 0; i < PIECE; ++i)
                    #pragma unroll
                    for (int q = 0; q < TILES; ++q) least = min(least, 2u * w[u][i][q] - 1u);
                #pragma unroll
                for (int h = 0; h < A_ROWS; ++h) least = min(least, tf32_split_key(make_float4(
                    __uint_as_float(a[u][h].x), __uint_as_float(a[u][h].y), __uint_as_float(a[u][h].z), __uint_as_float(a[u][h].w))));
            }
            return __any_sync(0xFFFFFFFFu, least < UNSPLITTABLE_KEY);
        };
"""


def _loads(spec: GemmSpec, guarded: bool) -> str:
    """One step's loads (every load first: UNROLL·(PIECE + A_ROWS) in flight), then the mma; fp32
    first asks whether the step can be split. `guarded`: rows at or past K load zeros."""
    inside = ("const bool inside = k + u * CHUNK + PIECE * t < K;  // K % PIECE == 0: a piece is all in or all out\n"
              "                ")
    w_load = ("if (inside && n_inside) w_load(w_at + (size_t)(k + u * CHUNK + i) * P, w[u][i]); else zero(w[u][i])"
              if guarded else
              "if (n_inside) w_load(w_at + (size_t)(k + u * CHUNK + i) * P, w[u][i]); else zero(w[u][i])")
    a_load = ("inside ? masked(vector_load(x_row[h] + k + u * CHUNK), x_mask[h]) : ZERO" if guarded
              else "masked(vector_load(x_row[h] + k + u * CHUNK), x_mask[h])")
    multiply = """            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) multiply(w[u], a[u]);
"""
    if splits(spec):
        multiply = f"""            if (unsplittable(w, a)) {{
                #pragma unroll 1
                for (int u = 0; u < UNROLL; ++u) exact_chunk(k + u * CHUNK);
            }} else {{
    {multiply.replace(chr(10) + "            ", chr(10) + "                ")}            }}
"""
    return f"""            u32 w[UNROLL][PIECE][TILES];
            uint4 a[UNROLL][A_ROWS];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{
                {inside if guarded else ""}#pragma unroll
                for (int i = 0; i < PIECE; ++i) {{ {w_load}; }}
                #pragma unroll
                for (int h = 0; h < A_ROWS; ++h) a[u][h] = {a_load};
            }}
{multiply}"""


def body(spec: GemmSpec, config: GemvConfig, entry: str, params: str, operands: str) -> str:
    """Constants, the permutation's comments and the kernel (`operands`: the W and x declarations)."""
    how = ("3xtf32 (fp32 accuracy), a chunk with a value too small to split on CUDA cores" if splits(spec)
           else "tf32 products")
    helpers_in_kernel = (RESIDUALS if splits(spec) else "")
    exact = EXACT if splits(spec) else ""
    return _constants(spec, config) + "\n" + W_LOAD + PERMUTATION_TF32 + PERMUTATION_W + helpers_in_kernel + f"""
__device__ __forceinline__ void zero(u32 (&w)[TILES]) {{
    #pragma unroll
    for (int q = 0; q < TILES; ++q) w[q] = 0u;
}}

// columns on tensor cores: the WPO warps of a group split K into neighbouring spans and multiply their
// share with mma.sync ({how}), the R vectors as the mma's A (zeros past R) and W's rows as its B,
// TILES 8-output tiles a warp; the partial sums meet in shared memory and the epilogue runs on the way to D.
extern "C" __global__ void __launch_bounds__(THREADS, 1) {entry}({params}) {{
{operands}{GROUP_SETUP}    float acc[TILES][4] = {{}};  // the 16x8 tile q of D (transposed: vectors x outputs), fp32
    if (n0 < P) {{
        // Lane (g, t) streams rows 4t .. 4t + 3 of each chunk of W at outputs n0 + TILES·g ..; outputs past
        // P load zeros (P % TILES == 0: a lane's outputs are all inside or all past it; never stored).
        const bool n_inside = n0 + TILES * g < P;
        const in_t* w_at = W + (size_t)(PIECE * t) * P + n0 + TILES * g;
{VECTOR_ROWS}{_multiply(spec)}{exact}        int k = part * SPAN;  // this warp's first span
        for (; k + SPAN <= K; k += STEP) {{  // whole spans: no k guard
{_loads(spec, False)}        }}
        if (k < K) {{  // the span that K ends in
{_loads(spec, True)}        }}
    }}
{reduce_partials("acc[j][v]")}
{pair_stores(spec, fragment(config.mma_tiles), OUTPUT)}}}
"""
