"""The wgmma kernel's gated (SwiGLU) write-back, as CUDA text: D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ).

The weight's rows are interleaved by 8 (GemmSpec.gated): for D's columns [8q, 8q+8), gate rows
[16q, 16q+8) and up rows [16q+8, 16q+16). The kernel is then the plain wgmma GEMM over N' = 2N columns,
and in its accumulator fragment each thread holds columns 8j + 2·(lane%4) + {0, 1} of every 8-column
group j: gate group j = 2q and up group j = 2q + 1 land in the same thread, at the same places. So
swiglu over those pairs gives, in registers, exactly the fragment of a BM × BN/2 tile of D, and the
plain write-back (direct stores, or the TMA-store slices, stmatrix or not) runs unchanged on it: its
functions are emitted in the namespace `swiglu_out`, where N and BN name D's shapes and shadow the
GEMM's. Split tiles reduce their fp32 sums over the whole BN' tile first (add_partials), then swiglu.
"""
from __future__ import annotations

from ...spec import GemmSpec
from ..parts.epilogue import SWIGLU
from .config import WgmmaConfig

NAMESPACE = "swiglu_out"


def constants(spec: GemmSpec) -> str:
    """D's shapes beside the GEMM's (N and BN there are the tensor cores' 2N columns and tile)."""
    return f"""// Gated (SwiGLU): the GEMM above runs N = 2·D_N columns, gate and up rows of B interleaved by 8;
// a tile of BN of its columns becomes D_BN = BN / 2 columns of D.
constexpr int D_N = {spec.n}, D_BN = BN / 2;
static_assert(BN % 16 == 0, "a tile holds whole gate/up pairs of 8-column groups");
"""


def epi_bytes() -> str:
    """The store buffer of a gated kernel: slices of D's BN / 2 columns."""
    return ("constexpr int EPI_BYTES = TMA_STORE ? TILE_TURNS * BM * (D_BN / STORE_SLICES) * (int)sizeof(out_t) : 0;"
            "  // a buffer per turn, of D's columns")


COMPACT = r"""
// The fragment of a BM x BN tile of the gate/up product, compacted to the fragment of a BM x BN/2 tile
// of D: 8-column groups 2q (gate) and 2q + 1 (up) hold the same columns of output group q in the same
// thread (acc[mb][4j + e], e = 2·half + {0, 1}), so out[mb][4q + e] = swiglu(gate, up) needs no shuffle.
__device__ __forceinline__ void swiglu_fragment(const float (&acc)[M_BLOCKS][BN / 2], float (&out)[M_BLOCKS][BN / 4]) {
    #pragma unroll
    for (int mb = 0; mb < M_BLOCKS; ++mb)
        #pragma unroll
        for (int q = 0; q < BN / 16; ++q)
            #pragma unroll
            for (int e = 0; e < 4; ++e) out[mb][4 * q + e] = swiglu(acc[mb][8 * q + e], acc[mb][8 * q + 4 + e]);
}
"""


def write_back(pieces: str) -> str:
    """The SwiGLU helpers, then the plain write-back `pieces` (store_tile, store_tile_smem) in a namespace
    where N, BN and SLICE_COLS are D's."""
    return f"""{SWIGLU}{COMPACT}
// The write-back over D's tile: the plain one, with D's width and tile width shadowing the GEMM's.
namespace {NAMESPACE} {{
constexpr int N = D_N;                          // D's columns
constexpr int BN = D_BN;                        // D's columns of a tile
constexpr int SLICE_COLS = BN / STORE_SLICES;   // D's columns of a store slice
{pieces}
}}  // namespace {NAMESPACE}
"""


def call(spec: GemmSpec, store: str) -> str:
    """`store` (a write-back call on `acc`, ending in ';') for a gated spec: on the compacted fragment,
    the namespace's function. Unchanged for a plain spec."""
    if not spec.gated:
        return store
    compacted = store.replace("(acc,", "(gated,", 1)
    name = compacted.split("(", 1)[0].split("<", 1)[0]
    compacted = f"{NAMESPACE}::{compacted}" if name in ("store_tile", "store_tile_smem") else compacted
    return ("{  // SwiGLU over the gate/up pairs, then D's tile written back\n"
            "                float gated[M_BLOCKS][BN / 4];\n"
            "                swiglu_fragment(acc, gated);\n"
            f"                {compacted}\n"
            "            }")


def fallbacks(config: WgmmaConfig) -> list[WgmmaConfig]:
    """A plain GEMM's config and its nearest twins a gated kernel may take, in order: without
    overlap_epilogue, then with fewer store slices (a gated tile writes half as many columns of D, so a
    slice of them may fall short of a 128-byte row). The chooser keeps the first valid one."""
    plain = config.with_(overlap_epilogue=False)
    slices = [s for s in (plain.store_slices, plain.store_slices // 2, plain.store_slices // 4) if s >= 1]
    return [config] + [plain.with_(store_slices=s) for s in dict.fromkeys(slices)]
