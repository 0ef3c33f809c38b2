"""fp8 decode GEMV (issue 70): Fp8GemvSpec + Fp8GemvConfig -> KernelSource, a stream over the weights.

D (M×N) = scale · (A · Wᵀ) with M ≤ 16: every byte of W (N×K fp8 codes) is used once, so the kernel's limit
is HBM bandwidth and its job is to keep 16-byte loads of W in flight while the SM keeps up.

- **W is the mma's A operand.** mma.sync m16n8k16 (f16 in, fp32 sums) multiplies a 16×16 tile of W (16
  outputs × 16 k) by a 16×8 block of the vectors (the rows of A, zero work past M: those columns are never
  stored). Up to 8 rows of A fill one 8-column block, so each mma covers 16 outputs; 9-16 rows take two.
- **fp8 becomes f16 in registers.** Every e4m3 and e5m2 value is an f16 value, so the conversion is exact:
  `cvt.rn.f16x2.e4m3x2` (sm_89+) or integer ops (`alu`): e5m2's code is the top byte of its f16, one byte
  permute; e4m3 takes a permute, a shift, a mask and a subtract and lands scaled by 2^-8, which the epilogue
  multiplies back. (mma.sync's own fp8 shape, m16n8k32 .e4m3, is emulated on sm_90: ptxas converts both
  operands of every mma, A's included, where here A's codes are converted once for all of a warp's tiles.)
- **The k permutation.** Inside a chunk of 64 k, lane (g, t) loads 16 neighbouring codes (k 16t .. 16t + 15)
  of W's rows g and g + 8 of each tile and of vector g: one 16-byte load each, whose 32-bit word s (s = 0..3)
  feeds the chunk's mma s. The generated CUDA spells the map out; A and B agree on it, so the sum is unchanged.
- **K split across warps.** A block owns `tiles` tiles of 16 outputs; its WPO warps take neighbouring spans of
  `unroll` chunks each step, and their sums meet in shared memory (fixed order) before the scales, bias and the
  store. Outputs past N read row N - 1 (in bounds, never stored); vectors past M read row M - 1 (never stored).
  K is a multiple of 16 (the spec says so), so a 16-byte piece lies wholly inside or outside K.
"""
from __future__ import annotations

from ...kernel_source import KernelSource
from ..config_base import arch_number
from ..half_floats import HALF_FLOATS
from ..mma.ptx import mma_helper
from ..parts import dependent_launch
from ..parts.floats import TO_OUT
from .fp8_config import (CHUNK, PIECE, TILE, Fp8GemvConfig, Fp8GemvSpec, check, grid_blocks, min_blocks)

FAMILY, VERSION = "gemv_fp8", "1"
STORAGE = {"bf16": "bf16_t", "fp16": "fp16_t", "fp32": "float"}
# Bytes of W a block asks L2 for before it waits for the kernel ahead (parts/dependent_launch.py): the gemv
# tensor-core kernel's budget (render.PREFETCH_BYTES), not yet measured for this one.
PREFETCH_BYTES = 16384
# e4m3 through the integer path: the f16 has the code's 7 magnitude bits at bits 7..13, i.e. the value · 2^-8.
E4M3_ALU_SCALE = 256.0
MAGNITUDE_MASK = 0x3F803F80  # bits 7..13 of each 16-bit lane
SPREAD_SELECTORS = (0x1404, 0x3424)  # prmt: bytes (0, 1) / (2, 3) of a word into the high bytes of two lanes


def entry_name(spec: Fp8GemvSpec, config: Fp8GemvConfig) -> str:
    convert = "" if (config.w_convert, config.a_convert) == ("cvt", "cvt") else f"_w{config.w_convert}_a{config.a_convert}"
    return f"{spec.slug()}_w{config.warps_per_output}t{config.tiles}u{config.unroll}{convert}"


def unscale(spec: Fp8GemvSpec, config: Fp8GemvConfig) -> float:
    """What the epilogue multiplies the sums by to undo the integer e4m3 path's 2^-8 (once per such operand)."""
    if spec.fmt != "e4m3":
        return 1.0
    return E4M3_ALU_SCALE ** ((config.w_convert == "alu") + (config.a_convert == "alu"))


