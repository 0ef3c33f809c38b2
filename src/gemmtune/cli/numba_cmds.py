"""`ladder --backend numba`: every ladder step as CUDA-C and as numba-cuda, side by side.

The `ladder` verb itself is registered by tvm_cmds; this module adds the options only the numba
backend reads and runs the comparison.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..timing import TimingProtocol
from .common import console, spec_from_args


def register(subparsers) -> None:
    ladder = subparsers.choices.get("ladder")
    if ladder is None:
        return
    ladder.add_argument("--steps", default="all", help="numba backend: 'all' or comma-separated ladder steps")
    ladder.add_argument("--json", dest="json_path", metavar="FILE", help="numba backend: also write the rows as JSON "
                        "(what `gemmtune plot ladder` reads)")


def run_numba_ladder(args: argparse.Namespace) -> int:
    from ..build import target_arch
    from ..device import gpu_available
    from ..numba_ladder.compile import compile_numba, require_numba
    from ..numba_ladder.ladder import compile_ladder, steps

    require_numba()
    spec, arch = spec_from_args(args, "the numba backend"), target_arch(getattr(args, "arch", None))
    if args.show:
        (step, config), = steps(arch, args.show)
        compiled = compile_numba(spec, config, arch)
        print(compiled.source.code)
        print(f"# entry {compiled.source.entry}\n# launch grid {compiled.source.grid} block {compiled.source.block}")
        print(f"# ptxas {arch}: {compiled.resources.summary()}")
        return 0
    if not gpu_available():
        print(f"numba ladder, {spec.short()} ({arch}): compiled with numba + ptxas, not run (no GPU)")
        found = compile_ladder(spec, arch, args.steps)
        for item in found:
            print(f"  {item.step:<14} {item.summary}")
        return 0 if all(item.ok for item in found) else 1
    return _run_on_gpu(args, spec, arch, TimingProtocol(min_time_s=args.min_time))


def _run_on_gpu(args: argparse.Namespace, spec, arch: str, protocol: TimingProtocol) -> int:
    from ..device import query_device
    from ..numba_ladder.ladder import compare_ladder

    device = query_device()
    spec.check_fits(device.total_memory)
    print(f"{device.name} ({arch}): {spec.short()}, CUDA-C and numba ladders + cuBLAS", file=sys.stderr)
    cublas, pairs = compare_ladder(spec, arch, protocol, args.steps, on_pair=lambda p: print(
        f"  {p.step:<14} CUDA-C {p.cuda_c.status}, numba {p.numba.status}", file=sys.stderr))
    _print_pairs(spec, device.name, cublas, pairs)
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(ladder_json(spec, device, cublas, pairs), handle, indent=1)
    return 0 if all(p.numba.status == "ok" for p in pairs) else 1


def ladder_json(spec, device, cublas, pairs) -> dict:
    """The recorded form `gemmtune plot` reads."""
    return {"spec": spec.to_json(), "device": device.to_json(), "cublas": cublas.to_json(),
            "pairs": [p.to_json() for p in pairs]}


def _print_pairs(spec, device_name: str, cublas, pairs) -> None:
    from rich.table import Table

    table = Table(title=f"numba vs CUDA-C ladder, {spec.short()} on {device_name}; cuBLAS "
                        f"{_us(cublas.median_s)} ({cublas.tflops or 0:.2f} TFLOP/s)")
    for col in ("step", "CUDA-C", "numba", "numba speed / CUDA-C", "numba % cuBLAS", "regs C/numba", "numba status"):
        table.add_column(col, justify="left" if col in ("step", "numba status") else "right")
    for p in pairs:
        share = p.numba.pct_of(cublas.median_s)
        table.add_row(p.step, _us(p.cuda_c.median_s), _us(p.numba.median_s),
                      "—" if p.speed_ratio is None else f"{p.speed_ratio:.2f}",
                      "—" if share is None else f"{share:.1f}%", f"{p.cuda_c.registers}/{p.numba.registers}",
                      p.numba.status if p.numba.status == "ok" else f"{p.numba.status}: {p.numba.message[:50]}")
    console().print(table)


def _us(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e6:.1f} µs"
