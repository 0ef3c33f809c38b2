"""GroupedLinear: G stacked linear layers (an MoE layer's experts) run on tokens sorted by expert.

    experts = GroupedLinear(8, 4096, 14336, activation="swiglu")   # weight (8, 2·14336, 4096): gate rows, then up
    h = experts(x_sorted, offs)         # x (total_m, K) sorted by expert; offs (G,) int32 cumulative ends, on the device
    experts.use_gemmtune = True         # the same product in one gemmtune launch (sm_90a): grouped_calls.grouped_linear

The torch path is torch._grouped_mm(x, weight.transpose(1, 2), offs=offs), then + bias[g] on group g's rows and the
activation: relu, gelu (tanh form, as gemmtune's kernels compute it) or swiglu (silu(gate) * up of a weight whose
first N rows per group are the gate's and the next N up's: torch.cat([w_gate, w_up], dim=1)). Rows past offs[-1]
are what each path leaves there (uninitialised memory for gemmtune's kernel). Neither path reads offs on the host,
so a captured CUDA graph replays with whatever offs then hold, and both trace under torch.compile(fullgraph=True)
(gemmtune::grouped_linear is an operator with a fake implementation). The gemmtune path's eager call of a shape
seen before writes pointers and launches (grouped_calls.py); `gemmtune_config` is the kernel config optimize()
planned for the module (None: the spec's tuned config).

optimize() sets `use_gemmtune` where gemmtune's kernel is right and the block runs faster with it, and
`torch_under_compile` where the kernel lost inside CUDA graphs but the eager block still ran faster routed
(host time): under torch.compile such a module runs the torch path.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor, nn

from ..errors import SpecError
from .grouped_calls import grouped_linear

__all__ = ["GroupedLinear", "ACTIVATIONS", "torch_grouped_linear", "group_of_rows"]

ACTIVATIONS = ("relu", "gelu", "swiglu")  # as gemmtune.torch.grouped_mm takes them


def group_of_rows(offs: Tensor, rows: int) -> Tensor:
    """The group each of `rows` rows belongs to (rows past offs[-1]: the last group), computed on offs' device
    without reading it on the host: group g holds rows offs[g-1] .. offs[g]-1."""
    index = torch.arange(rows, device=offs.device, dtype=offs.dtype)
    return torch.bucketize(index, offs, right=True).clamp_(max=offs.shape[0] - 1)


def _activate(y: Tensor, activation: Optional[str]) -> Tensor:
    if activation is None:
        return y
    if activation == "relu":
        return torch.relu(y)
    if activation == "gelu":
        return nn.functional.gelu(y, approximate="tanh")
    half = y.shape[-1] // 2
    return nn.functional.silu(y[:, :half]) * y[:, half:]


def torch_grouped_linear(x: Tensor, weight: Tensor, offs: Tensor, bias: Optional[Tensor] = None,
                         activation: Optional[str] = None) -> Tensor:
    """What GroupedLinear's torch path computes: torch._grouped_mm(x, weight.transpose(1, 2), offs=offs), + bias[g]
    on group g's rows, then the activation (swiglu: silu of the first half of the columns times the second)."""
    y = torch._grouped_mm(x, weight.transpose(1, 2), offs=offs)
    if bias is not None:
        y = y + bias[group_of_rows(offs, x.shape[0])]
    return _activate(y, activation)


class GroupedLinear(nn.Module):
    """`groups` linear layers of in_features -> out_features, weight (G, N, K) stacked as nn.Linear stores each
    ((G, 2N, K) for swiglu: gate rows, then up), optional bias (G, N) (not with swiglu). forward(x, offs): x the
    tokens sorted by group (total_m, K), offs (G,) int32 cumulative row ends on x's device."""

    def __init__(self, groups: int, in_features: int, out_features: int, bias: bool = False,
                 activation: Optional[str] = None, device=None, dtype=None):
        super().__init__()
        if activation not in (None, *ACTIVATIONS):
            raise SpecError(f"GroupedLinear: activation {activation!r} unsupported; use None, {', '.join(ACTIVATIONS)}")
        if bias and activation == "swiglu":
            raise SpecError("GroupedLinear: swiglu takes no bias (as gemmtune's fused kernel)")
        self.groups, self.in_features, self.out_features, self.activation = groups, in_features, out_features, activation
        rows = 2 * out_features if activation == "swiglu" else out_features
        self.weight = nn.Parameter(torch.empty(groups, rows, in_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(groups, out_features, device=device, dtype=dtype)) if bias else None
        self.use_gemmtune = False  # run gemmtune's grouped kernel (optimize() sets it where it is faster)
        self.torch_under_compile = False  # with use_gemmtune: the torch path while torch.compile traces
        self.gemmtune_config: Optional[str] = None  # the kernel's GroupedConfig as JSON text (optimize()'s plan);
        # None: the spec's tuned config (the tuning database's fastest for its key, else the default)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation, each group alike: uniform in ±1/sqrt(in_features)."""
        bound = 1 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor, offs: Tensor) -> Tensor:
        if self.use_gemmtune and not (self.torch_under_compile and torch.compiler.is_compiling()):
            return grouped_linear(x, self.weight, offs, self.bias, self.activation, self.gemmtune_config)
        return torch_grouped_linear(x, self.weight, offs, self.bias, self.activation)

    def extra_repr(self) -> str:
        path = "gemmtune" + (", torch under torch.compile" if self.torch_under_compile else "") if self.use_gemmtune \
            else "torch"
        return (f"groups={self.groups}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation}, {path}")