def conversions(fmt: str) -> str:
    """to_f16x2_cvt<HALF> and to_f16x2_alu<HALF>: codes 2·HALF and 2·HALF + 1 of a 32-bit word as an f16 pair."""
    alu = ("    return spread;  // an e5m2 code is the top byte of the f16 of the same value"
           if fmt == "e5m2" else
           f"""    // sign at bit 15 already; the 7 magnitude bits (exponent, mantissa) move from bits 8..14 to 7..13:
    // spread - (magnitude << 7) = sign << 15 | magnitude << 7, an f16 of the code's value · 2^-8 (subnormals
    // too: an e4m3 subnormal's pattern is an f16 subnormal's). The NaN code reads as ±480 (· 2^-8).
    return spread - ((spread >> 1) & 0x{MAGNITUDE_MASK:08X}u);""")
    return f"""
// Codes 2·HALF and 2·HALF + 1 of `word` (the lower address in the low half) as an f16 pair, exactly.
// (The halves are split inside the asm, so ptxas reads the high one in place: no shift before the cvt.)
template <int HALF> __device__ __forceinline__ u32 to_f16x2_cvt(u32 word) {{
    u32 pair;
    if (HALF)
        asm("{{ .reg .b16 lo, hi;\\n mov.b32 {{lo, hi}}, %1;\\n cvt.rn.f16x2.{fmt}x2 %0, hi;\\n}}" : "=r"(pair) : "r"(word));
    else
        asm("{{ .reg .b16 lo, hi;\\n mov.b32 {{lo, hi}}, %1;\\n cvt.rn.f16x2.{fmt}x2 %0, lo;\\n}}" : "=r"(pair) : "r"(word));
    return pair;
}}
// The same pair by integer ops: one byte permute puts each code in the high byte of its 16-bit lane.
template <int HALF> __device__ __forceinline__ u32 to_f16x2_alu(u32 word) {{
    u32 spread;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(spread) : "r"(word), "r"(0u), "n"(HALF ? 0x{SPREAD_SELECTORS[1]:04X} : 0x{SPREAD_SELECTORS[0]:04X}));
{alu}
}}
"""


LOADS = r"""
// 16 bytes of W, used once: not kept in L1 (W is streamed; the vectors stay cached).
__device__ __forceinline__ uint4 stream_load(const unsigned char* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
// 16 bytes of the vectors (A): small and read by every block at the same k, so through L1.
__device__ __forceinline__ uint4 vector_load(const unsigned char* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
"""

PERMUTATION = """// The k permutation. mma m16n8k16 gives lane (g, t) (g = lane / 4, t = lane % 4) the k pairs {2t, 2t+1}
// (A registers 0 and 1: rows g and g + 8; B register 0: column g) and {2t+8, 2t+9} (A registers 2, 3; B 1).
// The sum over k does not care which stored k each mma k stands for, as long as A and B agree. So in a chunk
// of 64 k from k0, lane (g, t) loads codes k0 + 16t .. k0 + 16t + 15 of W's rows g and g + 8 (the mma's A)
// and of vector g (its B) — one 16-byte load each — and the chunk's mma s (s = 0..3) takes word s of them:
//     mma k 2t + i      <- stored k0 + 16t + 4s + i        (the word's low f16 pair)
//     mma k 2t + 8 + i  <- stored k0 + 16t + 4s + 2 + i    (its high f16 pair)
// for i = 0, 1: each stored k of the chunk exactly once, the same map for W and the vectors.
"""


def _constants(spec: Fp8GemvSpec, config: Fp8GemvConfig) -> str:
    return f"""constexpr int M = {spec.m}, N = {spec.n}, K = {spec.k};  // D (M×N) = scale · A (M×K) · Wᵀ (W: N×K)
constexpr int THREADS = {config.threads}, MIN_BLOCKS = {min_blocks(config, spec)};
constexpr int WPO = {config.warps_per_output};  // warps of a block: they split K
constexpr int TILES = {config.tiles};  // 16-output tiles of a block (the mma's A: W's rows)
constexpr int VB = {spec.vector_blocks};  // 8-vector blocks (the mma's B): vectors 8b .. 8b + 7
constexpr int UNROLL = {config.unroll};  // chunks a warp loads before it multiplies
constexpr int PIECE = {PIECE}, CHUNK = {CHUNK};  // codes in one 16-byte load; k of a chunk (4 lanes × PIECE)
constexpr int SPAN = UNROLL * CHUNK;  // k a warp covers per step
constexpr int STEP = WPO * SPAN;  // k the block covers per step: its warps take neighbouring spans
constexpr int OUTPUTS = {TILE} * TILES;  // outputs of a block
constexpr float UNSCALE = {unscale(spec, config):.1f}f;  // undoes the integer e4m3 conversion's 2^-8 (1 otherwise)
"""


