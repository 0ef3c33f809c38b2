"""The columns kernel fed by TMA (GemvConfig.ring_stages): W stored K×N (layout nn) with 4-byte values,
a few vectors stored M×K, on sm_90 and later.

The register-fed columns kernel (render._columns_body) holds each 64-byte quad step of W in registers
beside its 4·R sums; at 16 vectors that leaves one 512-thread block an SM with one step in flight a
thread, so every step waits on HBM for W and then on L2 for x (16×4096×4096 fp32 streamed at 77% of copy
back to back on an H100). Here the bytes in flight are set by a ring of shared-memory stages instead:

- one producer thread copies each stage with two TMA box copies: KT rows of the block's strip of W
  (STRIP = 4·TX outputs) and the same KT values of every vector, STAGES stages ahead of the
  consumers, each slot guarded by a `full` and an `empty` mbarrier;
- the consumer warps (THREADS threads: TX across the strip, TK along K) sum each stage from shared
  memory: thread (tx, tk) takes UNROLL quads of rows (4tk .. 4tk + 3, then 4(tk + TK) ..), its four
  outputs' values in one 16-byte read a row and each vector's four values at those rows in another;
- then the TK partial sums of each output meet: by shuffles inside a warp, then the warps' sums through
  the (idle) ring, in warp order (deterministic), and the epilogue writes D.

TMA fills what lies past W's or x's edge with zeros, so a partial last stage along K and a partial last
strip need no masking of the sums; only D's writes are bounded.
"""
from __future__ import annotations

from ...kernel_source import TensorMapArg
from ...spec import GemmSpec
from ..parts.ring import RING
from ..wgmma.ptx import BARRIERS, DESCRIPTOR, TMA, U64
from .config import PRODUCER_WARPS, GemvConfig, ring_stage_rows


def tensor_maps(spec: GemmSpec, config: GemvConfig) -> tuple[TensorMapArg, ...]:
    """x (= A, M×K) as boxes of KT values of every vector; W (= B, K×N) as boxes of KT rows of a strip."""
    kt = ring_stage_rows(config)
    return (TensorMapArg("tma_x", "A", "fp32", (spec.k, spec.m), (spec.k * 4,), (kt, spec.m), swizzle=0),
            TensorMapArg("tma_W", "B", "fp32", (spec.n, spec.k), (spec.n * 4,), (4 * config.threads_x, kt), swizzle=0))


def helpers() -> str:
    """The typedefs, barriers and TMA copies the kernel uses (shared with the wgmma family)."""
    return U64 + DESCRIPTOR + BARRIERS + TMA


