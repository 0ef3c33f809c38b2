"""``gemmtune.load(DIR)``: an exported folder as a Python callable on torch / cupy CUDA arrays.

Loading needs no generator: kernel.json and kernel_source.json say what the cubin computes and how
to launch it, and the cubin goes to the GPU through gemmtune.runtime.LoadedKernel. When the cubin
cannot run on the present GPU (another generation), the saved source is recompiled with NVRTC.

A grouped export (kernel.json has a `grouped` field: export/grouped.py) loads as an ExportedGrouped, a callable on
torch CUDA tensors taking what its launcher takes: fn(A, B, offs|counts, [bias], [scale_a, scale_b]) -> D. Its
kernel runs on sm_90a GPUs only (wgmma, TMA); elsewhere load refuses in one line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler import ARCHES, CompiledKernel, compile_kernel
from ..errors import GemmtuneError, LaunchError, SpecError
from ..input_files import InputFileError, decode, read_bytes
from ..kernel_source import KernelSource
from ..spec import GemmSpec
from .manifest import KERNEL_SOURCE, ExportManifest, read_manifest


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise InputFileError(f"{path.parent} is an incomplete export: {path.name} is missing")
    return read_bytes(path, "part of an export")


def _read_cubin(path: Path) -> bytes:
    """The export's cubin: an ELF image (a damaged one would be handed to the driver otherwise)."""
    cubin = _read_bytes(path)
    if not cubin.startswith(b"\x7fELF"):
        raise InputFileError(f"{path} is not a cubin (no ELF header): re-export the kernel")
    return cubin


def read_source(folder: Path, manifest: ExportManifest) -> KernelSource:
    """kernel_source.json, checked against kernel.json."""
    try:
        text = decode(_read_bytes(Path(folder) / KERNEL_SOURCE), str(Path(folder) / KERNEL_SOURCE), "a kernel source")
        source = KernelSource.from_json(json.loads(text))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(f"{Path(folder) / KERNEL_SOURCE} is damaged: {exc}") from None
    if source.entry != manifest.entry or source.spec != manifest.spec:
        raise InputFileError(f"{folder}: {KERNEL_SOURCE} ({source.entry}) does not match kernel.json ({manifest.entry})")
    return source


def compiled_from_folder(folder: Path) -> tuple[ExportManifest, CompiledKernel]:
    """The export's manifest and its cubin as a CompiledKernel (no GPU, no compiler needed)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    source = read_source(folder, manifest)
    cubin = _read_cubin(folder / manifest.files["cubin"])
    ptx_path = folder / manifest.files["ptx"]
    ptx = decode(_read_bytes(ptx_path), str(ptx_path), "PTX text")
    compiled = CompiledKernel(source=source, arch=manifest.arch, cubin=cubin, ptx=ptx, resources=manifest.resources,
                              log="", compile_seconds=0.0, nvrtc_version=manifest.nvrtc_version)
    return manifest, compiled


def for_device(compiled: CompiledKernel, info: Any) -> CompiledKernel:
    """`compiled` when its cubin runs on GPU `info`, else the same source recompiled for that GPU."""
    from ..runtime import arch_problem

    if arch_problem(compiled.arch, info) is None:
        return compiled
    if info.arch not in ARCHES:
        raise LaunchError(f"the export was built for {compiled.arch} and cannot be recompiled for {info.arch}")
    return compile_kernel(compiled.source, info.arch)


@dataclass(frozen=True)
class ExportedGemm:
    """A loaded export. Call it like a `gemmtune.build` kernel: gemm(A, B, *operands, out=None)."""

    path: Path
    manifest: ExportManifest
    compiled: CompiledKernel  # what runs: the exported cubin, or its recompilation for this GPU
    kernel: Any  # gemmtune.runtime.LoadedKernel
    ordinal: int = 0  # the GPU it is loaded on

    @property
    def spec(self) -> GemmSpec:
        return self.manifest.spec

    def __call__(self, A: Any, B: Any, *operands: Any, out: Any = None, stream: Any = None, **named: Any) -> Any:
        """Enqueue D = epilogue(A·B) and return D (`out`, or a new array like A): on `stream` when
        given, else on the current stream of A's framework (torch or cupy)."""
        from ..invoke import bind, collect_operands, device_ordinal, empty_like_framework, launch_on, launch_stream

        values = collect_operands(self.spec, operands, named)
        if out is None:
            out = empty_like_framework(A, (self.spec.m, self.spec.n), self.spec.out_dtype)
        ordinal = device_ordinal(A)
        if ordinal != self.ordinal:
            raise SpecError(f"this export was loaded on GPU {self.ordinal}, but A is on GPU {ordinal}: "
                            f"gemmtune.load(path, ordinal={ordinal})")
        launch_on(self.kernel.bind(bind(self.compiled.source, A, B, values, out), launch_stream(A, stream)), ordinal)
        return out

    def __repr__(self) -> str:
        return f"ExportedGemm({self.manifest.name}: {self.spec.short()}, {self.compiled.arch}, from {self.path})"


