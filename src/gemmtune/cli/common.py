"""Arguments every spec-taking verb shares, and turning them into a GemmSpec."""
from __future__ import annotations

import argparse

from ..spec import LAYOUTS, GemmSpec, spec_from_words


def add_spec_arguments(parser: argparse.ArgumentParser, epilogue: bool = True) -> None:
    parser.add_argument("sizes", nargs="*", metavar="SIZE", help="M=.. N=.. K=.., MN=.., MNK=..")
    parser.add_argument("-m", dest="m", metavar="M", help="rows of A and D")
    parser.add_argument("-n", dest="n", metavar="N", help="columns of B and D")
    parser.add_argument("-k", dest="k", metavar="K", help="reduction length")
    parser.add_argument("--layout", default="nn", help=f"operand layout, one of {', '.join(LAYOUTS)} (default nn)")
    parser.add_argument("--dtype", default="fp32", help="element type (default fp32)")
    if epilogue:
        parser.add_argument("--epilogue", default=None,
                            help="fused epilogue chain, e.g. relu+add, alpha+beta, bias_col+gelu (default none)")


def spec_from_args(args: argparse.Namespace) -> GemmSpec:
    return spec_from_words(args.sizes, layout=args.layout, dtype=args.dtype,
                           epilogue=getattr(args, "epilogue", None), m=args.m, n=args.n, k=args.k)


def console():
    """A rich console; when output is not a terminal (a log, CI), wide enough that tables do not wrap."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)
