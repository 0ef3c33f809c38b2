"""Probe: how fast can *any* kernel stream a GEMV's bytes back to back? The ceiling for the M ≤ 16 bar.

    PYTHONPATH=src:bench python bench/probes/stream_read_ceiling.py [--shapes 1x1024x4096:bf16,...] [--out rows.md]

For each shape, a kernel with the GEMV's signature that only reads its streamed operand B (every byte once,
16-byte loads, `loads` in flight a thread, a grid-stride walk over `blocks` blocks of 256 threads) and writes
one D element per block (D is wrong: time only), with and without the dependent-launch prologue (let the next
kernel start, prefetch its first lines to L2, wait). Streamed exactly as bench_m1_stream streams the GEMV
(rotating operand sets, back to back); % is of the 1 GiB copy, with the GEMV's byte count (A, B and D once).
What it bounds: a GEMV reads at least those bytes, so no GEMV of the shape streams faster than the best row.

With --strips, the read pattern of the columns kernel instead (B stored K×N, read down its columns): each block
reads one strip of `strip` bytes of every row of one K-part of B, so blocks = (row bytes / strip) × parts; the
same blocks and loads in flight with wider strips tell whether the narrow strips themselves cost (DRAM pages
touched a few bytes at a time by many SMs) or the kernel around them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = "1x1024x4096:bf16,1x1024x4096:tf32,1x4096x4096:bf16,16x4096x4096:fp32"

KERNEL = r"""
typedef {in_t} in_t;
typedef {out_t} out_t;
extern "C" __global__ void __launch_bounds__(256) read_only(const in_t* __restrict__ A, const in_t* __restrict__ B,
                                                           out_t* __restrict__ D) {{
    const uint4* w = reinterpret_cast<const uint4*>(B);
    const size_t pieces = {pieces};  // 16-byte pieces of B
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
{prologue}    unsigned x = 0;
    for (; i + ({loads} - 1) * stride < pieces; i += {loads} * stride) {{
        uint4 v[{loads}];
        #pragma unroll
        for (int u = 0; u < {loads}; ++u)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {{%0, %1, %2, %3}}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(w + i + u * stride));
        #pragma unroll
        for (int u = 0; u < {loads}; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }}
    for (; i < pieces; i += stride) {{ const uint4 v = w[i]; x ^= v.x ^ v.y ^ v.z ^ v.w; }}
    if (x == 0x9e3779b9u) D[blockIdx.x] = (out_t)0.0f;  // keeps the loads; never true on random data
}}
"""

STRIP_KERNEL = r"""
typedef {in_t} in_t;
typedef {out_t} out_t;
constexpr size_t ROW = {row_pieces};  // 16-byte pieces in a row of B
constexpr int WIDTH = {width};  // 16-byte pieces of a block's strip of each row
constexpr int STRIPS = ROW / WIDTH;
constexpr int ROWS = {rows};  // rows in a block's K-part
extern "C" __global__ void __launch_bounds__(256) read_strips(const in_t* __restrict__ A, const in_t* __restrict__ B,
                                                             out_t* __restrict__ D) {{
    const uint4* w = reinterpret_cast<const uint4*>(B);
    const int strip = blockIdx.x % STRIPS, part = blockIdx.x / STRIPS;
    const uint4* first = w + (size_t)part * ROWS * ROW + (size_t)strip * WIDTH;
    constexpr int PIECES = ROWS * WIDTH;  // consecutive threads: along a strip's row, then the next row
    unsigned x = 0;
    int i = threadIdx.x;
    for (; i + ({loads} - 1) * 256 < PIECES; i += {loads} * 256) {{
        uint4 v[{loads}];
        #pragma unroll
        for (int u = 0; u < {loads}; ++u) {{
            const int j = i + u * 256;
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {{%0, %1, %2, %3}}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(first + (size_t)(j / WIDTH) * ROW + j % WIDTH));
        }}
        #pragma unroll
        for (int u = 0; u < {loads}; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }}
    for (; i < PIECES; i += 256) {{ const uint4 v = first[(size_t)(i / WIDTH) * ROW + i % WIDTH]; x ^= v.x ^ v.y ^ v.z ^ v.w; }}
    if (x == 0x9e3779b9u) D[blockIdx.x] = (out_t)0.0f;  // keeps the loads; never true on random data
}}
"""

PROLOGUE = r"""    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (i * 16 < pieces * 16) asm volatile("prefetch.global.L2 [%0];" :: "l"(reinterpret_cast<const char*>(B) + i * 16));
    asm volatile("griddepcontrol.wait;" ::: "memory");
