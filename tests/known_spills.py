"""Spills the GPU machines' NVRTC (13.0, pinned in the test extra) makes where 13.5 makes none.

The no-spill tests compile with the NVRTC the kernels are measured with. These few kernels spill a little under it;
each is named here with its exact bytes, so a test fails when one spills more, less or not at all (then the entry
goes), and any kernel not named must not spill. Under another NVRTC every kernel must be spill-free.
"""
from __future__ import annotations

from gemmtune.compiler import nvrtc_version

# (family, case) -> (spill store + load bytes, stack frame bytes) under NVRTC 13.0; case: spec.short() [arch] [config].
SPILLS_UNDER_13_0: dict[tuple[str, str], tuple[int, int]] = {
    # (the mma ladder's warp_tiles step with an epilogue that reads C spilled 24 B here until its write-back read
    # each row's C before the row's stores, 2026-11-29)
    # the simt ladder's warptiling step (128 sums a thread) on odd edges, both operands bounds-checked
    ("simt", "127x129x131 nn fp32 sm_90 warptiling"): (32, 16),
    # 3xtf32 wgmma, the named cluster config with both operands transposed as they are split
    ("wgmma", "1000x776x332 tt fp32/3xtf32 bias_col+relu sm_90a 128x128_cluster2"): (88, 8),
}


def allowed(family: str, case: str) -> tuple[int, int]:
    """(spill bytes, stack bytes) the kernel must have: its entry under NVRTC 13.0, else none."""
    return SPILLS_UNDER_13_0.get((family, case), (0, 0)) if nvrtc_version() == "13.0" else (0, 0)