def load(path: str | Path, ordinal: int = 0) -> "ExportedGemm | ExportedGrouped":
    """Load the export folder `path` onto GPU `ordinal` (a grouped export: an ExportedGrouped)."""
    from ..device import query_device
    from ..runtime import LoadedKernel

    manifest, compiled = compiled_from_folder(Path(path))
    grouped = grouped_spec_of(Path(path), manifest)
    info = query_device(ordinal)
    if grouped is not None:
        if info.cc != (9, 0):
            raise LaunchError(f"{manifest.name} is a grouped GEMM kernel for sm_90a (wgmma, TMA); GPU {ordinal} "
                              f"({info.name}) is {info.arch}: it cannot run there")
        gemm = bool(raw_grouped(Path(path)).get("gemm", False))
        return ExportedGrouped(Path(path), manifest, grouped, compiled, LoadedKernel(compiled, ordinal), ordinal, gemm)
    compiled = for_device(compiled, info)
    return ExportedGemm(Path(path), manifest, compiled, LoadedKernel(compiled, ordinal), ordinal)


# --- grouped exports ------------------------------------------------------------------------------------
def grouped_spec_of(folder: Path, manifest: ExportManifest) -> Any:
    """The GroupedSpec of kernel.json's `grouped` field, or None for a single-GEMM export; InputFileError (one
    line) where the field is damaged or does not match the kernel."""
    from ..grouped.spec import GroupedSpec
    from .grouped import GROUPED_KEY
    from .manifest import MANIFEST

    data = raw_grouped(folder)
    if data is None:
        return None
    try:
        spec = GroupedSpec(data["groups"], data["total_m"], data["n"], data["k"], data["dtype"], data["epilogue"],
                           data["swiglu"], data["layout"], data.get("out_dtype", ""), data.get("scaling", "none"))
    except (KeyError, TypeError, ValueError, GemmtuneError) as exc:
        raise InputFileError(f"{folder / MANIFEST}: its '{GROUPED_KEY}' field is damaged: {exc}") from None
    if spec.as_gemm() != manifest.spec:
        raise InputFileError(f"{folder / MANIFEST}: its '{GROUPED_KEY}' field ({spec.slug()}) does not match the "
                             f"kernel's spec ({manifest.spec.short()})")
    return spec


def raw_grouped(folder: Path) -> Any:
    """kernel.json's `grouped` field as stored (None: a single-GEMM export)."""
    from ..input_files import read_json_object
    from .grouped import GROUPED_KEY
    from .manifest import MANIFEST

    data = read_json_object(folder / MANIFEST, "an export's manifest").get(GROUPED_KEY)
    if data is not None and not isinstance(data, dict):
        raise InputFileError(f"{folder / MANIFEST}: its '{GROUPED_KEY}' field is damaged (not an object)")
    return data


