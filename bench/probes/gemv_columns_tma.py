"""Probe: the fp32 `nn` columns GEMV (B stored K×N, a few vectors) fed by TMA into a ring of shared-memory
stages, so the bytes of W in flight are set by the ring, not by registers.

    PYTHONPATH=src:bench python bench/probes/gemv_columns_tma.py [--shapes 16x4096x4096:fp32:nn] [--out rows.md]

Why: the CUDA-core columns kernel holds each 64-byte step of W in registers beside 64 sums a thread; at 16
vectors that leaves one 512-thread block an SM with one step in flight a thread, and every step waits on HBM
for W, then on L2 for x (16×4096×4096 fp32 streams at 77% of copy back to back; a read alone with one block
an SM in that pattern 80-83%, with 2-4 blocks an SM 91-95%). Here one producer thread copies each stage
(KT rows of the block's strip of W, and the same KT columns of every vector) with two TMA box copies, STAGES
stages ahead; consumer warps sum from shared memory. Optionally the vectors' part of a stage is multicast to a
cluster of blocks with neighbouring strips (each block copies 1/CLUSTER of the vectors for all).

Each variant is verified against the float64 reference (every streamed set's D) and streamed back to back with
the dependent-launch start (bench_m1_stream's protocol), beside the chooser's pick in the same run.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "16x4096x4096:fp32:nn"

KERNEL = r"""
constexpr int V = {vectors};        // vectors (rows of A, M)
constexpr int K = {k};
constexpr int N = {n};
constexpr int STRIP = {strip};      // outputs (columns of W) a block owns
constexpr int KT = {kt};            // rows of W (k) a stage holds
constexpr int STAGES = {stages};
constexpr int CWARPS = {cwarps};    // consumer warps; one producer warp after them
constexpr int CLUSTER = {cluster};  // blocks sharing each stage's vectors (multicast)
constexpr int TX = STRIP / 4;       // lanes across the strip, 4 outputs each
constexpr int TK = CWARPS * 32 / TX;  // consumer threads along k
constexpr int QUADS = KT / 4;       // 4-row steps in a stage
constexpr int W_FLOATS = KT * STRIP, X_FLOATS = V * KT, SLOT_FLOATS = W_FLOATS + X_FLOATS;
constexpr int X_ROWS_EACH = V / CLUSTER;  // vectors each block of a cluster copies for all
constexpr int KTILES = K / KT;
static_assert(K % KT == 0 && N % STRIP == 0 && QUADS % TK == 0 && V % CLUSTER == 0, "shape");

__device__ __forceinline__ u32 cluster_rank() {{ u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }}
__device__ __forceinline__ void cluster_sync() {{
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}}

