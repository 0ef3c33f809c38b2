"""``gemmtune.load(DIR)``: an exported folder as a Python callable on torch / cupy CUDA arrays.

Loading needs no generator: kernel.json and kernel_source.json say what the cubin computes and how
to launch it, and the cubin goes to the GPU through gemmtune.runtime.LoadedKernel. When the cubin
cannot run on the present GPU (another generation), the saved source is recompiled with NVRTC.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compiler import ARCHES, CompiledKernel, compile_kernel
from ..errors import LaunchError, SpecError
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


def load(path: str | Path, ordinal: int = 0) -> ExportedGemm:
    """Load the export folder `path` onto GPU `ordinal`."""
    from ..device import query_device
    from ..runtime import LoadedKernel

    manifest, compiled = compiled_from_folder(Path(path))
    compiled = for_device(compiled, query_device(ordinal))
    return ExportedGemm(Path(path), manifest, compiled, LoadedKernel(compiled, ordinal), ordinal)
