"""Arguments every spec-taking verb shares, and turning them into a GemmSpec."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..spec import (DTYPES, FP8_DTYPES, FP8_LAYOUT, FP8_OUT_DTYPES, LAYOUTS, MATHS, OUT_DTYPES, SCALINGS, GemmSpec,
                    refuse_fp8, spec_from_words)


def add_spec_arguments(parser: argparse.ArgumentParser, epilogue: bool = True) -> None:
    parser.add_argument("sizes", nargs="*", metavar="SIZE", help="M=.. N=.. K=.., MN=.., MNK=..")
    parser.add_argument("-m", dest="m", metavar="M", help="rows of A and D")
    parser.add_argument("-n", dest="n", metavar="N", help="columns of B and D")
    parser.add_argument("-k", dest="k", metavar="K", help="reduction length")
    parser.add_argument("--layout", default=None,
                        help=f"operand layout, one of {', '.join(LAYOUTS)} (default nn; fp8: {FP8_LAYOUT}, its only one)")
    parser.add_argument("--dtype", default="fp32",
                        help=f"element type of A and B, one of {', '.join([*DTYPES, *FP8_DTYPES])} (default fp32; tf32: "
                             "fp32 data, tf32 products; fp16/bf16: 16-bit A, B and D, fp32 accumulation; e4m3/e5m2: "
                             "fp8 with --scale)")
    parser.add_argument("--scale", dest="scaling", default=None,
                        help=f"fp8 only, how A and B are scaled: {', '.join(SCALINGS)} (per tensor; per row of A and "
                             "column of B; 1x128 blocks of A and 128x128 of B)")
    parser.add_argument("--out-dtype", dest="out_dtype", default=None,
                        help=f"element type of D (and C/bias): {', '.join(OUT_DTYPES)} (default: the input type, "
                             f"fp32 for tf32, bf16 for fp8; fp32 may be asked for with fp16/bf16 inputs, "
                             f"{', '.join(FP8_OUT_DTYPES)} with fp8)")
    parser.add_argument("--math", default="auto",
                        help=f"how fp32 inputs are multiplied, one of {', '.join(MATHS)} (default auto: the fastest "
                             "method that keeps fp32 accuracy; 3xtf32: tensor cores on split operands; simt: CUDA cores)")
    parser.add_argument("--gated", action="store_true",
                        help="a gated (SwiGLU) GEMM: D = silu(A·Wgᵀ)·(A·Wuᵀ), N the output width, B (2N)×K with gate "
                             "and up rows interleaved by 8 (bf16/fp16, layout nt; also the word gated=1)")
    if epilogue:
        parser.add_argument("--epilogue", default=None,
                            help="fused epilogue chain, e.g. relu+add, alpha+beta, bias_col+gelu (default none)")


def spec_from_args(args: argparse.Namespace, stage: str | None = None) -> GemmSpec:
    """The spec the flags describe; `stage`: the backend or verb reading it where it takes no fp8 specs yet
    (they are refused in one line, naming it)."""
    spec = spec_from_words(args.sizes, layout=args.layout, dtype=args.dtype,
                           epilogue=getattr(args, "epilogue", None), m=args.m, n=args.n, k=args.k,
                           out_dtype=getattr(args, "out_dtype", None), math=getattr(args, "math", None),
                           scaling=getattr(args, "scaling", None), gated=getattr(args, "gated", False))
    if stage:
        refuse_fp8(spec, stage)
    return spec


DB_HELP = "tuning database (default ~/.cache/gemmtune/tuning.sqlite)"


def add_db_argument(parser: argparse.ArgumentParser, help: str = DB_HELP) -> None:
    """--db: the tuning database, the same flag on every verb that reads or writes it."""
    parser.add_argument("--db", type=Path, metavar="FILE", help=help)


def db_to_read(path: Path | None) -> Path | None:
    """--db of a verb that only reads the database (to choose a config): a named file must be a
    gemmtune database (DatabaseFileError, exit 2, in one line, before any GPU work); None stays None
    (the default database, consulted when it exists)."""
    if path is not None:
        from ..tune.db_file import check_readable

        check_readable(path)
    return path


def add_family_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", default=None,
                        help="generator family, e.g. simt (default: the best family for the dtype and arch)")


def family_from_args(args: argparse.Namespace, spec: GemmSpec, arch: str) -> Any:
    """The kernels.Family for `spec` on `arch`: --family if given (ConfigError, exit 2, when it cannot
    run the spec), else the registry's choice."""
    from ..kernels import family_for

    return family_for(spec, arch, getattr(args, "family", None))


def console():
    """A rich console; when output is not a terminal (a log, CI), wide enough that tables do not wrap."""
    import sys

    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)
