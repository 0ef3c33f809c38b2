"""Calling a compiled GEMM kernel on framework arrays (torch tensors, or cupy through __cuda_array_interface__).

Shared by `gemmtune.build(...)` kernels and `gemmtune.load(DIR)` exports, so both check shapes, bind
arguments and pick the stream and GPU the same way: the kernel is enqueued on the caller's stream
(an explicit `stream=`, else the framework's current stream), never on the legacy stream 0 behind
the framework's back (a CUDA graph being captured on torch's stream would silently miss it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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


def _operand_shapes(spec: GemmSpec) -> dict[str, tuple[int, ...]]:
    shapes = {"A": spec.a_shape, "B": spec.b_shape, "D": (spec.m, spec.n)}
    for op in spec.epilogue.operands():
        shapes[op.name] = op.shape(spec.m, spec.n)
    return shapes


def _bound_names(source: KernelSource, given: Any) -> tuple[str, ...]:
    """The operands a call binds, in bind()'s order: the kernel's arguments among `given`, then the
    operands of its tensor maps."""
    names = [n for n in source.args if n in given]
    return tuple(names + [t.operand for t in source.tensor_maps if t.operand not in names])


def bind(source: KernelSource, A: Any, B: Any, operands: dict[str, Any], out: Any) -> dict[str, int | float]:
    """Validate every array against the spec (shape and storage type per operand) and return
    {argument name: pointer or scalar}. Tensor-map parameters are not bound here: the runtime builds
    them from the pointer of the operand they describe."""
    from .runtime import pointer_of

    spec = source.spec
    shapes = _operand_shapes(spec)
    arrays = {"A": A, "B": B, "D": out, **operands}
    bindings: dict[str, int | float] = {}
    for name in _bound_names(source, arrays):
        if shapes[name] == ():
            bindings[name] = float(arrays[name])
        else:
            bindings[name] = pointer_of(arrays[name], shapes[name], name, spec.storage_dtype(name))
    return bindings


@dataclass(frozen=True)
class TorchOperands:
    """What bind() checks of each operand, prepared once per kernel, so that a call with plain torch
    CUDA tensors checks each in a few attribute reads (bind()'s checks cost ~13 µs of Python a call).
    Anything else (cupy, DeviceBuffers, subclasses, a misfit) goes through bind(), which says what
    does not fit."""

    names: tuple[str, ...]  # bind()'s order
    shapes: tuple[tuple[int, ...], ...]  # () for a scalar (alpha, beta)
    dtypes: tuple[Any, ...]  # torch dtypes; None for a scalar

    @staticmethod
    def of(source: KernelSource) -> "TorchOperands":
        import torch

        spec = source.spec
        shapes = _operand_shapes(spec)
        names = _bound_names(source, shapes)
        types = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
        return TorchOperands(names, tuple(shapes[n] for n in names),
                             tuple(types[spec.storage_dtype(n)] if shapes[n] else None for n in names))

    def bindings(self, arrays: dict[str, Any]) -> dict[str, int | float] | None:
        """{argument name: pointer or scalar} when every array is a plain, row-major, 16-byte aligned
        torch CUDA tensor of its operand's type and shape; None otherwise (then bind() checks)."""
        from torch import Tensor
        from torch.nn import Parameter

        bound: dict[str, int | float] = {}
        for name, shape, dtype in zip(self.names, self.shapes, self.dtypes):
            x = arrays[name]
            if dtype is None:
                bound[name] = float(x)
                continue
            if (type(x) is not Tensor and type(x) is not Parameter) or not x.is_cuda or x.dtype is not dtype \
                    or x.shape != shape or not x.is_contiguous():
                return None
            pointer = x.data_ptr()
            if pointer % 16:
                return None
            bound[name] = pointer
        return bound


def framework_of(array: Any) -> str:
    """'torch', 'cupy', or the top-level module of whatever `array` is."""
    return type(array).__module__.split(".")[0]


def device_ordinal(array: Any) -> int:
    """The GPU `array` lives on (0 for arrays that do not say: DeviceBuffers, foreign interfaces)."""
    framework = framework_of(array)
    if framework == "torch" and getattr(array, "is_cuda", False):
        return int(array.device.index or 0)
    if framework == "cupy":
        return int(array.device.id)
    return 0


def stream_handle(stream: Any) -> int:
    """A raw CUstream from a torch.cuda.Stream, a cupy Stream, a cuda-bindings CUstream or an int."""
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream / ExternalStream; cupy Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise SpecError(f"stream= takes a torch or cupy stream, a CUstream or an int handle, "
                        f"not a {type(stream).__name__}") from None


def launch_stream(example: Any, stream: Any = None) -> int:
    """The stream a call on `example` (the A operand) is enqueued on: `stream` if given, else the
    current stream of the framework `example` belongs to (torch: of its device), else 0."""
    if stream is not None:
        return stream_handle(stream)
    framework = framework_of(example)
    if framework == "torch":
        return torch_current_stream(example.device.index)
    if framework == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def torch_current_stream(index: int | None) -> int:
    """The raw handle of torch's current stream on GPU `index` (None: the current GPU), without building
    a torch.cuda.Stream (~0.2 against ~4 µs a call on an H200)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if index is None:
        index = torch.cuda.current_device()
    if raw is not None:
        return int(raw(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


class BoundLaunches:
    """Bound launches (runtime.BoundLaunch: packed arguments, tensor maps, staging copies) by a call's key
    (its pointers, scalars and stream), at most `kept`, the oldest dropped first: a call whose key was
    seen before only enqueues. Shared by build() kernels, torch's launch plans and grouped kernels."""

    def __init__(self, kept: int = 64):
        self.kept = kept
        self._launches: dict[Any, Any] = {}
        self.find = self._launches.get  # the launch bound for a key, or None: a hit costs one dict lookup


    def get(self, key: Any, bind: Callable[[], Any]) -> Any:
        """The launch bound for `key`, bound by `bind()` on the first call with it."""
        bound = self._launches.get(key)
        if bound is None:
            bound = bind()
            if len(self._launches) >= self.kept:  # pop: another thread may have dropped it already
                self._launches.pop(next(iter(self._launches)), None)
            self._launches[key] = bound
        return bound

    def __len__(self) -> int:
        return len(self._launches)

    def __contains__(self, key: Any) -> bool:
        return key in self._launches


def launch_on(bound: Any, ordinal: int) -> None:
    """Enqueue `bound` (a runtime.BoundLaunch of a kernel loaded on GPU `ordinal`: it knows its stream),
    with that GPU's primary context current on this thread (torch's autograd threads may hold another)."""
    from .device import ensure_context

    ensure_context(ordinal)
    bound()
