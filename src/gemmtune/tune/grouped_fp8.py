"""fp8 grouped candidates in the tuner (issue 70): their inputs, the float64 reference of sampled rows, and the
torch call timed beside them. Runs in the measuring child (grouped_measure.py), on the GPU.

Inputs: fp8 codes of values drawn uniformly in [-16, 16] (rounded to the format by torch's cast) and float32
scales drawn in [0.5, 1.5], shaped as the kernel reads them (GroupedSpec's docstring): tensor (1,) and (1,);
rowwise (total_m,) and (G, N); block (total_m, ceil(K/128)) and (G, ceil(N/128), ceil(K/128)). The reference is
grouped.spec.reference over the codes' exact values and those scales (the dequantized operands, in float64), and
the check verify.compare's bf16 tolerance, as tests/test_fp8_grouped.py's `_check_configs`.

torch's call, what a model without gemmtune would run (`torch_op` names it in the trial and the table):
- one group: torch._scaled_mm on the group's rows (tensor: one scale each; rowwise: (M, 1) and (1, N); block:
  its blockwise form (1x128 and 128x128 scales) where this torch accepts it and matches the reference, else per
  tensor with scales of one, which times the same fp8 GEMM without the block scales), bias given to it;
- several: torch._scaled_grouped_mm's rowwise form (tensor scales expanded to rows and columns; block: rowwise
  scales of one), + bias[group of the row];
then the activation. None where this torch or GPU runs none of these (the trial then has no torch time).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..fp8 import BLOCK
from ..grouped.spec import GroupedSpec, reference

CODE_RANGE = 16.0  # |values| drawn before the cast to fp8
TORCH_FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
TORCH_OUT = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def blocks(n: int) -> int:
    return -(-n // BLOCK)


def scale_shapes(spec: GroupedSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(scale_a's shape, scale_b's shape) as the kernel reads them for `spec.scaling`."""
    if spec.scaling == "tensor":
        return (1,), (1,)
    if spec.scaling == "rowwise":
        return (spec.total_m,), (spec.groups, spec.n)
    return (spec.total_m, blocks(spec.k)), (spec.groups, blocks(spec.n), blocks(spec.k))


def fp8_tensors(torch: Any, spec: GroupedSpec, gen: Any, device: Any) -> dict[str, Any]:
    """a (total_m, K) and w (G, N, K) fp8 codes, scale_a and scale_b float32, bias (G, N) of D's type."""
    fp8, out = getattr(torch, TORCH_FP8[spec.dtype]), getattr(torch, TORCH_OUT[spec.out_dtype])
    codes = lambda *shape: ((torch.rand(*shape, generator=gen, device=device) * 2 - 1) * CODE_RANGE).to(fp8)  # noqa: E731
    scales = lambda shape: torch.rand(*shape, generator=gen, device=device) + 0.5  # noqa: E731
    shape_a, shape_b = scale_shapes(spec)
    return {"a": codes(spec.total_m, spec.k), "w": codes(spec.groups, spec.n, spec.k),
            "scale_a": scales(shape_a), "scale_b": scales(shape_b),
            "bias": ((torch.rand(spec.groups, spec.n, generator=gen, device=device) * 2 - 1).to(out)
                     if spec.has_bias else None)}


def sample_reference(spec: GroupedSpec, tensors: dict, group: int, index: np.ndarray, on_device: Callable) -> np.ndarray:
    """float64 D of rows `index` (all in `group`): the one-group spec of those rows, their scales."""
    one = GroupedSpec(1, len(index), spec.n, spec.k, spec.dtype, spec.epilogue, out_dtype=spec.out_dtype,
                      scaling=spec.scaling)
    import torch

    rows = on_device(tensors["a"], index)
    codes = tensors["a"]
    a = codes.view(torch.uint8)[rows].view(codes.dtype).double().cpu().numpy()  # rows picked as bytes
    w = tensors["w"][group].double().cpu().numpy().T[None]  # (1, K, N)
    sa, sb = tensors["scale_a"], tensors["scale_b"]
    scale_a = sa if spec.scaling == "tensor" else sa[rows]
    scale_b = sb if spec.scaling == "tensor" else sb[group:group + 1]
    bias = tensors["bias"][group:group + 1].double().cpu().numpy() if spec.has_bias else None
    return reference(one, a, w, np.array([len(index)], dtype=np.int32), bias,
                     scale_a.double().cpu().numpy(), scale_b.double().cpu().numpy())


def launch_scales(tensors: dict) -> dict[str, int]:
    """The kernel's scale_a / scale_b keyword arguments."""
    return {"scale_a": tensors["scale_a"].data_ptr(), "scale_b": tensors["scale_b"].data_ptr()}


