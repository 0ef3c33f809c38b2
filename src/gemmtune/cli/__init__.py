"""The gemmtune command line: argument parsing and printing only; every verb calls the library.

Each submodule registers its verbs with ``register(subparsers)``.
"""
from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys

from ..errors import GemmtuneError

# Submodules that contribute verbs; a missing one (work in progress) is skipped, not fatal.
VERB_MODULES = ("core", "tune_cmds", "many_cmds", "db_cmds", "export_cmds", "grouped_cmds", "tvm_cmds", "numba_cmds",
                "profile_cmds", "plot_cmds")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gemmtune",
        description="Generate, tune, verify, benchmark and export CUDA GEMM kernels.",
        epilog="Sizes: M=1024 N=2048 K=3072, MN=1024 K=2048 or MNK=4096. Run 'gemmtune VERB -h' for a verb's help.",
    )
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0 if args.verb is None else 2
    try:
        return int(args.run(args) or 0)
    except GemmtuneError as err:
        print(f"gemmtune: {err}", file=sys.stderr)
        return err.exit_code
    except sqlite3.Error as err:  # damage found after the database opened (opening itself says more)
        print(f"gemmtune: tuning database error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a file the user named that cannot be read or written
        where = f": {err.filename}" if err.filename else ""
        print(f"gemmtune: {err.strerror or err}{where}", file=sys.stderr)
        # A path that is not there (or is a folder) is bad input; a disk or permission failure is not.
        return 2 if isinstance(err, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) else 1
    except KeyboardInterrupt:
        print("gemmtune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
