"""``kernel.json``: what an exported folder holds and why — spec, config, generator, arch, timings."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..compiler import CompiledKernel, ResourceUsage
from ..input_files import InputFileError, read_json_object
from ..spec import GemmSpec

FORMAT = "gemmtune-export/1"
MANIFEST = "kernel.json"
KERNEL_SOURCE = "kernel_source.json"
HARNESS = "main.cu"
REFERENCE = "reference.cuh"
CMAKE = "CMakeLists.txt"
README = "README.md"
CONFIG_SOURCES = ("given", "tuning-db", "known-configs", "chooser", "default")
# What a table row or a one-line summary calls each source (the detail is for --explain and kernel.json).
SHORT_SOURCES = {"given": "given", "tuning-db": "tuning database", "known-configs": "known config",
                 "chooser": "config chooser", "default": "default"}


def file_names(name: str) -> dict[str, str]:
    """Role -> file name of everything an export of `name` writes."""
    return {"header": f"{name}.cuh", "cubin": f"{name}.cubin", "ptx": f"{name}.ptx", "harness": HARNESS,
            "reference": REFERENCE, "cmake": CMAKE, "readme": README, "manifest": MANIFEST,
            "kernel_source": KERNEL_SOURCE}


@dataclass(frozen=True)
class Provenance:
    """Where the config came from, and what it measured when that is known (seconds)."""

    source: str
    detail: str
    measured_s: float | None = None
    cublas_s: float | None = None
    gpu: str = field(default="", compare=False)  # known-configs: the entry's GPU, for short() only

    def __post_init__(self) -> None:
        if self.source not in CONFIG_SOURCES:
            raise ValueError(f"unknown config source '{self.source}'; one of {CONFIG_SOURCES}")

    def describe(self) -> str:
        return f"{self.source} ({self.detail})"

    def short(self) -> str:
        """A few words: "tuning database", "known config, H100", "config chooser", "default", "given"."""
        label = SHORT_SOURCES[self.source]
        return f"{label}, {self.gpu}" if self.gpu else label


@dataclass(frozen=True)
class ExportManifest:
    name: str
    spec: GemmSpec
    arch: str
    family: str
    family_version: str
    config: dict = field(hash=False)
    provenance: Provenance
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    args: tuple[str, ...]
    resources: ResourceUsage
    nvrtc_version: str

    @staticmethod
    def from_compiled(name: str, compiled: CompiledKernel, provenance: Provenance) -> "ExportManifest":
        s = compiled.source
        return ExportManifest(name=name, spec=s.spec, arch=compiled.arch, family=s.family,
                              family_version=s.family_version, config=dict(s.config), provenance=provenance,
                              entry=s.entry, grid=tuple(s.grid), block=tuple(s.block), dynamic_smem=s.dynamic_smem,
                              args=tuple(s.args), resources=compiled.resources, nvrtc_version=compiled.nvrtc_version)

    @property
    def files(self) -> dict[str, str]:
        return file_names(self.name)

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "name": self.name, "spec": self.spec.to_json(), "arch": self.arch,
            "generator": {"family": self.family, "version": self.family_version},
            "config": self.config, "config_source": {"source": self.provenance.source, "detail": self.provenance.detail},
            "measured": _measured_json(self.spec, self.provenance),
            "kernel": {"entry": self.entry, "grid": list(self.grid), "block": list(self.block),
                       "dynamic_smem": self.dynamic_smem, "args": list(self.args)},
            "resources": self.resources.to_json(), "nvrtc_version": self.nvrtc_version, "files": self.files,
        }

    @staticmethod
    def from_json(data: dict) -> "ExportManifest":
        if data.get("format") != FORMAT:
            raise InputFileError(f"kernel.json has format {data.get('format')!r}; this gemmtune reads {FORMAT!r}")
        kernel, measured, source = data["kernel"], data.get("measured", {}), data["config_source"]
        provenance = Provenance(source["source"], source["detail"], measured.get("time_s"), measured.get("cublas_time_s"))
        return ExportManifest(
            name=data["name"], spec=GemmSpec.from_json(data["spec"]), arch=data["arch"],
            family=data["generator"]["family"], family_version=data["generator"]["version"], config=data["config"],
            provenance=provenance, entry=kernel["entry"], grid=tuple(kernel["grid"]), block=tuple(kernel["block"]),
            dynamic_smem=kernel["dynamic_smem"], args=tuple(kernel["args"]),
            resources=ResourceUsage(**data["resources"]), nvrtc_version=data["nvrtc_version"],
        )


def _tflops(spec: GemmSpec, seconds: float | None) -> float | None:
    return None if not seconds else float(f"{spec.flops / seconds / 1e12:.4g}")


def _measured_json(spec: GemmSpec, provenance: Provenance) -> dict:
    """Times in seconds (null when unknown) and the TFLOP/s they mean."""
    return {"time_s": provenance.measured_s, "tflops": _tflops(spec, provenance.measured_s),
            "cublas_time_s": provenance.cublas_s, "cublas_tflops": _tflops(spec, provenance.cublas_s)}


def read_manifest(folder: Path) -> ExportManifest:
    """The kernel.json of an exported folder; InputFileError (one line, exit 2) when the folder or
    the file is absent, unreadable or not a manifest."""
    path = Path(folder) / MANIFEST
    if not Path(folder).is_dir():
        raise InputFileError(f"{folder} is not a gemmtune export: " + ("no such folder" if not Path(folder).exists()
                                                                      else "it is a file, not a folder"))
    if not path.exists():
        raise InputFileError(f"{folder} is not a gemmtune export: {MANIFEST} is missing")
    data = read_json_object(path, "an export's manifest")
    if data.get("format") != FORMAT:
        raise InputFileError(f"{path} has format {data.get('format')!r}; this gemmtune reads {FORMAT!r}")
    try:
        return ExportManifest.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(f"{path} is damaged: {type(exc).__name__}: {exc}") from None
