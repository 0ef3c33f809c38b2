"""The gemv family's tensor-core rows kernel: 2-64 rows of A against B stored N×K (layout nt), bf16,
fp16 or tf32 (past 16 rows, the vectors are blocks of 16: one mma each per tile of W).

The CUDA-core rows kernel spends R FMAs (and the conversions) on every weight it loads, so with a
batch of 8-16 vectors it is bound by the SM, not by HBM. Here the vectors are the A operand of
mma.sync m16n8k16 (m16n8k8 for tf32; 16 rows, zero-padded past M) and W = B, stored N×K, is exactly
its `.col` B operand: a warp multiplies 16 × 8 outputs per instruction pair and only moves bytes.

The k order inside each chunk (32 k of 16-bit values, 16 of tf32) is permuted (the same way for A
and B, which leaves the sum unchanged) so that every 32-bit word of a lane's 16-byte load is a
fragment register as it stands: no shuffles and no shared memory between the loads and the mma.
The generated CUDA spells the permutation out (PERMUTATION_16BIT and PERMUTATION_TF32 below).
"""
from __future__ import annotations

from ...spec import GemmSpec
from ..config_base import arch_number
from ..mma.ptx import mma_helper
from ..parts.epilogue import CArg, Operands, VectorArg
from ..parts.floats import PACK_PAIR
from ..parts.writeback import CRead, PairFragment, PairOutput, pair_io, pair_stores
from .config import GemvConfig, a_fragment_rows, values_per_load

# The accumulator fragment of a group's 16x8 tile j in row block b (vectors 16b .. 16b + 15): thread
# (g, t) holds vectors 16b + g and 16b + g + 8, i.e. g + 8h for h = 2b and 2b + 1, of outputs n0 + 8j + 2t
# and + 1. Rows past M are the zero padding of A: never stored.
FRAGMENT = PairFragment(
    loops=(("h", "A_ROWS"), ("j", "TILES")), row="g + 8 * h", col="n0 + 8 * j + 2 * t",
    values=("acc[j][h / 2][2 * (h % 2)]", "acc[j][h / 2][2 * (h % 2) + 1]"), row_depth=1,
    note="Thread (g, t) holds vectors g + 8h of outputs n0 + 8j + 2t and + 1 of each tile j.")

# C is read a pair at a time where N is even; bias as a FloatView of D's type (as the rows kernel).
OUTPUT = PairOutput(Operands(CArg.VALUE, VectorArg.VIEW), CRead.POINTER, bias="FloatView<out_t>{bias}",
                    index="size_t", cvt_pairs=True)

PERMUTATION_16BIT = """// The k permutation. mma m16n8k16 gives thread (g, t) (g = lane / 4, t = lane % 4) the k pairs
// {2t, 2t+1} (B register 0, A registers 0 and 1) and {2t+8, 2t+9} (B register 1, A registers 2 and 3)
// of A's rows g, g + 8 and of B's column g. The sum over k does not care which stored k each of the
// mma's k stands for, as long as A and B agree. So in a chunk of 32 k starting at k0, lane (g, t)
// loads the 8 neighbouring k0 + 8t .. k0 + 8t + 7 of its row of W (one 16-byte load: words .x .y .z .w,
// two k each) and of A's rows g and g + 8, and the chunk's two mma (s = 0, 1) take
//     mma k 2t + i      <- stored k0 + 8t + 4s + i        (word .x for s = 0, .z for s = 1)
//     mma k 2t + 8 + i  <- stored k0 + 8t + 4s + 2 + i    (word .y for s = 0, .w for s = 1)
// for i = 0, 1: each stored k of the chunk exactly once, the same map for A and B, and each 32-bit
// word of a load is a fragment register as loaded.
"""

PERMUTATION_TF32 = """// The k permutation. mma m16n8k8 (tf32) gives thread (g, t) (g = lane / 4, t = lane % 4) k = t
// (B register 0, A registers 0 and 1) and k = t + 4 (B register 1, A registers 2 and 3) of A's rows
// g, g + 8 and of B's column g. The sum over k does not care which stored k each of the mma's k
// stands for, as long as A and B agree. So in a chunk of 16 k starting at k0, lane (g, t) loads the 4
// neighbouring k0 + 4t .. k0 + 4t + 3 of its row of W (one 16-byte load: words .x .y .z .w, one k
// each) and of A's rows g and g + 8, and the chunk's two mma (s = 0, 1) take
//     mma k t      <- stored k0 + 4t + 2s        (word .x for s = 0, .z for s = 1)
//     mma k t + 4  <- stored k0 + 4t + 2s + 1    (word .y for s = 0, .w for s = 1)
// each stored k of the chunk exactly once, the same map for A and B, and each 32-bit word of a load
// is a fragment register as loaded (fp32 bits: the tensor core reads them as tf32).
"""


