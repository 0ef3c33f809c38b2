"""The staging copy: one small kernel that copies a config's staged operands (StagedOperand) into
their 128-byte-pitched workspaces before the GEMM, in one launch for both.

It replaces one cuMemcpy2DAsync per operand, which copied these rows at 1.0-1.6 TB/s on an H100 (half
what a plain copy kernel reaches; bench/results/2026-11-26-h100-staging.md). Each thread writes one
16-byte chunk of a workspace row with one aligned store. The source rows start wherever the caller's
layout puts them (2-byte steps for bf16 with an odd K), so a thread reads the two aligned 16-byte
chunks that hold its bytes and shifts them into place with funnel shifts; the neighbouring threads
read the same chunks, which L1 serves. A chunk that runs past the row's end carries the next row's
first bytes into the workspace's padding, which the tensor maps never read (their extents stop at the
row's end). Chunks whose aligned reads would leave the caller's array (its first and last 16 bytes)
read byte by byte instead, so nothing outside the array is touched.
"""
from __future__ import annotations

import math

from ...kernel_source import StagedOperand

THREADS = 256
CHUNK = 16  # bytes a thread writes


def stage_entry(entry: str) -> str:
    """The staging kernel's name beside GEMM kernel `entry`."""
    return f"{entry}_stage"


def chunks(staged: StagedOperand) -> int:
    """16-byte chunks of the workspace the copy writes: every row's bytes, rounded up to a chunk."""
    return staged.rows * math.ceil(staged.row_bytes / CHUNK)


def stage_grid(staged: tuple[StagedOperand, ...]) -> tuple[int, int, int]:
    return (max(1, math.ceil(sum(chunks(s) for s in staged) / THREADS)), 1, 1)


_HELPERS = r"""
// --- staging copy (kernels/parts/staging.py) ---------------------------------------------------
namespace staging {
// The 16 bytes that start `shift` bytes (0..15) into the 32 bytes lo:hi, as four words: word i is
// the funnel shift of words q+i and q+i+1 (q = shift / 4) by the remaining shift % 4 bytes.
template <int Q>
__device__ __forceinline__ uint4 window(const unsigned (&w)[8], unsigned bits) {
    return make_uint4(__funnelshift_r(w[Q], w[Q + 1], bits), __funnelshift_r(w[Q + 1], w[Q + 2], bits),
                      __funnelshift_r(w[Q + 2], w[Q + 3], bits), __funnelshift_r(w[Q + 3], w[Q + 4], bits));
}

__device__ __forceinline__ uint4 shifted(uint4 lo, uint4 hi, unsigned shift) {
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const unsigned bits = (shift & 3) * 8;
    switch (shift >> 2) {  // a switch, not w[shift / 4 + i]: indexing by a run-time value would put w in local memory
        case 0: return window<0>(w, bits);
        case 1: return window<1>(w, bits);
        case 2: return window<2>(w, bits);
        default: return window<3>(w, bits);
    }
}

// Chunk `chunk` of workspace row `row`: 16 bytes from the caller's rows (`row_bytes` apart, `total`
// bytes in all from `src`) to the workspace's (`pitch` apart).
__device__ __forceinline__ void copy_chunk(const unsigned char* src, unsigned char* dst, long long total,
                                           int row_bytes, int pitch, long long row, int chunk) {
    const unsigned char* from = src + row * row_bytes + chunk * 16;
    uint4* to = reinterpret_cast<uint4*>(dst + row * pitch + chunk * 16);
    const unsigned char* aligned = reinterpret_cast<const unsigned char*>(reinterpret_cast<size_t>(from) & ~size_t(15));
    if (aligned >= src && aligned + 32 <= src + total) {
        const uint4* at = reinterpret_cast<const uint4*>(aligned);
        *to = shifted(__ldg(at), __ldg(at + 1), static_cast<unsigned>(from - aligned));
        return;
    }
    // The array's first or last bytes: byte by byte, nothing read outside it (the rest of the chunk
    // is the workspace's padding, left as zeros).
    unsigned w[4] = {0u, 0u, 0u, 0u};
    for (int b = 0; b < 16; ++b)
        if (from + b < src + total) w[b >> 2] |= static_cast<unsigned>(from[b]) << ((b & 3) * 8);
    *to = make_uint4(w[0], w[1], w[2], w[3]);
}
}  // namespace staging
"""


def stage_kernel(entry: str, staged: tuple[StagedOperand, ...]) -> str:
    """The CUDA of the staging kernel for `staged` (A and/or B): its parameters are each staged
    operand's source then workspace, in `staged`'s order."""
    params = ", ".join(f"const unsigned char* __restrict__ {s.operand.lower()}_src, "
                       f"unsigned char* __restrict__ {s.operand.lower()}_dst" for s in staged)
    branches, start = [], 0
    for s in staged:
        per_row = math.ceil(s.row_bytes / CHUNK)
        end = start + chunks(s)
        branches.append(
            f"    if (i < {end}LL) {{  // {s.operand}: {s.rows} rows of {s.row_bytes} B to rows {s.pitch} B apart, "
            f"{per_row} chunks a row\n"
            f"        const long long j = i - {start}LL;\n"
            f"        staging::copy_chunk({s.operand.lower()}_src, {s.operand.lower()}_dst, {s.rows * s.row_bytes}LL, "
            f"{s.row_bytes}, {s.pitch}, j / {per_row}, static_cast<int>(j % {per_row}));\n"
            f"        return;\n    }}")
        start = end
    return (_HELPERS + f"""
// Copies the staged operands into their workspaces, one 16-byte chunk a thread, before {entry} runs.
extern "C" __global__ void __launch_bounds__({THREADS}) {stage_entry(entry)}({params}) {{
    const long long i = static_cast<long long>(blockIdx.x) * {THREADS} + threadIdx.x;
""" + "\n".join(branches) + "\n}\n")