def _convert(name: str, convert: str, count: str) -> str:
    """Each 16-byte load of `name`[...] as 8 f16 pairs `name`_h[...][8] (pair 2s + HALF from word s)."""
    return f"""        u32 {name}_h[{count}][8];
        #pragma unroll
        for (int i = 0; i < {count}; ++i) {{
            const u32 words[4] = {{{name}[i].x, {name}[i].y, {name}[i].z, {name}[i].w}};
            #pragma unroll
            for (int s = 0; s < 4; ++s) {{
                {name}_h[i][2 * s] = to_f16x2_{convert}<0>(words[s]);
                {name}_h[i][2 * s + 1] = to_f16x2_{convert}<1>(words[s]);
            }}
        }}
"""


def _multiply(config: Fp8GemvConfig) -> str:
    return f"""    // acc[j][b] += tile j of W (rows n0 + 16j + g, + 8: w[2j], w[2j + 1]) times vectors 8b + g (a[b]) over
    // this lane's 16 k of the chunk: four mma, mma s from word s (the permutation above).
    auto multiply = [&](const uint4 (&w)[2 * TILES], const uint4 (&a)[VB]) {{
{_convert("a", config.a_convert, "VB")}{_convert("w", config.w_convert, "2 * TILES")}        #pragma unroll
        for (int s = 0; s < 4; ++s)
            #pragma unroll
            for (int j = 0; j < TILES; ++j) {{
                const u32 tile[4] = {{w_h[2 * j][2 * s], w_h[2 * j + 1][2 * s], w_h[2 * j][2 * s + 1], w_h[2 * j + 1][2 * s + 1]}};
                #pragma unroll
                for (int b = 0; b < VB; ++b) {{
                    const u32 vectors[2] = {{a_h[b][2 * s], a_h[b][2 * s + 1]}};
                    mma_tile(acc[j][b], tile, vectors);
                }}
            }}
    }};
"""


def _loads(guarded: bool) -> str:
    """One step's loads, all before the mma (UNROLL·(2·TILES + VB) in flight); `guarded`: pieces past K read zeros."""
    inside = "const bool inside = k + u * CHUNK + PIECE * t < K;  // K % PIECE == 0: a piece is all in or all out\n                "
    w_load = "inside ? stream_load(w_row[r] + k + u * CHUNK) : ZERO" if guarded else "stream_load(w_row[r] + k + u * CHUNK)"
    a_load = "inside ? vector_load(a_row[b] + k + u * CHUNK) : ZERO" if guarded else "vector_load(a_row[b] + k + u * CHUNK)"
    return f"""        uint4 w[UNROLL][2 * TILES], a[UNROLL][VB];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {{
            {inside if guarded else ""}#pragma unroll
            for (int r = 0; r < 2 * TILES; ++r) w[u][r] = {w_load};
            #pragma unroll
            for (int b = 0; b < VB; ++b) a[u][b] = {a_load};
        }}
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) multiply(w[u], a[u]);
"""


REDUCE = """    // The WPO warps' sums meet in shared memory; warp 0 adds them in warp order (the same sum every run).
    if (WPO > 1) {
    __shared__ float partial[WPO][TILES][VB][4][32];  // lane fastest: no bank conflicts
    if (warp != 0)
        #pragma unroll
        for (int j = 0; j < TILES; ++j)
            #pragma unroll
            for (int b = 0; b < VB; ++b)
                #pragma unroll
                for (int v = 0; v < 4; ++v) partial[warp][j][b][v][lane] = acc[j][b][v];
    __syncthreads();
    if (warp != 0) return;
    for (int p = 1; p < WPO; ++p)
        #pragma unroll
        for (int j = 0; j < TILES; ++j)
            #pragma unroll
            for (int b = 0; b < VB; ++b)
                #pragma unroll
                for (int v = 0; v < 4; ++v) acc[j][b][v] += partial[p][j][b][v][lane];
    }
"""


def _store(spec: Fp8GemvSpec) -> str:
    scale = ("scale_a[m] * scale_b[n]" if spec.scaling == "rowwise" else "tensor_scale")
    tensor = ("    const float tensor_scale = scale_a[0] * scale_b[0];  // per tensor: one scale each\n"
              if spec.scaling == "tensor" else "")
    bias = " + to_float(bias[n])" if spec.bias else ""
    return f"""    // Accumulator v of tile j, block b: output n0 + 16j + g + 8·(v / 2), vector 8b + 2t + v % 2. D is M×N row-major.
{tensor}    #pragma unroll
    for (int j = 0; j < TILES; ++j)
        #pragma unroll
        for (int b = 0; b < VB; ++b)
            #pragma unroll
            for (int v = 0; v < 4; ++v) {{
                const int n = n0 + 16 * j + g + 8 * (v / 2), m = 8 * b + 2 * t + v % 2;
                if (m < M && n < N) D[(size_t)m * N + n] = to_out(acc[j][b][v] * UNSCALE * ({scale}){bias});
            }}
"""