extern "C" __global__ void {cluster_attr} __launch_bounds__((CWARPS + 1) * 32, 1)
gemv_columns_tma(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ D,
                 const __grid_constant__ TmaDescriptor tma_A, const __grid_constant__ TmaDescriptor tma_B) {{
    extern __shared__ __align__(128) float ring[];        // STAGES slots: W[KT][STRIP], then x[V][KT]
    __shared__ __align__(8) u64 full[STAGES], empty[STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n0 = blockIdx.x * STRIP;
    if (threadIdx.x == 0) {{
        for (int s = 0; s < STAGES; ++s) {{
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], CWARPS * CLUSTER);  // every consumer warp of every block reading the x we copy
        }}
        fence_barrier_init();
    }}
    let_next_kernel_start();
    if (warp == CWARPS && lane == 0) {{  // the first stages' W to L2 while the kernel before ours finishes
        tma_prefetch_descriptor(&tma_A); tma_prefetch_descriptor(&tma_B);
        for (int kt = 0; kt < {prefetch_stages} && kt < KTILES; ++kt) tma_prefetch_l2_2d(&tma_B, n0, kt * KT);
    }}
    if (CLUSTER > 1) cluster_sync(); else __syncthreads();
    wait_for_previous_kernel();

    if (warp == CWARPS) {{  // producer
        if (lane == 0) {{
            const u32 rank = CLUSTER > 1 ? cluster_rank() : 0;
            int s = 0; u32 phase = 0;
            for (int kt = 0; kt < KTILES; ++kt) {{
                mbarrier_wait(&empty[s], phase ^ 1);
                mbarrier_arrive_expect_tx(&full[s], SLOT_FLOATS * 4);
                float* slot = ring + s * SLOT_FLOATS;
                tma_load_2d(slot, &tma_B, &full[s], n0, kt * KT);
                if (CLUSTER > 1)
                    tma_load_2d_multicast(slot + W_FLOATS + rank * X_ROWS_EACH * KT, &tma_A, &full[s], kt * KT,
                                          rank * X_ROWS_EACH, (unsigned short)((1u << CLUSTER) - 1));
                else
                    tma_load_2d(slot + W_FLOATS, &tma_A, &full[s], kt * KT, 0);
                if (++s == STAGES) {{ s = 0; phase ^= 1; }}
            }}
        }}
    }} else {{  // consumers: lane (tx, tk) sums outputs n0 + 4 tx .. + 3 over the stage's quads tk, tk + TK, ...
        const int tx = lane % TX, tk = warp * (32 / TX) + lane / TX;
        float acc[V][4];
        #pragma unroll
        for (int v = 0; v < V; ++v) acc[v][0] = acc[v][1] = acc[v][2] = acc[v][3] = 0.f;
        int s = 0; u32 phase = 0;
        for (int kt = 0; kt < KTILES; ++kt) {{
            mbarrier_wait(&full[s], phase);
            const float* w = ring + s * SLOT_FLOATS;
            const float* x = w + W_FLOATS;
            #pragma unroll
            for (int i = 0; i < QUADS / TK; ++i) {{
                const int q = tk + i * TK;
                float4 wr[4];
                #pragma unroll
                for (int r = 0; r < 4; ++r) wr[r] = *reinterpret_cast<const float4*>(w + (4 * q + r) * STRIP + 4 * tx);
                #pragma unroll
                for (int v = 0; v < V; ++v) {{
                    const float4 xv = *reinterpret_cast<const float4*>(x + v * KT + 4 * q);
                    acc[v][0] = fmaf(xv.w, wr[3].x, fmaf(xv.z, wr[2].x, fmaf(xv.y, wr[1].x, fmaf(xv.x, wr[0].x, acc[v][0]))));
                    acc[v][1] = fmaf(xv.w, wr[3].y, fmaf(xv.z, wr[2].y, fmaf(xv.y, wr[1].y, fmaf(xv.x, wr[0].y, acc[v][1]))));
                    acc[v][2] = fmaf(xv.w, wr[3].z, fmaf(xv.z, wr[2].z, fmaf(xv.y, wr[1].z, fmaf(xv.x, wr[0].z, acc[v][2]))));
                    acc[v][3] = fmaf(xv.w, wr[3].w, fmaf(xv.z, wr[2].w, fmaf(xv.y, wr[1].w, fmaf(xv.x, wr[0].w, acc[v][3]))));
                }}
            }}
            __syncwarp();
            if (CLUSTER > 1) {{  // the x we read came from every block of the cluster: free the slot in each
                if (lane < CLUSTER) mbarrier_arrive_cluster(&empty[s], lane);
            }} else if (lane == 0) mbarrier_arrive(&empty[s]);
            if (++s == STAGES) {{ s = 0; phase ^= 1; }}
        }}
        // Lanes tx, tx + TX, ... of a warp own the same outputs: shuffle their sums together.
        #pragma unroll
        for (int off = TX; off < 32; off *= 2)
            #pragma unroll
            for (int v = 0; v < V; ++v)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[v][j] += __shfl_xor_sync(0xffffffffu, acc[v][j], off);
        // Then the warps' sums through shared memory (the ring is idle: every stage has been read).
        asm volatile("bar.sync 1, %0;" :: "r"(CWARPS * 32) : "memory");
        float* partial = ring;  // [CWARPS][V][STRIP]
        if (lane < TX)
            #pragma unroll
            for (int v = 0; v < V; ++v)
                *reinterpret_cast<float4*>(partial + (warp * V + v) * STRIP + 4 * tx) =
                    make_float4(acc[v][0], acc[v][1], acc[v][2], acc[v][3]);
        asm volatile("bar.sync 1, %0;" :: "r"(CWARPS * 32) : "memory");
        for (int i = threadIdx.x; i < V * STRIP; i += CWARPS * 32) {{
            float sum = 0.f;
            #pragma unroll
            for (int c = 0; c < CWARPS; ++c) sum += partial[c * V * STRIP + i];
            D[(size_t)(i / STRIP) * N + n0 + i % STRIP] = sum;
        }}
    }}
    if (CLUSTER > 1) cluster_sync();  // no block leaves while another may still arrive on its barriers
}}
"""


@dataclass(frozen=True)
class Variant:
    strip: int
    kt: int
    stages: int
    cwarps: int
    cluster: int = 1
    prefetch_stages: int = 2

    def describe(self) -> str:
        return (f"strip {self.strip}, {self.kt} k a stage, {self.stages} stages, {self.cwarps}+1 warps"
                + (f", x multicast over {self.cluster}" if self.cluster > 1 else "") + f", L2 prefetch {self.prefetch_stages}")

    def smem(self, m: int) -> int:
        return self.stages * (self.kt * self.strip + m * self.kt) * 4

    def fits(self, spec) -> bool:
        tx = self.strip // 4
        tk = self.cwarps * 32 // tx
        return (32 % tx == 0 and spec.k % self.kt == 0 and spec.n % self.strip == 0 and (self.kt // 4) % tk == 0
                and spec.m % self.cluster == 0 and (spec.n // self.strip) % self.cluster == 0
                and self.smem(spec.m) <= 220 * 1024 and self.kt <= 256)


def source(spec, variant: Variant):
    from gemmtune.kernel_source import KernelSource, TensorMapArg
    from gemmtune.kernels.parts.dependent_launch import HELPERS
    from gemmtune.kernels.wgmma.ptx import BARRIERS, PRELUDE, TMA

    m, n, k = spec.m, spec.n, spec.k
    cluster_attr = f"__cluster_dims__({variant.cluster}, 1, 1)" if variant.cluster > 1 else ""
    code = PRELUDE + BARRIERS + TMA + HELPERS + KERNEL.format(
        vectors=m, k=k, n=n, strip=variant.strip, kt=variant.kt, stages=variant.stages, cwarps=variant.cwarps,
        cluster=variant.cluster, cluster_attr=cluster_attr, prefetch_stages=variant.prefetch_stages)
    maps = (TensorMapArg("tma_A", "A", "fp32", (k, m), (k * 4,), (variant.kt, m // variant.cluster), swizzle=0),
            TensorMapArg("tma_B", "B", "fp32", (n, k), (n * 4,), (variant.strip, variant.kt), swizzle=0))
    return KernelSource(code=code, entry="gemv_columns_tma", grid=(n // variant.strip, 1, 1),
                        block=((variant.cwarps + 1) * 32, 1, 1), args=("A", "B", "D", "tma_A", "tma_B"), spec=spec,
                        family="probe", family_version="0", dynamic_smem=variant.smem(m), tensor_maps=maps,
                        arch_specific=True, dependent_launch=True, cluster_blocks=variant.cluster)


def variants(grid: str) -> list[Variant]:
    if grid:  # "strip,kt,stages,cwarps[,cluster[,prefetch]];..."
        return [Variant(*(int(v) for v in item.split(","))) for item in grid.split(";")]
    out = []
    for strip, kt, stages, cwarps in itertools.product((32, 16), (64, 128), (3, 4, 6, 8), (4, 8)):
        out.append(Variant(strip, kt, stages, cwarps))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--grid", default="", help="'strip,kt,stages,cwarps[,cluster[,prefetch_stages]];...'")
    parser.add_argument("--compile-only", action="store_true", help="build every variant (no GPU) and stop")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from gemmtune.compiler import compile_kernel

    if args.compile_only:
        from bench_m1_stream import probe_spec
        for item in args.shapes.split(","):
            spec = probe_spec(item)
            for variant in variants(args.grid):
                if variant.fits(spec):
                    compiled = compile_kernel(source(spec, variant), "sm_90a")
                    print(spec.short(), variant.describe(), compiled.resources.summary() if compiled.resources else "", flush=True)
        return 0

    import torch
    from bench_m1_stream import probe_context, probe_spec, stream_checked, us, write_lines

    import gemmtune
    from gemmtune.chooser import choose

    context = probe_context(torch)
    stream, pct = context.stream, context.pct
    lines = context.head("gemv columns kernel fed by TMA, streamed back to back", "bench/probes/gemv_columns_tma.py",
                         ["shape", "kernel", "stream µs (% copy)", "copy of the same bytes µs", "verified"], numeric=2)
    for item in args.shapes.split(","):
        spec = probe_spec(item)
        count, prepared, copy = context.operands(torch, spec)
        pick = choose(spec, "sm_90a").config
        rows = []
        built = [("pick: " + pick.describe(), gemmtune.build(spec, config=pick).compiled)]
        for variant in variants(args.grid):
            if variant.fits(spec):
                built.append((variant.describe(), compile_kernel(source(spec, variant), context.info.arch)))
        for label, compiled in built:
            try:
                timing, verdict = stream_checked(torch, compiled, prepared, count, stream, "stream")
                seconds = timing.per_launch_s
            except Exception as error:  # a variant that fails to launch is a row, not the end of the probe
                seconds, verdict = None, f"; failed: {str(error).splitlines()[0][:120]}"
            rows.append((seconds or 1.0, f"| {spec.short()} | {label} | {pct(spec, seconds)} | {us(copy.per_launch_s)} "
                                         f"| {'ok' if not verdict else verdict} |"))
            print(rows[-1][1], flush=True)
        lines += [row for _, row in sorted(rows)]
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
