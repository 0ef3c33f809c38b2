"""gemmtune inside PyTorch: kernels as torch operators (operators.py) and a whole model routed to them
where they are faster (optimize_model.py).

    import gemmtune.torch as gt
    y = gt.linear(x, w, b, activation="gelu")        # F.linear + activation, one kernel
    h = gt.gated_linear(x, gt.interleave_gate_up(w_gate, w_up))  # silu(x·Wgᵀ)·(x·Wuᵀ), one kernel (sm_90a)
    report = gt.optimize(model, example_inputs, budget=60)   # route nn.Linear layers that gemmtune runs faster
    y = gt.grouped_mm(x, w.transpose(1, 2), offs)    # torch._grouped_mm: every MoE expert in one launch
    experts = gt.GroupedLinear(8, 4096, 14336, activation="swiglu")  # experts(x_sorted, offs); optimize() routes it
    h = gt.grouped_mm(x, w13.transpose(1, 2), offs, activation="swiglu")  # w13 = cat([w_gate, w_up], dim=1)
    y = gt.grouped_mm_masked(x3, w.transpose(1, 2), counts)  # x3 (G, capacity, K), counts on the device
    y = gt.scaled_mm(a8, w8.t(), scale_a, scale_b)     # torch._scaled_mm: fp8 e4m3/e5m2, per tensor or rowwise
"""
from __future__ import annotations

from .experts import GroupedLinear
from .gated import deinterleave_gate_up, gated_linear, interleave_gate_up
from .grouped_calls import bmm, grouped_mm, grouped_mm_masked
from .operators import Linear, addmm, cached_kernels, gemm, install_kernel, kernel_for, linear, mm
from .optimize_model import OptimizeReport, optimize
from ..grouped.scaled_ops import scaled_grouped_mm, scaled_mm

__all__ = ["mm", "addmm", "linear", "Linear", "gemm", "kernel_for", "cached_kernels", "install_kernel", "grouped_mm",
           "grouped_mm_masked", "bmm", "scaled_mm", "scaled_grouped_mm", "optimize", "OptimizeReport", "GroupedLinear",
           "gated_linear", "interleave_gate_up", "deinterleave_gate_up"]
