"""Capture the GEMMs a torch model runs as a gemmtune Workload (`gemmtune shapes from-torch`).

The model runs once under `torch.no_grad()` inside a TorchDispatchMode, which sees every aten op after
the composite ops (F.linear, torch.matmul, reshape) have decomposed. On CPU (torch 2.13) those are:

    nn.Linear, 2-D input   aten.t (weight) -> aten.addmm(bias, x, weight.t())   (aten.mm without bias)
    nn.Linear, 3-D input   aten.view -> aten.t -> aten.addmm -> aten.view
    torch.matmul 3-D @ 2-D aten.view -> aten.mm -> aten._unsafe_view
    torch.matmul 3-D @ 3-D aten.expand/aten.view -> aten.bmm -> aten._unsafe_view
    F.linear, non-contiguous 3-D input (attention projections)
                           aten.clone -> aten._unsafe_view -> aten.mm -> aten._unsafe_view -> aten.add(bias)

so the recorder handles mm, addmm, bmm, baddbmm (and _addmm_activation, which torch.compile emits),
reads each operand's layout from its strides, and fuses into a GEMM's epilogue what is applied
directly to its output (through views only): a bias add after a bare mm, then a ReLU or tanh-GELU.
Identical GEMMs are merged with a count; no time is measured, so every shape's share is None (the
workload then weights shapes by a roofline estimate × count).
"""
from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import SpecError
from .input_files import InputFileError
from .spec import GemmSpec
from .workload import Workload, WorkloadShape

if TYPE_CHECKING:
    import torch

# torch dtype name -> gemmtune dtype. fp32 stays fp32 even where torch allows tf32: the workload
# names what the model asks for; whether tf32 is acceptable is the user's call at tuning time.
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
_INPUT_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Ops that run GEMMs the recorder cannot express as GemmSpecs: named in a note so that a workload
# missing, say, its attention GEMMs says so.
_OPAQUE = ("mv", "addmv", "dot", "vdot", "addbmm", "convolution", "_scaled_dot_product",
           "_native_multi_head_attention", "_transformer_encoder_layer_fwd")
# Ops that only reinterpret a tensor's shape: an activation applied after one still applies to the
# GEMM's output element for element (nn.Linear on a 3-D input views its output back to 3-D).
_VIEWS = ("view", "_unsafe_view", "reshape")


@dataclass
class _Recorder:
    """What the dispatch mode saw: GEMMs in call order (one entry per call, batch size as count), and
    the output of the last one while the next op may still fuse into it."""

    calls: list[tuple[GemmSpec, int]] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)
    pending: Any = None  # the last GEMM's output (or a view of it), until another op runs

    def workload(self) -> Workload:
        counts: dict[GemmSpec, int] = {}  # insertion order: shapes in the order the model first ran them
        for spec, count in self.calls:
            counts[spec] = counts.get(spec, 0) + count
        return Workload(tuple(WorkloadShape(spec, count) for spec, count in counts.items()))

    def note_lines(self) -> list[str]:
        return [text if times == 1 else f"{text} ({times} calls)" for text, times in self.notes.items()]


def _layout_letter(shape: tuple[int, ...], stride: tuple[int, ...]) -> str:
    """'n' for a row-major matrix, 't' for the transposed view of one (a column-major matrix, e.g.
    weight.t()); anything else (padded, sliced) is recorded as 'n', the contiguous copy it would need."""
    rows, cols = shape[-2:]
    row_stride, col_stride = stride[-2:]
    if (cols == 1 or col_stride == 1) and (rows == 1 or row_stride == cols):
        return "n"
    if (rows == 1 or row_stride == 1) and (cols == 1 or col_stride == rows):
        return "t"
    return "n"


def _gemm_dtype(tensor: "torch.Tensor") -> str | None:
    return _DTYPES.get(str(tensor.dtype).removeprefix("torch."))


