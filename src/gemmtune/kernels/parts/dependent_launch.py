"""The dependent-launch part: a kernel that overlaps its start with the end of the kernel before it.

Back to back on one stream, a kernel normally starts only once the one before it has finished: its
blocks are placed, its first loads go out and come back, while HBM, busy a moment ago, idles. For a
GEMV that streams 32 MB in ~14 µs that gap is a tenth of its time. With programmatic dependent launch
(sm_90 and later; the runtime launches with the programmatic-stream-serialization attribute):

- every block first lets the next kernel start (`griddepcontrol.launch_dependents`): once all of our
  blocks have said so, the next kernel's blocks are placed on SMs as ours retire;
- then asks L2 for the bytes its first step will load (a hint: L2 is where every SM's writes
  meet, so a value prefetched there before the previous kernel wrote it cannot be read stale). Only
  the first step, and at most a budget per block that the kernel sets: asking for a block's whole
  share at once (128 KB a block at 16×4096×4096) made the kernel 15-20% slower even when launched
  alone (H100, 2026-11-26);
- then waits for the previous kernel to finish and its writes to be visible (`griddepcontrol.wait`)
  before it reads or writes anything else.

Launched without the attribute (an older runtime, an export built without it) both instructions do
nothing, and the kernel is an ordinary one.
"""
from __future__ import annotations

from ..config_base import arch_number

MIN_ARCH = 90  # griddepcontrol: sm_90 and later

HELPERS = r"""// Programmatic dependent launch (sm_90+): no-ops unless the launch allowed it.
// The next kernel on this stream may start placing its blocks once every block of ours has called this.
__device__ __forceinline__ void let_next_kernel_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Returns once the kernel before ours on this stream has finished and its writes are visible to us.
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Ask L2 for the first `head` bytes of each of `rows` rows `pitch` bytes apart from `begin`, the block's
// threads taking one 128-byte line each in turn. Every address asked for lies inside those bytes (a
// row's last one is clamped to its last byte), so nothing outside the caller's array is touched.
__device__ __forceinline__ void prefetch_rows_to_l2(const void* begin, int rows, size_t pitch, size_t head) {
    const char* first = static_cast<const char*>(begin);
    const int lines = (int)((head + 127) / 128);  // per row
    for (int i = threadIdx.x; i < rows * lines; i += blockDim.x) {
        const int row = i / lines, line = i % lines;
        const char* at = first + row * pitch + min((size_t)line * 128, head - 1);
        asm volatile("prefetch.global.L2 [%0];" :: "l"(at));
    }
}
"""


def supported(arch: str) -> bool:
    """Whether kernels for `arch` can use it (griddepcontrol needs sm_90)."""
    return arch_number(arch) >= MIN_ARCH


def prologue(begin: str, rows: str, pitch: str, head: str, budget: int) -> str:
    """The kernel's first statements: let the next kernel start, prefetch the head of each of the
    block's rows of the streamed operand (C expressions: first row, row count, bytes between rows,
    bytes of each row its first step reads; at most `budget` bytes in all), wait for the previous
    kernel."""
    return f"""    // Dependent launch: the next kernel may start as our blocks retire; the first bytes this block
    // streams go to L2 while the kernel before ours finishes; nothing else is read or written before it has.
    let_next_kernel_start();
    const size_t prefetch_head = min((size_t)({head}), (size_t){budget} / ({rows}));  // bytes of each row
    prefetch_rows_to_l2({begin}, {rows}, {pitch}, prefetch_head);
    wait_for_previous_kernel();
"""
