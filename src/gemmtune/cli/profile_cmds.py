"""Verb `profile`: Nsight Compute's GEMM metrics for one kernel, or a torch profiler trace."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..profile import CUBLAS_FAMILIES, Target, ncu_path, profile_with_ncu, torch_trace
from ..build import target_arch
from .common import add_db_argument, add_spec_arguments, db_to_read, family_from_args, spec_from_args


def register(subparsers) -> None:
    profile = subparsers.add_parser(
        "profile", help="profile one kernel with Nsight Compute (ncu) or the torch profiler",
        description="Runs the kernel once under ncu (clocks left alone: --clock-control none) and prints SM and "
                    "tensor-pipe utilization, achieved occupancy, DRAM and L2 throughput, shared-memory bank "
                    "conflicts and the top warp-stall reasons. Needs a GPU and ncu on PATH.")
    add_spec_arguments(profile)
    profile.add_argument("--config", help="a ladder step (naive ... double_buffer) or a JSON config "
                                          "(default: the best known config; numba: double_buffer)")
    profile.add_argument("--family",
                         help=f"simt (CUDA-C), numba, {', '.join(CUBLAS_FAMILIES)} (torch.mm) or a registered family "
                              "(default: the family build and bench choose for the dtype and arch)")
    profile.add_argument("--arch", help="target arch (default: the GPU's)")
    add_db_argument(profile, "tuning database the best known config is looked up in (default "
                             "~/.cache/gemmtune/tuning.sqlite)")
    profile.add_argument("--torch-profiler", metavar="TRACE.json", help="write a torch profiler (Chrome) trace of "
                         "five launches to this file instead of running ncu")
    profile.add_argument("--raw", metavar="FILE.csv", help="also keep ncu's raw CSV here")
    profile.add_argument("--json", dest="json_path", metavar="FILE", help="also write the summary as JSON")
    profile.set_defaults(run=run_profile)


def run_profile(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    family = args.family
    if family is None or family not in (*CUBLAS_FAMILIES, "numba"):  # a generator family: checked against the spec
        family = family_from_args(args, spec, target_arch(args.arch)).name
    db = db_to_read(args.db)  # checked here: the kernel is built in the process ncu runs
    target = Target(spec, family, args.config, args.arch, str(db) if db else None)
    if args.torch_profiler:
        _require_gpu()
        print(torch_trace(target, Path(args.torch_profiler)))
        print(f"trace written to {args.torch_profiler} (open in chrome://tracing or ui.perfetto.dev)")
        return 0
    if ncu_path() is not None:
        _require_gpu()
    summary = profile_with_ncu(target, Path(args.raw) if args.raw else None)  # without ncu: the one-line hint
    print(f"{target.spec.short()}, family {target.family}, config {target.config or 'default'}")
    print("\n".join(summary.lines()))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"target": target.to_json(), "summary": summary.to_json()},
                                                   indent=1))
    return 0


def _require_gpu() -> None:
    from ..device import query_device

    query_device()  # NoDeviceError (exit 3) without a GPU