def permutation(spec: GemmSpec) -> str:
    return PERMUTATION_TF32 if spec.dtype == "tf32" else PERMUTATION_16BIT


VECTOR_LOAD = """// 16 bytes of the vectors (A). Small and read by every group of the block at the same k, so they
// stay in L1 (the read-only path), unlike W's rows, which are streamed once.
__device__ __forceinline__ uint4 vector_load(const in_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
// v with every bit cleared where mask is 0 (a padding row of the mma's A), kept where it is all ones.
__device__ __forceinline__ uint4 masked(uint4 v, u32 mask) {
    return make_uint4(v.x & mask, v.y & mask, v.z & mask, v.w & mask);
}
"""


def helpers(spec: GemmSpec, arch: str) -> str:
    """Device functions the kernel calls: the mma, the vector load, D's pair stores."""
    return mma_helper(spec.dtype, arch_number(arch)) + PACK_PAIR + VECTOR_LOAD + pair_io(spec, OUTPUT)


def constants(spec: GemmSpec, config: GemvConfig,
              tiles_note: str = "8-output mma tiles of a group (each warp of it multiplies all of them)",
              piece_note: str = "k in one lane's 16-byte load",
              chunk_note: str = "k of one chunk: the 4 lanes of a row group load PIECE neighbouring k each") -> str:
    """The kernel's block shape and k walk as constants (the columns kernel passes its own notes)."""
    rows = a_fragment_rows(spec)
    why = ("row g of the mma's A (rows 8-15 are zeros: M ≤ 8)" if rows == 1
           else "rows g and g + 8 of the mma's A" if rows == 2
           else f"rows g + 8h of the mma's A: {rows // 2} row blocks of 16 vectors, each its own mma")
    return f"""constexpr int THREADS = {config.threads}, UNROLL = {config.unroll};  // UNROLL chunks of k per step of a warp
constexpr int WPO = {config.warps_per_output};  // warps sharing one group's K
constexpr int TILES = {config.mma_tiles};  // {tiles_note}
constexpr int NW = 8 * TILES;  // outputs of one group
constexpr int GROUPS = THREADS / 32 / WPO;  // groups per block
constexpr int A_ROWS = {rows};  // 16-byte loads of A per chunk: {why}
constexpr int BLOCKS = (A_ROWS + 1) / 2;  // 16-row blocks of vectors: the mma's A, one after another
constexpr int PIECE = {values_per_load(spec)};  // {piece_note}
constexpr int CHUNK = 4 * PIECE;  // {chunk_note}
constexpr int SPAN = UNROLL * CHUNK;  // k a warp covers per step of its loop
constexpr int STEP = WPO * SPAN;  // k a group covers per step: its WPO warps take neighbouring spans
constexpr int FIRST_K = STEP;  // k a group reads in its first step
"""


def _multiply(spec: GemmSpec) -> str:
    upper = ("a[2 * b + 1]" if a_fragment_rows(spec) > 1
             else "make_uint4(0u, 0u, 0u, 0u)")
    return f"""        // acc[j][b] += the chunk's two mma per tile and row block, from this lane's 8 k of W's row in
        // each tile (w[j]) and of A's rows 16b + g (a[2b]) and 16b + g + 8 (upper); see the permutation
        // above. Each 16-byte load of W feeds 2·BLOCKS mma.
        auto multiply = [&](const uint4 (&w)[TILES], const uint4 (&a)[A_ROWS]) {{
            #pragma unroll
            for (int b = 0; b < BLOCKS; ++b) {{
                const uint4 upper = {upper};  // vector 16b + g + 8
                const u32 a_first[4] = {{a[2 * b].x, upper.x, a[2 * b].y, upper.y}};  // s = 0: the first half of this lane's piece
                const u32 a_second[4] = {{a[2 * b].z, upper.z, a[2 * b].w, upper.w}};  // s = 1: the second half
                #pragma unroll
                for (int j = 0; j < TILES; ++j) {{
                    const u32 b_first[2] = {{w[j].x, w[j].y}}, b_second[2] = {{w[j].z, w[j].w}};
                    mma_tile(acc[j][b], a_first, b_first);
                    mma_tile(acc[j][b], a_second, b_second);
                }}
            }}
        }};
"""