def _params(spec: Fp8GemvSpec) -> tuple[tuple[str, ...], str]:
    names = ("A", "B", "scale_a", "scale_b") + (("bias",) if spec.bias else ()) + ("D",)
    text = ("const unsigned char* __restrict__ A, const unsigned char* __restrict__ B, "
            "const float* __restrict__ scale_a, const float* __restrict__ scale_b, "
            + ("const out_t* __restrict__ bias, " if spec.bias else "") + "out_t* __restrict__ D")
    return names, text


def _start(arch: str) -> str:
    """W's declaration, then on sm_90+ the dependent-launch prologue: the block's rows' first step to L2."""
    operands = ("    const unsigned char* __restrict__ W = B;  // the weights, N×K: streamed once\n"
                "    const int n0 = blockIdx.x * OUTPUTS;  // the block's first output (row of W)\n")
    if not dependent_launch.supported(arch):
        return operands
    return operands + dependent_launch.prologue("W + (size_t)n0 * K", "min(OUTPUTS, N - n0)", "(size_t)K",
                                                "(size_t)min(K, STEP)", PREFETCH_BYTES)


def _kernel(spec: Fp8GemvSpec, config: Fp8GemvConfig, arch: str) -> str:
    return f"""
// The fp8 decode GEMV: a block's WPO warps split K over its TILES 16-output tiles of W; each lane streams rows
// n0 + 16j + g and + 8 of W and reads vector g (and 8 + g) of A at the same k; all of a step's loads go out
// before its mma. (THREADS, MIN_BLOCKS): ptxas keeps each thread within 65536 / (THREADS · MIN_BLOCKS) registers.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) {entry_name(spec, config)}({_params(spec)[1]}) {{
{_start(arch)}    const uint4 ZERO = make_uint4(0u, 0u, 0u, 0u);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // the mma fragments' row group and thread in group
    float acc[TILES][VB][4] = {{}};  // tile j × vector block b of Dᵀ (16 outputs × 8 vectors), fp32
    // Lane (g, t) streams rows n0 + 16j + g (w_row[2j]) and + 8 (w_row[2j + 1]) of W from k = PIECE·t, clamped
    // to row N - 1, and vectors 8b + g of A (a_row[b]), clamped to row M - 1: no branch between the loads.
    const unsigned char* w_row[2 * TILES];
    #pragma unroll
    for (int r = 0; r < 2 * TILES; ++r) w_row[r] = W + (size_t)min(n0 + 16 * (r / 2) + 8 * (r % 2) + g, N - 1) * K + PIECE * t;
    const unsigned char* a_row[VB];
    #pragma unroll
    for (int b = 0; b < VB; ++b) a_row[b] = A + (size_t)min(8 * b + g, M - 1) * K + PIECE * t;
{_multiply(config)}    int k = warp * SPAN;  // this warp's first span
    for (; k + SPAN <= K; k += STEP) {{  // whole spans: no k guard
{_loads(False)}    }}
    if (k < K) {{  // the span that K ends in
{_loads(True)}    }}
{REDUCE}{_store(spec)}}}
"""


def render(spec: Fp8GemvSpec, config: Fp8GemvConfig, arch: str = "sm_90") -> KernelSource:
    """The kernel for `spec` in `config`'s block shape, for `arch` (sm_89+); a ConfigError names what is wrong."""
    check(config, spec, arch)
    header = (f"// gemmtune {FAMILY} v{VERSION}: {spec.slug()}\n// config: {config.describe()}\n"
              "// D = scale · A·Wᵀ, A and W fp8 codes: each byte of W is read once, so the limit is HBM bandwidth.\n")
    types = f"typedef {STORAGE[spec.out_dtype]} out_t;  // D and bias\n"
    helpers = (mma_helper("fp16", arch_number(arch)) + LOADS + conversions(spec.fmt)
               + (dependent_launch.HELPERS if dependent_launch.supported(arch) else ""))
    code = (header + HALF_FLOATS + types + TO_OUT + helpers + "\n" + _constants(spec, config) + "\n" + PERMUTATION
            + _kernel(spec, config, arch))
    names, _ = _params(spec)
    return KernelSource(code=code, entry=entry_name(spec, config), grid=(grid_blocks(spec, config), 1, 1),
                        block=(config.threads, 1, 1), args=names, spec=spec.as_gemm(), family=FAMILY,
                        family_version=VERSION, config=config.to_json(),
                        dependent_launch=dependent_launch.supported(arch))