TORCH_TYPES = {"bf16": "bfloat16", "fp16": "float16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


@dataclass(frozen=True)
class ExportedGrouped:
    """A loaded grouped export: fn(A, B, offs|counts, [bias], [scale_a, scale_b], out=None, stream=None) -> D,
    on torch CUDA tensors shaped as torch._grouped_mm / torch._scaled_grouped_mm take them: A (total_m, K), B the
    (G, K, N) view of weights stored (G, N, K) (SwiGLU: (G, K, 2N)), offs (G,) int32 on the GPU (masked layout:
    counts), bias (G, N) of D's type, fp8 scales float32 shaped per scaling (scale_shapes). D (total_m, N): rows no
    group holds are left as they were in `out` (a new tensor: unset).

    gemm (an fp8 GEMM exported by `gemmtune export`, one group): torch._scaled_mm's operands instead,
    fn(A, B, [bias], scale_a, scale_b): A (M, K), B (K, N) the view of weights stored (N, K), bias (N,), scales of
    one element each, M and N (rowwise), or (M, ceil(K/128)) and (ceil(N/128), ceil(K/128)) (block)."""

    path: Path
    manifest: ExportManifest
    spec: Any  # GroupedSpec
    compiled: CompiledKernel
    kernel: Any  # gemmtune.runtime.LoadedKernel
    ordinal: int = 0
    gemm: bool = False  # an fp8 GEMM's export: torch._scaled_mm's operands, no group rows
    bound: Any = field(default=None, compare=False)
    rows: dict = field(default_factory=dict, compare=False)  # gemm: the device copy of M, made on the first call

    def __post_init__(self) -> None:
        from ..invoke import BoundLaunches

        if self.bound is None:
            object.__setattr__(self, "bound", BoundLaunches())

    def operand_names(self) -> tuple[str, ...]:
        """The positional operands after A and B, in the launcher's order."""
        spec = self.spec
        rows = () if self.gemm else (spec.rows_operand,)
        return (*rows, *(("bias",) if spec.has_bias else ()), *(("scale_a", "scale_b") if spec.fp8 else ()))

    def __call__(self, A: Any, B: Any, *operands: Any, out: Any = None, stream: Any = None, **named: Any) -> Any:
        from ..grouped.launch import launch_bound
        from ..invoke import launch_stream

        values = self._operands(operands, named)
        torch = _torch_of(A)
        if self.gemm:
            B, values = self._as_one_group(torch, A, B, values)
        self._check(torch, A, B, values)
        if out is None:
            out = torch.empty(self.spec.total_m, self.spec.n, dtype=getattr(torch, TORCH_TYPES[self.spec.out_dtype]),
                              device=A.device)
        self._check_tensor(torch, "out", out, (self.spec.total_m, self.spec.n), self.spec.out_dtype)
        bindings = {"A": A.data_ptr(), "B": B.data_ptr(), "offs": values[self.spec.rows_operand].data_ptr(),
                    "D": out.data_ptr()}
        bindings.update({name: values[name].data_ptr() for name in ("bias", "scale_a", "scale_b") if name in values})
        launch_bound(self.kernel, self.bound, bindings, launch_stream(A, stream), self.ordinal)
        return out

    def _as_one_group(self, torch: Any, A: Any, B: Any, values: dict) -> tuple[Any, dict]:
        """torch._scaled_mm's B (K, N) and bias (N,) as the one group's (1, K, N) and (1, N), and the row count."""
        if not isinstance(B, torch.Tensor) or B.dim() != 2:
            raise SpecError(f"{self.manifest.name}: B must be a (K, N) torch tensor (the view of weights stored (N, K))")
        if "offs" not in self.rows:
            self.rows["offs"] = torch.tensor([self.spec.total_m], dtype=torch.int32, device=A.device)
        values = {**values, "offs": self.rows["offs"]}
        if self.spec.has_bias:
            values["bias"] = values["bias"].reshape(1, -1) if values["bias"].dim() == 1 else values["bias"]
        return B.unsqueeze(0), values

    def _operands(self, operands: tuple, named: dict) -> dict[str, Any]:
        names = self.operand_names()
        if len(operands) > len(names):
            raise SpecError(f"{self.manifest.name} takes A, B, {', '.join(names)}: {2 + len(operands)} operands given")
        values = {**dict(zip(names, operands)), **named}
        unknown, missing = set(values) - set(names), [n for n in names if values.get(n) is None]
        if unknown or missing:
            raise SpecError(f"{self.manifest.name} takes A, B, {', '.join(names)}: "
                            + (f"unknown {sorted(unknown)}" if unknown else f"missing {', '.join(missing)}"))
        return values

    def _check(self, torch: Any, A: Any, B: Any, values: dict) -> None:
        from ..tune.grouped_fp8 import scale_shapes

        spec = self.spec
        self._check_tensor(torch, "A", A, (spec.total_m, spec.k), spec.dtype)
        if tuple(B.shape) != (spec.groups, spec.k, spec.weight_rows) or not B.transpose(1, 2).is_contiguous():
            raise SpecError(f"{self.manifest.name}: B {tuple(B.shape)} must be the (G, K, N) view "
                            f"{(spec.groups, spec.k, spec.weight_rows)} of weights stored (G, N, K) (b.transpose(1, 2) "
                            "contiguous), as torch._grouped_mm takes it")
        self._check_tensor(torch, "B", B.transpose(1, 2), (spec.groups, spec.weight_rows, spec.k), spec.dtype)
        self._check_tensor(torch, spec.rows_operand, values[spec.rows_operand], (spec.groups,), "int32")
        if spec.has_bias:
            self._check_tensor(torch, "bias", values["bias"], (spec.groups, spec.n), spec.out_dtype)
        if spec.fp8:
            for name, shape in zip(("scale_a", "scale_b"), scale_shapes(spec)):
                scale = values[name]  # any shape of the right count, contiguous ((M, 1) as torch._scaled_mm's)
                same = scale.numel() == _count(shape) and scale.is_contiguous()
                self._check_tensor(torch, name, scale.reshape(shape) if same else scale, shape, "float32")

    def _check_tensor(self, torch: Any, name: str, tensor: Any, shape: tuple, dtype: str) -> None:
        want = getattr(torch, TORCH_TYPES.get(dtype, dtype))
        if not isinstance(tensor, torch.Tensor):
            raise SpecError(f"{self.manifest.name}: {name} must be a torch CUDA tensor, not {type(tensor).__name__}")
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != want or not tensor.is_contiguous():
            raise SpecError(f"{self.manifest.name}: {name} is {tuple(tensor.shape)} {tensor.dtype}"
                            f"{'' if tensor.is_contiguous() else ' (not contiguous)'}; expected {tuple(shape)} {want}, "
                            "contiguous")
        if tensor.device.type != "cuda" or (tensor.device.index or 0) != self.ordinal:
            raise SpecError(f"{self.manifest.name} was loaded on GPU {self.ordinal}; {name} is on {tensor.device}")

    def __repr__(self) -> str:
        return f"ExportedGrouped({self.manifest.name}: {self.spec.slug()}, {self.compiled.arch}, from {self.path})"


def _count(shape: tuple) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _torch_of(A: Any) -> Any:
    """torch, where A is a torch tensor; SpecError (one line) otherwise."""
    if type(A).__module__.split(".")[0] != "torch":
        raise SpecError(f"a loaded grouped export takes torch CUDA tensors, not {type(A).__module__}.{type(A).__name__}")
    import torch

    return torch