def _input_epilogue(shape: tuple[int, ...], m: int, n: int) -> str | None:
    """The epilogue op for addmm's `self` (broadcast to M×N): a bias per column, per row, or a full C.
    For baddbmm the batch dimension is dropped first."""
    shape = tuple(shape[-2:]) if len(shape) >= 2 else tuple(shape)
    if shape in ((n,), (1, n)):
        return "bias_col"
    if shape == (m, 1):
        return "bias_row"
    if shape == (m, n):
        return "add"
    return None


def _unit(kwargs: dict, name: str) -> bool:
    return kwargs.get(name, 1) == 1


def _gemm(rec: _Recorder, name: str, a: "torch.Tensor", b: "torch.Tensor", epilogue: list[str],
          out: "torch.Tensor") -> None:
    """Record A·B (2-D, or 3-D: one GEMM per batch) with `epilogue`; a note instead when gemmtune
    cannot express it."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    dtype = _gemm_dtype(a)
    if dtype is None:
        rec.notes[f"skipped aten.{name} {m}x{n}x{k}: {str(a.dtype).removeprefix('torch.')} operands "
                   f"(gemmtune covers float32, float16 and bfloat16)"] += 1
        return
    batch = a.shape[0] if a.dim() == 3 else 1
    layout = _layout_letter(tuple(a.shape), a.stride()) + _layout_letter(tuple(b.shape), b.stride())
    try:
        spec = GemmSpec(m, n, k, layout, dtype, "+".join(epilogue) or None)
    except SpecError as err:
        rec.notes[f"skipped aten.{name} {m}x{n}x{k}: {err}"] += 1
        return
    if batch < 1:
        return  # an empty batch runs no GEMM
    rec.calls.append((spec, batch))
    rec.pending = out


def _with_input(rec: _Recorder, name: str, args: tuple, kwargs: dict, out: "torch.Tensor",
                activation: str | None = None) -> None:
    """addmm / baddbmm / _addmm_activation: beta·self + alpha·(A·B). Only beta = alpha = 1 maps onto
    a gemmtune epilogue (bias or +C); otherwise the plain GEMM is recorded and a note says so."""
    c, a, b = args[:3]
    m, n = a.shape[-2], b.shape[-1]
    op = _input_epilogue(tuple(c.shape), m, n) if _unit(kwargs, "beta") and _unit(kwargs, "alpha") else None
    if op is None:
        rec.notes[f"aten.{name} {m}x{n}x{a.shape[-1]}: recorded as a plain A·B "
                   f"(self {tuple(c.shape)}, beta={kwargs.get('beta', 1)}, alpha={kwargs.get('alpha', 1)})"] += 1
    _gemm(rec, name, a, b, [x for x in (op, activation) if x], out)


def _addmm_activation(rec: _Recorder, args: tuple, kwargs: dict, out: "torch.Tensor") -> None:
    # Its GELU is the erf form on CPU (checked: it matches F.gelu, not approximate="tanh"), which is
    # not gemmtune's gelu, so only the ReLU form keeps its activation.
    if kwargs.get("use_gelu", False):
        rec.notes["aten._addmm_activation: GELU (erf form) not fused, recorded as its addmm"] += 1
    _with_input(rec, "_addmm_activation", args, kwargs, out, None if kwargs.get("use_gelu", False) else "relu")


def _record_gemm(rec: _Recorder, name: str, args: tuple, kwargs: dict, out: Any) -> bool:
    """Record the op if it is one of the GEMMs handled; False when it is not."""
    if name in ("mm", "bmm"):
        _gemm(rec, name, args[0], args[1], [], out)
    elif name in ("addmm", "baddbmm"):
        _with_input(rec, name, args, kwargs, out)
    elif name == "_addmm_activation":
        _addmm_activation(rec, args, kwargs, out)
    else:
        return False
    return True


def _fused_activation(name: str, args: tuple, kwargs: dict) -> str | None:
    """The epilogue op this activation call is, if gemmtune has it: relu, or gelu in its tanh form."""
    if name in ("relu", "relu_"):
        return "relu"
    approximate = args[1] if len(args) > 1 else kwargs.get("approximate", "none")
    return "gelu" if name in ("gelu", "gelu_") and approximate == "tanh" else None


def _fused_bias(rec: _Recorder, name: str, args: tuple, kwargs: dict) -> str | None:
    """"bias_col" when this op adds a length-N vector to a GEMM output that has no epilogue yet: F.linear
    on a non-contiguous 3-D input (every nn.MultiheadAttention projection) runs mm, then add(bias)."""
    spec = rec.calls[-1][0]
    if name not in ("add", "add_") or len(args) < 2 or not spec.epilogue.is_identity or not _unit(kwargs, "alpha"):
        return None
    out, bias = args[0], args[1]
    # The output is row-major, so while a view of it keeps N as its last dimension, the last index
    # is still the column; a bias of another dtype would promote D's type.
    matches = (getattr(bias, "shape", None) == (spec.n,) and out.shape[-1] == spec.n
               and bias.dtype == out.dtype)
    return "bias_col" if matches else None


def _fuse(rec: _Recorder, op: str) -> None:
    spec, count = rec.calls[-1]
    ops = [] if spec.epilogue.is_identity else [str(spec.epilogue)]
    fused = GemmSpec(spec.m, spec.n, spec.k, spec.layout, spec.dtype, "+".join(ops + [op]), spec.out_dtype)
    rec.calls[-1] = (fused, count)


def _observe(rec: _Recorder, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Look at one dispatched op (after it ran): fuse it into the pending GEMM, record it, or note it."""
    name = func.overloadpacket.__name__ if func.namespace == "aten" else ""
    follows_gemm = rec.pending is not None and bool(args) and args[0] is rec.pending
    if follows_gemm and name in _VIEWS:
        rec.pending = out  # a view of the GEMM's output: an activation on it may still fuse
        return
    rec.pending = None  # any op but a fusible one ends the chance to fuse
    if follows_gemm and _fused_bias(rec, name, args, kwargs):
        _fuse(rec, "bias_col")
        rec.pending = out  # an activation may follow the bias, as in Linear -> ReLU
        return
    activation = _fused_activation(name, args, kwargs) if follows_gemm else None
    if activation is not None:
        _fuse(rec, activation)
    elif not _record_gemm(rec, name, args, kwargs, out) and name.startswith(_OPAQUE):
        rec.notes[f"aten.{name}: its matrix products are not recorded (not a GEMM gemmtune can express)"] += 1