# --- torch's call -----------------------------------------------------------------------------------------
def torch_call(torch: Any, spec: GroupedSpec, rows: tuple[int, ...], tensors: dict,
               expected: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Callable[[], Any], str] | None:
    """(torch's call, its name in words) for an fp8 spec, or None where this torch runs none of them.
    `expected`: (row indices, float64 reference) of one sampled group of the one-group spec, which a blockwise
    _scaled_mm must match to be taken for one."""
    act = _activation(torch, spec)
    tries = _one_group(torch, spec, tensors, expected) if spec.groups == 1 else _grouped(torch, spec, rows, tensors)
    for call, name in tries:
        try:
            call()
            torch.cuda.synchronize()
        except (RuntimeError, TypeError, ValueError, NotImplementedError):  # not for these operands, torch or GPU
            continue
        return (lambda: act(call())) if act else call, name
    return None


def _activation(torch: Any, spec: GroupedSpec) -> Callable | None:
    table = {"relu": torch.relu, "gelu": lambda y: torch.nn.functional.gelu(y, approximate="tanh")}
    return next((table[op] for op in spec.epilogue.ops if op in table), None)


def _out(torch: Any, spec: GroupedSpec) -> Any:
    return getattr(torch, TORCH_OUT[spec.out_dtype])


def _one_group(torch: Any, spec: GroupedSpec, t: dict, expected: tuple | None) -> list[tuple[Callable, str]]:
    """torch._scaled_mm forms for one group, the first that runs wins."""
    if not hasattr(torch, "_scaled_mm"):
        return []
    a, b, out = t["a"], t["w"][0].t(), _out(torch, spec)
    bias = t["bias"][0] if spec.has_bias else None
    ones = torch.ones(1, 1, device=a.device)

    def mm(sa: Any, sb: Any) -> Callable[[], Any]:
        return lambda: torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out)
    if spec.scaling == "tensor":
        return [(mm(t["scale_a"].reshape(1, 1), t["scale_b"].reshape(1, 1)), "torch._scaled_mm per tensor")]
    if spec.scaling == "rowwise":
        return [(mm(t["scale_a"].reshape(-1, 1), t["scale_b"].reshape(1, -1)), "torch._scaled_mm rowwise")]
    sa, sb = t["scale_a"], t["scale_b"][0]  # (M, KB), (NB, KB)
    forms = [(sa, sb.t()), (sa.t().contiguous().t(), sb.t()), (sa.t().contiguous().t(), sb.t().contiguous()),
             (sa, sb), (sa.t().contiguous().t(), sb)]
    blockwise = [(_checked(torch, mm(x, y), expected, _activation(torch, spec)), "torch._scaled_mm blockwise (1x128, 128x128)")
                 for x, y in forms]
    return blockwise + [(mm(ones, ones), "torch._scaled_mm per tensor, scales of one (no blockwise form here)")]


def _checked(torch: Any, call: Callable[[], Any], expected: tuple | None, act: Callable | None) -> Callable[[], Any]:
    """`call`, which raises ValueError on its first run when it does not match `expected` (so that a form this
    torch reads another way is not timed as the blockwise one)."""
    state = {"checked": expected is None}

    def run() -> Any:
        d = call()
        if not state["checked"]:
            index, want = expected
            got = (act(d) if act else d)[torch.as_tensor(index, device=d.device)].double().cpu().numpy()
            scale = max(float(np.abs(want).max()), 1e-30)
            if not np.isfinite(got).all() or float(np.abs(got - want).max()) / scale > 0.05:
                raise ValueError("blockwise scales read differently")
            state["checked"] = True
        return d
    return run


def _grouped(torch: Any, spec: GroupedSpec, rows: tuple[int, ...], t: dict) -> list[tuple[Callable, str]]:
    """torch._scaled_grouped_mm's rowwise form, + bias of each row's group."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        return []
    a, wt, offs, out = t["a"], t["w"].transpose(1, 2), t["offs"], _out(torch, spec)
    if spec.scaling == "rowwise":
        sa, sb, name = t["scale_a"], t["scale_b"], "torch._scaled_grouped_mm rowwise"
    elif spec.scaling == "tensor":
        sa = t["scale_a"].expand(spec.total_m).contiguous()
        sb = t["scale_b"].expand(spec.groups, spec.n).contiguous()
        name = "torch._scaled_grouped_mm rowwise (the tensor scales expanded)"
    else:
        sa = torch.ones(spec.total_m, device=a.device)
        sb = torch.ones(spec.groups, spec.n, device=a.device)
        name = "torch._scaled_grouped_mm rowwise, scales of one (no block-scaled grouped form in torch)"
    group_of_row = torch.repeat_interleave(torch.arange(spec.groups, device=a.device), torch.tensor(rows, device=a.device))

    def call() -> Any:
        y = torch._scaled_grouped_mm(a, wt, sa, sb, offs=offs, out_dtype=out)
        return y + t["bias"][group_of_row] if spec.has_bias else y
    return [(call, name)]
