"""Verb `export`: write a kernel as a header + launcher, self-checking harness, CMake project and cubin."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..compiler import ARCHES
from ..errors import SpecError
from ..export.cmake import check_arch
from ..export.writer import ExportResult
from ..kernels import families
from .common import (add_db_argument, add_family_argument, add_spec_arguments, db_to_read, family_from_args,
                     spec_from_args)

FALLBACK_ARCH = "sm_90"


def register(subparsers) -> None:
    export = subparsers.add_parser(
        "export", help="write a kernel as .cuh + launcher, self-checking harness, CMake project and cubin",
        description="Choose the config (tuning database, else shipped known configs, else the default), generate "
                    "the kernel, compile it with NVRTC and write a folder that builds and checks itself with "
                    "CMake or nvcc, and that gemmtune.load(DIR) runs from Python. No GPU is needed.")
    add_spec_arguments(export)
    add_family_argument(export)
    export.add_argument("--out", metavar="DIR", help="folder to write (an earlier export there is replaced)")
    export.add_argument("--arch", help=f"target: {', '.join(ARCHES)} (default: the GPU's, else {FALLBACK_ARCH})")
    export.add_argument("--name", help="launcher and file name (default: gemm_<dtype>_<layout>_<M>x<N>x<K>[_<epilogue>])")
    export.add_argument("--config", help="a ladder step name of the family or a JSON object of config fields "
                                         "(default: tuning database, known configs, default config)")
    add_db_argument(export, "tuning database the config is looked up in (default "
                            "~/.cache/gemmtune/tuning.sqlite)")
    export.add_argument("--backend", choices=("native", "tvm"), default="native",
                        help="native: gemmtune's CUDA templates (default); tvm: a TVM TensorIR schedule")
    export.add_argument("--schedule", default="manual",
                        help="tvm: naive, manual, dlight, tuned or a ladder step (default manual)")
    export.add_argument("--apply-trace", dest="trace", type=Path, metavar="FILE",
                        help="tvm --schedule tuned: a saved apply_trace file (best_trace.py)")
    export.add_argument("--work-dir", type=Path, help="tvm --schedule tuned: a tune's work dir")
    export.set_defaults(run=run_export)


def target_arch(requested: str | None, device: Any) -> str:
    if requested:
        return check_arch(requested)
    if device is not None and device.arch in ARCHES:
        return device.arch
    if device is not None:
        print(f"gemmtune: {device.name} is {device.arch}, which NVRTC targets here do not include; "
              f"exporting for {FALLBACK_ARCH}", file=sys.stderr)
    return FALLBACK_ARCH


def _given_choice(text: str, spec: Any, arch: str, family: Any):
    from ..build import parse_config
    from ..export.config_source import given_config

    chosen = parse_config(text, spec, arch, family)
    return given_config(chosen.config, f"--config ({chosen.source})")


def config_text(result: ExportResult) -> str:
    """The config described by its family (`family: description`), or its JSON for other sources (TVM)."""
    source = result.compiled.source
    family = next((f for f in families() if f.name == source.family), None)
    if family is not None:
        return f"{family.name}: {family.config_from_json(source.config).describe()}"
    return json.dumps(source.config, sort_keys=True)


def print_result(result: ExportResult, device: Any) -> None:
    m, folder = result.manifest, result.path
    where = f"on {device.name}" if device is not None else f"no GPU here, target {m.arch}"
    print(f"exported {m.spec.short()} for {m.arch} to {folder} ({where})")
    print(f"config source: {m.provenance.describe()}")
    print(f"config: {config_text(result)}")
    print(f"ptxas: {m.resources.summary()}")
    print(f"files: {', '.join(sorted(m.files.values()))}")
    print(f"check it: cd {folder} && cmake -B build && cmake --build build && ./build/{m.name}_check")


def export_tvm(args: argparse.Namespace, spec: Any, arch: str) -> ExportResult:
    """A TVM schedule's kernel through the same exporter: the folder needs no TVM to build or run."""
    from ..export.manifest import Provenance
    from ..export.writer import export_source
    from ..tvm import require_tvm

    require_tvm()
    from ..tvm.schedules import named_source
    from .tvm_cmds import tuned_from

    source = named_source(spec, args.schedule, arch, tuned=tuned_from(args))
    provenance = Provenance("given", f"TVM TensorIR schedule '{args.schedule}' (--backend tvm)")
    return export_source(source, Path(args.out), arch, args.name, provenance)


