"""Writing an export folder: render, compile with NVRTC, lay out every file, swap the folder in atomically.

The files are written into a fresh sibling folder which then replaces ``--out`` with ``os.replace``,
so a reader never sees a half-written export. An existing ``--out`` is replaced only when it is
empty or an earlier export (it holds a kernel.json); anything else is refused.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..compiler import CompiledKernel, compile_kernel
from ..errors import SpecError
from ..kernel_source import KernelSource
from ..kernels import get_family
from ..spec import GemmSpec, refuse_fp8
from .cmake import check_arch, cmake_text
from .config_source import ConfigChoice, choose_config, given_config
from .harness import harness_text
from .header import check_name, header_text
from .manifest import MANIFEST, ExportManifest, Provenance
from .readme import readme_text
from .reference import reference_header

Renderer = Callable[[GemmSpec, Any, str], KernelSource]


@dataclass(frozen=True)
class ExportResult:
    path: Path
    manifest: ExportManifest
    compiled: CompiledKernel

    def summary(self) -> str:
        m = self.manifest
        return f"exported {m.spec.short()} for {m.arch} as {m.name} to {self.path}"


def export_files(name: str, compiled: CompiledKernel, provenance: Provenance) -> dict[str, bytes]:
    """File name -> contents of the whole export folder."""
    manifest = ExportManifest.from_compiled(name, compiled, provenance)
    source, files = compiled.source, manifest.files
    driver_api = bool(source.tensor_maps)  # the launcher encodes TMA descriptors with the driver API
    texts = {
        files["header"]: header_text(name, source, compiled.arch),
        files["harness"]: harness_text(name, source.spec, compiled.arch, driver_api),
        files["reference"]: reference_header(source.spec),
        files["cmake"]: cmake_text(name, compiled.arch, source.options, driver_api),
        files["readme"]: readme_text(manifest, driver_api),
        files["ptx"]: compiled.ptx,
        files["manifest"]: json.dumps(manifest.to_json(), indent=1) + "\n",
        files["kernel_source"]: json.dumps(source.to_json(), indent=1) + "\n",
    }
    return {**{k: v.encode() for k, v in texts.items()}, files["cubin"]: compiled.cubin}


def _check_replaceable(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise SpecError(f"--out {out} is not empty and holds no earlier export; choose an empty or new folder")


def _swap_in(staging: Path, out: Path) -> None:
    """Put `staging` at `out`; an earlier export there is moved aside first, then deleted."""
    if not out.exists():
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.replace(out, old / out.name)
    os.replace(staging, out)
    shutil.rmtree(old)


def write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Write `files` as the folder `out`, all at once or not at all."""
    out = Path(out)
    _check_replaceable(out)
    try:  # the staging folder beside `out` is an implementation detail: a failure names `out`
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    except OSError as err:
        raise SpecError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    try:
        os.chmod(staging, 0o755)
        for file_name, data in files.items():
            (staging / file_name).write_bytes(data)
        _swap_in(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def export_source(source: KernelSource, out: Path, arch: str = "sm_90", name: str | None = None,
                  provenance: Provenance | None = None, cache_dir: Path | None = None) -> ExportResult:
    """Compile `source` for `arch` and write the export folder `out` (name defaults to spec.slug())."""
    refuse_fp8(source.spec, "export")  # the launcher and harness would need the scales and the row count
    name = check_name(name or source.spec.slug(), source)
    compiled = compile_kernel(source, check_arch(arch), cache_dir)
    provenance = provenance or Provenance("given", f"{source.family} kernel source passed in directly")
    write_folder(Path(out), export_files(name, compiled, provenance))
    return ExportResult(Path(out), ExportManifest.from_compiled(name, compiled, provenance), compiled)


def export_spec(spec: GemmSpec, out: Path, arch: str = "sm_90", name: str | None = None,
                config: Any = None, device: Any = None, db_path: Path | None = None,
                render: Renderer | None = None, cache_dir: Path | None = None,
                family: str | None = None) -> ExportResult:
    """Choose a config (given: a family's Config or a ConfigChoice; else tuning DB, known configs,
    default of `family` or the registry's choice), render with its family (or `render`), compile,
    write `out`."""
    check_arch(arch)
    if isinstance(config, ConfigChoice):
        choice = config
    elif config is not None:
        choice = given_config(config)
    else:
        choice = choose_config(spec, arch, device, db_path, family=family)
    source = (render or get_family(choice.family).render)(spec, choice.config, arch)
    return export_source(source, out, arch, name, choice.provenance, cache_dir)