def _loads(guarded: bool) -> str:
    """One step's loads: every load of the step first (UNROLL·(TILES + A_ROWS) of them in flight),
    then the mma; `guarded`: pieces at or past K load zeros."""
    inside = "const bool inside = k + u * CHUNK + PIECE * t < K;  // K % PIECE == 0: a piece is all in or all out\n                "
    w_load = "inside ? stream_load(w_row[j] + k + u * CHUNK) : ZERO" if guarded else "stream_load(w_row[j] + k + u * CHUNK)"
    a_load = ("inside ? masked(vector_load(x_row[h] + k + u * CHUNK), x_mask[h]) : ZERO" if guarded
              else "masked(vector_load(x_row[h] + k + u * CHUNK), x_mask[h])")
    return f"""            uint4 w[UNROLL][TILES], a[UNROLL][A_ROWS];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{
                {inside if guarded else ""}#pragma unroll
                for (int j = 0; j < TILES; ++j) w[u][j] = {w_load};
                #pragma unroll
                for (int h = 0; h < A_ROWS; ++h) a[u][h] = {a_load};
            }}
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) multiply(w[u], a[u]);
"""


# The kernels' first statements after their operands (here and columns_tensor_cores.py): each warp's
# group and span of K, each lane's place in the mma fragments, the group's first output.
GROUP_SETUP = """    const uint4 ZERO = make_uint4(0u, 0u, 0u, 0u);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = warp / WPO, part = warp % WPO;  // part: which span of each step of K
    const int g = lane / 4, t = lane % 4;  // the mma fragments' row group and thread in group
    const int n0 = (blockIdx.x * GROUPS + group) * NW;  // first output of the group
"""

# Each lane's rows of the vectors (the mma's A rows g and g + 8), masked past R.
VECTOR_ROWS = """        // ... and reads vectors g and g + 8 at the same k: the mma's A rows. Rows past the R vectors read
        // vector R - 1 and mask it to zeros: no branch between the loads, so all of them stay in flight.
        const in_t* x_row[A_ROWS];
        u32 x_mask[A_ROWS];
        #pragma unroll
        for (int h = 0; h < A_ROWS; ++h) {
            x_mask[h] = g + 8 * h < R ? 0xFFFFFFFFu : 0u;
            x_row[h] = x + (size_t)min(g + 8 * h, R - 1) * K + PIECE * t;
        }
"""

def reduce_partials(acc: str) -> str:
    """The meeting of a group's WPO partial sums; `acc` is element v (0 .. 2·A_ROWS - 1) of tile j."""
    return f"""    // The group's WPO partial sums meet in shared memory; its part-0 warp adds them in part order
    // (the same sum every run) and writes D.
    if (WPO > 1) {{
        __shared__ float partial[THREADS / 32][TILES][2 * A_ROWS][32];  // lane fastest: no bank conflicts
        if (part != 0)
            #pragma unroll
            for (int j = 0; j < TILES; ++j)
                #pragma unroll
                for (int v = 0; v < 2 * A_ROWS; ++v) partial[warp][j][v][lane] = {acc};
        __syncthreads();
        if (part != 0) return;
        for (int p = 1; p < WPO; ++p)
            #pragma unroll
            for (int j = 0; j < TILES; ++j)
                #pragma unroll
                for (int v = 0; v < 2 * A_ROWS; ++v) {acc} += partial[warp + p][j][v][lane];
    }}
"""


def body(spec: GemmSpec, config: GemvConfig, entry: str, params: str, operands: str) -> str:
    """Constants, the permutation's comment and the kernel (`operands`: the W and x declarations)."""
    return constants(spec, config) + "\n" + permutation(spec) + f"""
// rows on tensor cores: the WPO warps of a group split K into neighbouring spans and multiply their
// share with mma.sync, the R vectors as the mma's A (zeros past R) and TILES 8-output tiles of W as
// its B; the partial sums meet in shared memory and the epilogue runs on the way to D.
// (THREADS, 1): ptxas may then spend registers on keeping all of a step's loads in flight; with
// (THREADS) alone it moved them between the mma (about 3 in flight) to save registers (sm_90, NVRTC 13).
extern "C" __global__ void __launch_bounds__(THREADS, 1) {entry}({params}) {{
{operands}{GROUP_SETUP}    float acc[TILES][BLOCKS][4] = {{}};  // the 16x8 tile j of D for row block b (transposed: vectors x outputs), fp32
    if (n0 < P) {{
        // Lane (g, t) streams row n0 + 8j + g of W for tile j, PIECE k per chunk from PIECE·t on. Outputs past P
        // read row P - 1 instead (in bounds; never stored), so the loop needs no output guard.
        const in_t* w_row[TILES];
        #pragma unroll
        for (int j = 0; j < TILES; ++j) w_row[j] = W + (size_t)min(n0 + 8 * j + g, P - 1) * K + PIECE * t;
{VECTOR_ROWS}{_multiply(spec)}        int k = part * SPAN;  // this warp's first span
        for (; k + SPAN <= K; k += STEP) {{  // whole spans: no k guard
{_loads(False)}        }}
        if (k < K) {{  // the span that K ends in
{_loads(True)}        }}
    }}
{reduce_partials("acc[j][v / 4][v % 4]")}
{pair_stores(spec, FRAGMENT, OUTPUT)}}}
"""
