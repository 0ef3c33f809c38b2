"""Calling a compiled GEMM kernel on framework arrays (torch tensors, or cupy through __cuda_array_interface__).

Shared by `gemmtune.build(...)` kernels and `gemmtune.load(DIR)` exports, so both check shapes and
bind arguments the same way.
"""
from __future__ import annotations

from typing import Any

from .errors import SpecError
from .kernel_source import KernelSource
from .spec import GemmSpec


def operand_names(spec: GemmSpec) -> tuple[str, ...]:
    """Epilogue operands in the order they follow A and B in a call."""
    return tuple(op.name for op in spec.epilogue.operands())


def collect_operands(spec: GemmSpec, positional: tuple, named: dict[str, Any]) -> dict[str, Any]:
    names = operand_names(spec)
    if len(positional) > len(names):
        raise SpecError(f"{spec.short()} takes {len(names)} epilogue operand(s) ({', '.join(names) or 'none'}), "
                        f"got {len(positional)}")
    values = dict(zip(names, positional))
    for key, value in named.items():
        if key not in names:
            raise SpecError(f"unexpected operand '{key}' for epilogue {spec.epilogue}")
        if key in values:
            raise SpecError(f"operand '{key}' given twice")
        values[key] = value
    missing = [n for n in names if n not in values]
    if missing:
        raise SpecError(f"epilogue {spec.epilogue} needs operand(s) {', '.join(missing)}")
    return values


# Names of each storage type in the frameworks (cupy has no bfloat16).
_TORCH_TYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_CUPY_TYPES = {"fp32": "float32", "fp16": "float16"}


def empty_like_framework(example: Any, shape: tuple[int, int], dtype: str = "fp32") -> Any:
    """An output of storage type `dtype` (fp32, fp16, bf16) on the same device and framework as `example`."""
    module = type(example).__module__.split(".")[0]
    if module == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, _TORCH_TYPES[dtype]), device=example.device)
    if module == "cupy":
        import cupy
        if dtype not in _CUPY_TYPES:
            raise SpecError(f"cupy has no {dtype} arrays: pass torch tensors, or give out=")
        return cupy.empty(shape, dtype=getattr(cupy, _CUPY_TYPES[dtype]))
    raise SpecError("pass torch or cupy CUDA arrays, or give out=")


def bind(source: KernelSource, A: Any, B: Any, operands: dict[str, Any], out: Any) -> dict[str, int | float]:
    """Validate every array against the spec (shape and storage type per operand) and return
    {argument name: pointer or scalar}. Tensor-map parameters are not bound here: the runtime builds
    them from the pointer of the operand they describe."""
    from .runtime import pointer_of

    spec = source.spec
    shapes = {"A": spec.a_shape, "B": spec.b_shape, "D": (spec.m, spec.n)}
    for op in spec.epilogue.operands():
        shapes[op.name] = op.shape(spec.m, spec.n)
    arrays = {"A": A, "B": B, "D": out, **operands}
    bindings: dict[str, int | float] = {}
    for name in (n for n in source.args if n in arrays):
        if shapes[name] == ():
            bindings[name] = float(arrays[name])
        else:
            bindings[name] = pointer_of(arrays[name], shapes[name], name, spec.storage_dtype(name))
    for operand in (t.operand for t in source.tensor_maps if t.operand not in bindings):
        bindings[operand] = pointer_of(arrays[operand], shapes[operand], operand, spec.storage_dtype(operand))
    return bindings