@functools.cache
def _mode_class() -> type:
    """The TorchDispatchMode subclass, made on first use so that importing this module needs no torch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CaptureMode(TorchDispatchMode):
        def __init__(self, recorder: _Recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            _observe(self.recorder, func, args, kwargs, out)
            return out

    return CaptureMode


def capture_with_notes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Workload, list[str]]:
    """Run `fn(*args, **kwargs)` without autograd and return the GEMMs it ran, plus one line per kind
    of op that was skipped or recorded only in part."""
    import torch

    recorder = _Recorder()
    # In eval mode without grad, nn.TransformerEncoderLayer and nn.MultiheadAttention take a "fast
    # path" that runs all their GEMMs inside one opaque op; turned off, they run visible mm/addmm.
    mha = getattr(torch.backends, "mha", None)
    fastpath = mha.get_fastpath_enabled() if mha is not None else None
    if mha is not None:
        mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), _mode_class()(recorder):
            fn(*args, **kwargs)
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(fastpath)
    return recorder.workload(), recorder.note_lines()


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Workload:
    """The GEMMs `fn(*args, **kwargs)` runs, as a Workload (see capture_with_notes)."""
    return capture_with_notes(fn, *args, **kwargs)[0]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _import_file(path: Path) -> Any:
    """Import the Python file at `path` as a module of its own; InputFileError when it cannot be."""
    name = "gemmtune_model_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputFileError(f"{path} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file may raise anything; report it in one line
        sys.modules.pop(name, None)
        raise InputFileError(f"importing {path} raised {_one_line(err)}") from None
    return module


def load_model_spec(text: str) -> Callable[..., Any]:
    """The callable named by "path/to/model.py:make_model"; InputFileError (one line) when the text,
    the file or the attribute is not usable."""
    file_part, colon, attribute = text.rpartition(":")
    if not colon or not file_part:
        raise InputFileError(f"cannot read model '{text}': write it as path/to/model.py:factory_name")
    if not attribute.isidentifier():
        raise InputFileError(f"cannot read model '{text}': '{attribute}' after the colon is not a Python name")
    path = Path(file_part)
    if not path.is_file():
        raise InputFileError(f"no such file: {path}" if not path.exists() else f"{path} is not a file")
    module = _import_file(path)
    if not hasattr(module, attribute):
        raise InputFileError(f"{path} has no attribute '{attribute}'")
    factory = getattr(module, attribute)
    if not callable(factory):
        raise InputFileError(f"{path}: '{attribute}' is a {type(factory).__name__}, not callable")
    return factory


_INPUT = re.compile(r"^\s*(\d+(?:\s*x\s*\d+)*)\s*(?::\s*(\w+)\s*)?$", re.IGNORECASE)


def _input_shape(text: str) -> tuple[tuple[int, ...], str]:
    """("2x16x4096:bf16") -> ((2, 16, 4096), "bf16"); SpecError (one line) for malformed text."""
    match = _INPUT.match(text)
    if not match:
        raise SpecError(f"cannot read input '{text}': write sizes joined by x and an optional dtype, "
                        f"e.g. 2x16x4096:bf16")
    dims = tuple(int(d) for d in re.split(r"\s*x\s*", match.group(1).lower()))
    dtype = (match.group(2) or "fp32").lower()
    if dtype not in _INPUT_DTYPES:
        raise SpecError(f"input '{text}': unknown dtype '{dtype}'; choose one of {', '.join(_INPUT_DTYPES)}")
    if min(dims) < 1:
        raise SpecError(f"input '{text}': every size must be at least 1")
    return dims, dtype


def parse_input(text: str, device: str = "cpu") -> "torch.Tensor":
    """A random tensor for input text such as "2x16x4096:bf16" (dtype fp32 when left out)."""
    import torch

    dims, dtype = _input_shape(text)
    return torch.randn(*dims, dtype=getattr(torch, _INPUT_DTYPES[dtype]), device=device)


def _build_model(model_spec: str, device: str) -> Callable[..., Any]:
    """The factory's result, in eval mode (no dropout: capture is of inference) on `device`."""
    import torch

    factory = load_model_spec(model_spec)
    try:
        model = factory()
    except Exception as err:  # noqa: BLE001 - user code; its failure is reported in one line
        raise InputFileError(f"calling {model_spec}() raised {_one_line(err)}") from None
    if isinstance(model, torch.nn.Module):
        model = model.to(device).eval()
    elif not callable(model):
        raise InputFileError(f"{model_spec}() returned a {type(model).__name__}, not a module or callable")
    return model


def from_torch(model_spec: str, inputs: list[str], device: str = "cpu") -> tuple[Workload, list[str]]:
    """Build the model of "model.py:factory", run it once on random inputs ("4x64", "2x16x4096:bf16")
    on `device`, and return its GEMMs with notes on what was skipped."""
    model = _build_model(model_spec, device)
    tensors = [parse_input(text, device) for text in inputs]
    try:
        workload, notes = capture_with_notes(model, *tensors)
    except Exception as err:  # noqa: BLE001 - the user's forward; a shape mismatch is the usual cause
        raise InputFileError(f"running {model_spec} on {' '.join(inputs) or 'no inputs'} raised "
                             f"{_one_line(err)}") from None
    if not workload.shapes:
        notes.append(f"{model_spec} ran no GEMM that gemmtune can record")
    return workload, notes
