"""Verb `plot ladder|roofline|convergence`: PNG and SVG from recorded data (no GPU needed)."""
from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_db_argument, add_spec_arguments


def register(subparsers) -> None:
    plot = subparsers.add_parser("plot", help="plots from recorded data: ladder bars, roofline, tuning convergence",
                                 description="Writes OUT.png and OUT.svg. Needs matplotlib: pip install "
                                             "'gemmtune[plot]'.")
    plot.set_defaults(run=lambda _args: plot.print_help() or 2)
    verbs = plot.add_subparsers(dest="plot_verb", metavar="VERB")

    ladder = verbs.add_parser("ladder", help="each ladder step's TFLOP/s, CUDA-C beside numba, against cuBLAS")
    ladder.add_argument("recording", type=Path, help="JSON from `gemmtune ladder --backend numba --json`")
    ladder.add_argument("--out", type=Path, default=Path("ladder"), help="output path without suffix")
    ladder.set_defaults(run=run_ladder)

    roof = verbs.add_parser("roofline", help="measured kernels under the GPU's fp32 peak and memory bandwidth")
    roof.add_argument("recordings", type=Path, nargs="+", help="ladder JSON recordings (one per size)")
    roof.add_argument("--peak-tflops", type=float, help="fp32 peak (default: the datasheet value of the GPU)")
    roof.add_argument("--bandwidth", type=float, help="memory bandwidth in TB/s (default: the datasheet value)")
    roof.add_argument("--out", type=Path, default=Path("roofline"), help="output path without suffix")
    roof.set_defaults(run=run_roofline)

    conv = verbs.add_parser("convergence", help="best time so far against trials and seconds, from the tuning DB")
    add_spec_arguments(conv, epilogue=True)
    add_db_argument(conv)
    conv.add_argument("--out", type=Path, default=Path("convergence"), help="output path without suffix")
    conv.set_defaults(run=run_convergence)


def _written(paths: list[Path]) -> int:
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def run_ladder(args: argparse.Namespace) -> int:
    from ..plot import ladder_bars, load_ladder

    return _written(ladder_bars(load_ladder(args.recording), args.out))


def run_roofline(args: argparse.Namespace) -> int:
    from ..plot import load_ladder, peaks_for, roofline

    recordings = [load_ladder(path) for path in args.recordings]
    peaks = peaks_for(recordings[0]["device"]["name"], args.peak_tflops, args.bandwidth)
    return _written(roofline(recordings, peaks, args.out))


def run_convergence(args: argparse.Namespace) -> int:
    from ..plot import convergence, convergence_traces
    from ..tune.db import default_db_path
    from .common import spec_from_args

    spec = spec_from_args(args) if (args.sizes or args.m or args.n or args.k) else None
    return _written(convergence(convergence_traces(args.db or default_db_path(), spec), args.out))