"""


def _types(spec) -> dict[str, str]:
    """The read kernels' in_t and out_t for `spec` (16-bit values as raw shorts: they are only read)."""
    return {"in_t": {"bf16": "unsigned short", "fp16": "unsigned short", "tf32": "float", "fp32": "float"}[spec.dtype],
            "out_t": "float" if spec.out_dtype in ("fp32", "tf32") else "unsigned short"}


def source(spec, blocks: int, loads: int, early: bool):
    from gemmtune.kernel_source import KernelSource

    pieces = spec.n * spec.k * spec.element_bytes // 16
    code = KERNEL.format(**_types(spec), pieces=pieces, loads=loads, prologue=PROLOGUE if early else "")
    return KernelSource(code=code, entry="read_only", grid=(blocks, 1, 1), block=(256, 1, 1), args=("A", "B", "D"),
                        spec=spec, family="probe", family_version="0", dependent_launch=early)


def strip_source(spec, blocks: int, loads: int, strip: int):
    """The columns read pattern (see the module doc), or None where `strip` or the parts do not divide B."""
    from gemmtune.kernel_source import KernelSource

    row_bytes = spec.n * spec.element_bytes
    if strip % 16 or row_bytes % strip or blocks % (row_bytes // strip) or spec.k % (blocks // (row_bytes // strip)):
        return None
    parts = blocks // (row_bytes // strip)
    code = STRIP_KERNEL.format(**_types(spec), row_pieces=row_bytes // 16, width=strip // 16, rows=spec.k // parts,
                               loads=loads)
    return KernelSource(code=code, entry="read_strips", grid=(blocks, 1, 1), block=(256, 1, 1), args=("A", "B", "D"),
                        spec=spec, family="probe", family_version="0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--blocks", default="132,264,528,1056")
    parser.add_argument("--loads", default="4,8")
    parser.add_argument("--strips", default="", help="strip widths in bytes: the columns read pattern (module doc)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from bench_m1_stream import poisoned_sets, probe_context, probe_spec, time_ours, us, write_lines

    from gemmtune.compiler import compile_kernel

    context = probe_context(torch)
    stream, pct, arch = context.stream, context.pct, context.info.arch
    lines = context.head("Read-only stream ceiling for GEMV shapes", "bench/probes/stream_read_ceiling.py",
                         ["shape", "blocks × 256 threads", "loads in flight",
                          "strip of each row (bytes)" if args.strips else "dependent launch", "stream µs (% copy)",
                          "copy of the same bytes µs"], numeric=2)
    for item in args.shapes.split(","):
        spec = probe_spec(item)
        count, prepared, copy = context.operands(torch, spec)
        sets = poisoned_sets(torch, prepared, count)
        best = None
        for blocks in (int(b) for b in args.blocks.split(",")):
            for loads in (int(x) for x in args.loads.split(",")):
                variants = ([(f"{strip}", strip_source(spec, blocks, loads, int(strip)), False)
                             for strip in args.strips.split(",")] if args.strips else
                            [("yes" if early else "no", source(spec, blocks, loads, early), early) for early in (True, False)])
                for label, kernel, early in variants:
                    if kernel is None:
                        continue
                    seconds = time_ours(compile_kernel(kernel, arch), sets, stream, early).per_launch_s
                    best = seconds if best is None else min(best, seconds)
                    row = (f"| {spec.short()} | {blocks} | {loads} | {label} | {pct(spec, seconds)} "
                           f"| {us(copy.per_launch_s)} |")
                    print(row, flush=True)
                    lines.append(row)
        lines.append(f"| {spec.short()} | **best** | | | **{pct(spec, best)}** | |")
        print(lines[-1], flush=True)
        del sets
        torch.cuda.empty_cache()
    write_lines(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