def run_export(args: argparse.Namespace) -> int:
    if not args.out:
        raise SpecError("export needs --out DIR: the folder to write")
    spec = spec_from_args(args)
    from ..device import present_device

    if spec.fp8:
        return export_fp8(args, spec, present_device())
    device = present_device()
    arch = target_arch(args.arch, device)
    if args.backend == "tvm":
        print_result(export_tvm(args, spec, arch), device)
        return 0
    family = family_from_args(args, spec, arch)
    config = _given_choice(args.config, spec, arch, family) if args.config else None
    from ..export.writer import export_spec

    result = export_spec(spec, Path(args.out), arch, args.name, config=config, device=device,
                         db_path=db_to_read(args.db), family=family.name)
    print_result(result, device)
    return 0


# --- fp8 --------------------------------------------------------------------------------------------------
def export_fp8(args: argparse.Namespace, spec: Any, device: Any) -> int:
    """An fp8 GEMM as the grouped fp8 kernel's one group (issue 70): export.grouped's folder with the one-GEMM
    launcher name(A, B, [bias], scale_a, scale_b, D, stream) beside the grouped one. Config: --config (a JSON object
    of GroupedConfig fields), else the tuning database's (`gemmtune tune ... --dtype e4m3 --scale ...`), else the
    default."""
    from ..export.grouped import export_grouped, gemm_launcher_params
    from ..tune.grouped_tuner import spec_for_gemm
    from .grouped_cmds import chosen, config_label

    if args.backend != "native":
        raise SpecError(f"--backend {args.backend} does not take fp8 GEMMs; the native grouped fp8 kernel does")
    if args.arch not in (None, "sm_90", "sm_90a"):
        check_arch(args.arch)
        raise SpecError(f"fp8 GEMMs use wgmma and TMA: export them for sm_90a, not {args.arch}")
    if args.family is not None:
        family_from_args(args, spec, "sm_90a")  # ConfigError where that family cannot run the spec
    grouped, _ = spec_for_gemm(spec)
    device = device if device is not None and device.cc == (9, 0) else None
    config, provenance = chosen(args, grouped, device)
    result = export_grouped(grouped, config, Path(args.out), "sm_90a", args.name or default_fp8_name(spec),
                            device.sm_count if device is not None else None, provenance, gemm=True)
    where = f"on {device.name}" if device is not None else "no sm_90 GPU here: a grid of the sm_90a table's SMs"
    print(f"exported {spec.short()} for sm_90a to {result.path} ({where}) as the grouped fp8 kernel's one group")
    print(f"config source: {provenance.describe()}")
    print(f"config: {config_label(config)} {json.dumps(config.to_json(), sort_keys=True)}")
    print(f"ptxas: {result.compiled.resources.summary()}")
    print(f"launcher: {result.name}({gemm_launcher_params(grouped).replace(' = 0', '')})")
    print(f"check it: cd {result.path} && cmake -B build && cmake --build build && ./build/{result.name}_check")
    return 0


def default_fp8_name(spec: Any) -> str:
    """gemm_<dtype>_<scaling>_<out>_<M>x<N>x<K>[_<epilogue>]."""
    epilogue = "" if spec.epilogue.is_identity else "_" + str(spec.epilogue).replace("+", "_")
    return f"gemm_{spec.dtype}_{spec.scaling}_{spec.out_dtype}_{spec.m}x{spec.n}x{spec.k}{epilogue}"
