"""Parts: pieces of generated CUDA written once and composed by every family's render.

A part is a Python constant or function that returns CUDA text (a device function, a struct, a few
named helpers) that more than one family emits. A family's render stitches parts together with its
own main loop; no family spells a part's CUDA itself, so a fix to a part reaches every kernel.

    cluster_barrier  cluster_arrive_relaxed / cluster_wait / cluster_sync: the cluster barrier without
              .aligned (a warp need not arrive converged)
    epilogue  apply_epilogue(v, row, col, <operands>), its definition and its call
    floats    16-bit float types, to_float / from_float / to_out / pack_pair, FloatView
    flags     acquire loads, release stores and the spin wait on a flag in global memory
    ring      a step along a ring of STAGES slots (slot index and mbarrier phase), and the
              phase-less ring of k-slices a cp.async pipeline walks (slot of slice kt)
    writeback a fragment's pairs of accumulators stored to D through the epilogue, guarded
"""