def body(spec: GemmSpec, config: GemvConfig, entry: str, params: str, store: str, prefetch_stages: int) -> str:
    """The kernel: `params` its pointer parameters (the tensor maps follow), `store` the statement writing
    D[r, p] from `sum`, `prefetch_stages` the stages of W each block asks L2 for before the kernel ahead
    of it has finished (the dependent-launch start)."""
    return f"""constexpr int THREADS = {config.threads}, UNROLL = {config.unroll};  // consumer threads; quads a thread sums a stage
constexpr int TX = {config.threads_x}, TK = THREADS / TX;  // consumer threads across the strip × along K
constexpr int STRIP = 4 * TX;  // outputs a block owns: 4 a lane across
constexpr int KT = 4 * TK * UNROLL;  // rows of W (values of K) a stage holds
constexpr int STAGES = {config.ring_stages};  // slots of the ring
constexpr int CONSUMER_WARPS = THREADS / 32, PRODUCER_WARPS = {PRODUCER_WARPS};
constexpr int W_FLOATS = KT * STRIP, X_FLOATS = R * KT, SLOT_FLOATS = W_FLOATS + X_FLOATS;
constexpr int K_STAGES = (K + KT - 1) / KT;  // the last one may run past K: TMA fills zeros there
constexpr int PREFETCH_STAGES = {prefetch_stages};
{RING}
extern "C" __global__ void __launch_bounds__(THREADS + 32 * PRODUCER_WARPS) {entry}({params},
        const __grid_constant__ TmaDescriptor tma_x, const __grid_constant__ TmaDescriptor tma_W) {{
    extern __shared__ __align__(128) float ring[];  // STAGES slots: W[KT][STRIP], then x[R][KT]
    __shared__ __align__(8) u64 full[STAGES], empty[STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n0 = blockIdx.x * STRIP;  // the block's first output
    if (threadIdx.x == 0) {{
        for (int s = 0; s < STAGES; ++s) {{
            mbarrier_init(&full[s], 1);  // the producer's arrival, and the copies' bytes
            mbarrier_init(&empty[s], CONSUMER_WARPS);  // every consumer warp done reading the slot
        }}
        fence_barrier_init();
    }}
    // Dependent launch: the next kernel may start as our blocks retire; the first stages of our strip of W
    // go to L2 (a hint) while the kernel before ours finishes; nothing is read or written before it has.
    let_next_kernel_start();
    if (warp == CONSUMER_WARPS && lane == 0) {{
        tma_prefetch_descriptor(&tma_x);
        tma_prefetch_descriptor(&tma_W);
        for (int kt = 0; kt < PREFETCH_STAGES && kt < K_STAGES; ++kt) tma_prefetch_l2_2d(&tma_W, n0, kt * KT);
    }}
    __syncthreads();  // the barriers are initialised
    wait_for_previous_kernel();

    if (warp == CONSUMER_WARPS) {{  // the producer: one thread, STAGES stages ahead
        if (lane == 0) {{
            Ring at;
            for (int kt = 0; kt < K_STAGES; ++kt, at.advance()) {{
                mbarrier_wait(&empty[at.s], at.phase ^ 1);  // (the first lap finds every slot free)
                mbarrier_arrive_expect_tx(&full[at.s], SLOT_FLOATS * 4);
                float* slot = ring + at.s * SLOT_FLOATS;
                tma_load_2d(slot, &tma_W, &full[at.s], n0, kt * KT);
                tma_load_2d(slot + W_FLOATS, &tma_x, &full[at.s], kt * KT, 0);
            }}
        }}
        return;
    }}
    // The consumers: thread (tx, tk) owns outputs n0 + 4tx .. + 3.
    const int tx = lane % TX, tk = warp * (32 / TX) + lane / TX;
    float acc[R][4];
    #pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
    Ring at;
    for (int kt = 0; kt < K_STAGES; ++kt, at.advance()) {{
        mbarrier_wait(&full[at.s], at.phase);
        const float* w = ring + at.s * SLOT_FLOATS;
        const float* xs = w + W_FLOATS;
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {{
            const int q = tk + u * TK;  // acc[r][i] += Σ_j x_r[4q + j] · W[4q + j, n0 + 4tx + i]
            float4 wq[4];
            #pragma unroll
            for (int j = 0; j < 4; ++j) wq[j] = *reinterpret_cast<const float4*>(w + (4 * q + j) * STRIP + 4 * tx);
            #pragma unroll
            for (int r = 0; r < R; ++r) {{
                const float4 xq = *reinterpret_cast<const float4*>(xs + r * KT + 4 * q);  // a broadcast to the TX lanes
                acc[r][0] = fmaf(xq.w, wq[3].x, fmaf(xq.z, wq[2].x, fmaf(xq.y, wq[1].x, fmaf(xq.x, wq[0].x, acc[r][0]))));
                acc[r][1] = fmaf(xq.w, wq[3].y, fmaf(xq.z, wq[2].y, fmaf(xq.y, wq[1].y, fmaf(xq.x, wq[0].y, acc[r][1]))));
                acc[r][2] = fmaf(xq.w, wq[3].z, fmaf(xq.z, wq[2].z, fmaf(xq.y, wq[1].z, fmaf(xq.x, wq[0].z, acc[r][2]))));
                acc[r][3] = fmaf(xq.w, wq[3].w, fmaf(xq.z, wq[2].w, fmaf(xq.y, wq[1].w, fmaf(xq.x, wq[0].w, acc[r][3]))));
            }}
        }}
        __syncwarp();
        if (lane == 0) mbarrier_arrive(&empty[at.s]);  // the warp is done with this slot
    }}
    // Lanes tx, tx + TX, ... of a warp own the same outputs: their sums meet by shuffles.
    #pragma unroll
    for (int lanes = TX; lanes < 32; lanes *= 2)
        #pragma unroll
        for (int r = 0; r < R; ++r)
            #pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], lanes);
    // Then the warps' sums, through the ring: every stage has been read, so it is idle (named barrier 1:
    // the consumers only; the producer has left). bar.sync is .aligned, like __syncthreads: every consumer
    // thread runs these two (the only branch around them, the producer's return, is a whole warp's), and
    // ptxas reconverges each warp after the spin waits and lane branches before them.
    asm volatile("bar.sync 1, %0;" :: "r"(THREADS) : "memory");
    float* partial = ring;  // [CONSUMER_WARPS][R][STRIP]
    if (lane < TX)
        #pragma unroll
        for (int r = 0; r < R; ++r)
            *reinterpret_cast<float4*>(partial + (warp * R + r) * STRIP + 4 * tx) =
                make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    asm volatile("bar.sync 1, %0;" :: "r"(THREADS) : "memory");
    for (int idx = threadIdx.x; idx < R * STRIP; idx += THREADS) {{
        const int r = idx / STRIP, p = n0 + idx % STRIP;
        if (p < P) {{
            float sum = 0.0f;
            #pragma unroll 8
            for (int c = 0; c < CONSUMER_WARPS; ++c) sum += partial[(c * R + r) * STRIP + idx % STRIP];  // warp order
            {store}
        }}
    }}
}}
"""
