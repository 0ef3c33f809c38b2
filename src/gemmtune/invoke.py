"""Calling a compiled GEMM kernel on framework arrays (torch or cupy, through __cuda_array_interface__).

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


def empty_like_framework(example: Any, shape: tuple[int, int]) -> Any:
    """A float32 output on the same device and framework as `example`."""
    module = type(example).__module__.split(".")[0]
    if module == "torch":
        import torch
        return torch.empty(shape, dtype=torch.float32, device=example.device)
    if module == "cupy":
        import cupy
        return cupy.empty(shape, dtype=cupy.float32)
    raise SpecError("pass torch or cupy CUDA arrays, or give out=")


def bind(source: KernelSource, A: Any, B: Any, operands: dict[str, Any], out: Any) -> dict[str, int | float]:
    """Validate every array against the spec and return {argument name: pointer or scalar}."""
    from .runtime import pointer_of

    spec = source.spec
    shapes = {"A": spec.a_shape, "B": spec.b_shape, "D": (spec.m, spec.n)}
    for op in spec.epilogue.operands():
        shapes[op.name] = op.shape(spec.m, spec.n)
    arrays = {"A": A, "B": B, "D": out, **operands}
    bindings: dict[str, int | float] = {}
    for name in source.args:
        if shapes[name] == ():
            bindings[name] = float(arrays[name])
        else:
            bindings[name] = pointer_of(arrays[name], shapes[name], name)
    return bindings
