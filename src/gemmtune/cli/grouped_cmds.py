"""Verbs `tune-grouped` (time the grouped candidates against torch._grouped_mm, fp8 against torch._scaled_mm or
torch._scaled_grouped_mm, store every trial) and `export-grouped` (a grouped kernel as .cuh + launcher taking offs
on the device, fp8 its scales too, harness, CMake, cubin)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SpecError
from ..grouped.distribution import ROUTINGS, Routing, describe, parse_rows
from ..grouped.spec import DTYPES, FP8, OUT_DTYPES
from ..spec import SCALINGS
from .common import add_db_argument, console


def register(subparsers) -> None:
    tune = subparsers.add_parser(
        "tune-grouped", help="tune a grouped (MoE) GEMM: every candidate config against torch._grouped_mm",
        description="Verify each grouped candidate against a float64 reference (NaN-poisoned D) and time it with "
                    "torch._grouped_mm in the same rounds, in a watched worker process; every trial is stored in "
                    "the tuning database, and gemmtune.torch.grouped_mm then uses the fastest for specs of the same "
                    "G, N, K, dtype, epilogue and mean rows per group (rounded to a power of two). A re-run resumes. "
                    "fp8 (--dtype e4m3|e5m2 --scale tensor|rowwise|block [--out-dtype bf16|fp16]): the reference is "
                    "that of the dequantized operands, torch's call torch._scaled_grouped_mm (one group: "
                    "torch._scaled_mm), and gemmtune.torch.scaled_grouped_mm / scaled_mm use the fastest.")
    _add_problem_arguments(tune)
    tune.add_argument("--candidates", type=int, metavar="N", help="only the first N candidates (default: all)")
    tune.add_argument("--rounds", type=int, default=30, help="timed rounds of ours and torch's (default 30)")
    tune.add_argument("--timeout", type=float, default=120.0, help="seconds before a candidate counts as hung")
    add_db_argument(tune)
    tune.set_defaults(run=run_tune_grouped)

    export = subparsers.add_parser(
        "export-grouped", help="write a grouped GEMM kernel as .cuh + launcher (offs on the device), harness, CMake",
        description="Choose the config (--config, else the tuning database's for the spec's key, else the default), "
                    "compile with NVRTC for sm_90a and write a folder whose launcher takes device pointers to A, the "
                    "weights, offs (or counts), bias and D, plus G, total_m and a stream. No GPU is needed.")
    _add_problem_arguments(export)
    export.add_argument("--swiglu", action="store_true", help="D = silu(A·W_gateᵀ)·(A·W_upᵀ) from weights (G, 2N, K)")
    export.add_argument("--total-m", type=int, metavar="M", help="rows of A and D (with --groups, instead of "
                                                                 "--rows or --tokens)")
    export.add_argument("--groups", type=int, metavar="G", help="groups (with --total-m)")
    export.add_argument("--masked", action="store_true", help="the masked layout: --total-m is G x capacity, the "
                                                              "launcher takes counts")
    export.add_argument("--out", metavar="DIR", help="folder to write (an earlier export there is replaced)")
    export.add_argument("--name", help="launcher and file name (default: grouped_g<G>_m<M>_n<N>_k<K>_<dtype>...)")
    export.add_argument("--config", help="a JSON object of GroupedConfig fields, e.g. '{\"bm\": 64, \"bn\": 256}'")
    add_db_argument(export, "tuning database the config is looked up in (default ~/.cache/gemmtune/tuning.sqlite)")
    export.set_defaults(run=run_export_grouped)


def _add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", dest="n", type=int, required=True, help="columns of D (rows of each group's weights)")
    parser.add_argument("-k", dest="k", type=int, required=True, help="reduction length (a multiple of 8)")
    parser.add_argument("--dtype", default="bf16", help="bf16, fp16, or fp8 e4m3 / e5m2 with --scale (default bf16)")
    parser.add_argument("--scale", dest="scaling", default=None, choices=SCALINGS,
                        help="fp8: tensor (one scale each), rowwise (A's rows, each group's columns) or block "
                             "(1x128 of A, 128x128 of each group's weights)")
    parser.add_argument("--out-dtype", dest="out_dtype", default=None,
                        help=f"fp8: D's type, {', '.join(OUT_DTYPES)} (default bf16)")
    parser.add_argument("--epilogue", default="none", help="none, bias, relu, gelu, bias+relu, bias+gelu")
    parser.add_argument("--rows", help="each group's rows, comma-separated: 700,120,64,...")
    parser.add_argument("--tokens", type=int, help="tokens routed to the experts (with --experts and --topk)")
    parser.add_argument("--experts", type=int, help="experts: the groups")
    parser.add_argument("--topk", type=int, default=1, help="experts each token goes to (default 1)")
    parser.add_argument("--routing", default="balanced", choices=ROUTINGS, help="balanced or zipf (default balanced)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the zipf routing (default 2026)")


def rows_from_args(args: argparse.Namespace, required: bool = True) -> tuple[int, ...] | None:
    """The group sizes: --rows, or routed from --tokens/--experts/--topk; SpecError (one line) for neither,
    both, or a partial routing."""
    routed = args.tokens is not None or args.experts is not None
    if args.rows and routed:
        raise SpecError("give the group sizes once: --rows, or --tokens with --experts and --topk")
    if args.rows:
        return parse_rows(args.rows)
    if routed:
        if args.tokens is None or args.experts is None:
            raise SpecError("--tokens and --experts go together (with --topk, default 1)")
        return Routing(args.tokens, args.experts, args.topk, args.routing, args.seed).rows()
    if required:
        raise SpecError("give the group sizes: --rows 700,120,64,... or --tokens T --experts G --topk k")
    return None


def fp8_options(args: argparse.Namespace) -> dict[str, str]:
    """GroupedSpec's out_dtype and scaling from --dtype, --scale and --out-dtype (SpecError, one line)."""
    dtype, scaling, out = args.dtype, getattr(args, "scaling", None), getattr(args, "out_dtype", None)
    if dtype not in DTYPES:
        raise SpecError(f"--dtype {dtype}: grouped tuning and export take {', '.join(DTYPES[:-1])} or {DTYPES[-1]}")
    if dtype not in FP8:
        if scaling is not None or out not in (None, dtype):
            raise SpecError(f"--scale and --out-dtype are for fp8 inputs ({' or '.join(FP8)}), not {dtype}")
        return {}
    if scaling is None:
        raise SpecError(f"--dtype {dtype} needs --scale {', '.join(SCALINGS)}")
    if out is not None and out not in OUT_DTYPES:
        raise SpecError(f"--out-dtype {out} with {dtype} inputs: use {', '.join(OUT_DTYPES[:-1])} or {OUT_DTYPES[-1]}")
    return {"out_dtype": out or "", "scaling": scaling}


# --- tune-grouped -----------------------------------------------------------------------------------------
def run_tune_grouped(args: argparse.Namespace) -> int:
    from ..tune.db import default_db_path
    from ..tune.grouped_tuner import spec_for_rows

    fp8 = fp8_options(args)
    rows = rows_from_args(args)
    spec = spec_for_rows(rows, args.n, args.k, args.dtype, args.epilogue, **fp8)
    if args.candidates is not None and args.candidates < 1:
        raise SpecError(f"--candidates must be at least 1, got {args.candidates}")
    if args.rounds < 1:
        raise SpecError(f"--rounds must be at least 1, got {args.rounds}")
    db_path = args.db or default_db_path()
    from ..tune.grouped_measure import WorkerMeasurer

    measurer = WorkerMeasurer(args.rounds, args.timeout)  # NoDeviceError (exit 3) before the database is touched
    try:
        outcome = tune_spec(spec, rows, measurer, db_path, args.candidates)
    finally:
        measurer.close()
    print_outcome(outcome, db_path)
    return 0 if outcome.best is not None else 1


def tune_spec(spec: Any, rows: tuple[int, ...], measurer: Any, db_path: Path, limit: int | None) -> Any:
    """Tune `spec` on `rows` into the database at `db_path`, printing a line per trial; forget() the configs
    chosen so far in this process."""
    from ..grouped.tuned import forget
    from ..tune.grouped_db import GroupedTuningDB
    from ..tune.grouped_tuner import tune_grouped

    out = console()
    out.print(f"tune-grouped {spec.slug()}: {describe(rows)}; {measurer.environment.device_name}; database {db_path}")
    with GroupedTuningDB(db_path) as db:
        outcome = tune_grouped(spec, rows, measurer, db, limit, lambda p: out.print(progress_line(p)))
    forget()
    return outcome


def config_label(config: Any) -> str:
    """'128x128 s5 c2 pingpong staged' and the rarer fields where set."""
    words = [f"{config.bm}x{config.bn}", f"s{config.stages}", f"c{config.consumers}"]
    words += ["pingpong"] * config.pingpong + ["staged"] * config.staged_store
    words += [f"band{config.band_m}"] * bool(config.band_m) + [f"cluster{config.cluster}"] * (config.cluster > 1)
    words += [f"promote{config.promote_every}"] * bool(config.promote_every)
    words += ["overlap-static" if config.overlap_static else "overlap"] * config.promote_overlap
    return " ".join(words)


def torch_name(trial: Any) -> str:
    """The torch call a trial was timed against (trials stored before the name was: torch._grouped_mm)."""
    return trial.torch_op or "torch._grouped_mm"


def trial_text(trial: Any) -> str:
    if not trial.ok:
        return f"{trial.status.value}: {trial.error}"
    versus = f", {trial.speedup:.2f}x {torch_name(trial)}" if trial.speedup else ", torch not timed"
    return f"{trial.median_s * 1e6:.1f} µs{versus}"


def progress_line(progress: Any) -> str:
    where = "" if progress.new else " (in the database)"
    return f"[{progress.done}/{progress.total}] {config_label(progress.trial.config)}: {trial_text(progress.trial)}{where}"


def print_outcome(outcome: Any, db_path: Path) -> None:
    from rich.table import Table

    context = outcome.context
    timed = sorted({torch_name(t) for t in outcome.ranked if t.speedup})
    table = Table(title=f"grouped configs for {context.spec.slug()} on {context.environment.device_name}",
                  caption=f"torch: {'; '.join(timed) or 'not timed'}")
    for column in ("rank", "config", "µs", "TFLOP/s", "torch µs", "vs torch"):
        table.add_column(column, justify="left" if column == "config" else "right")
    for rank, trial in enumerate(outcome.ranked, start=1):
        torch_us = f"{trial.torch_median_s * 1e6:.1f}" if trial.torch_median_s else "—"
        table.add_row(str(rank), config_label(trial.config), f"{trial.median_s * 1e6:.1f}",
                      f"{context.flops / trial.median_s / 1e12:.1f}", torch_us,
                      f"{trial.speedup:.2f}x" if trial.speedup else "—")
    out = console()
    out.print(table)
    out.print(f"{outcome.new_trials} new trials, {len(outcome.trials)} candidates, {outcome.failures} failed; "
              f"saved in {db_path}")
    for trial in (t for t in outcome.trials if not t.ok):
        out.print(f"  failed {config_label(trial.config)}: {trial.status.value}: {trial.error}")
    best = outcome.best
    if best is not None:
        out.print(f"best: {config_label(best.config)} {json.dumps(best.config.to_json(), sort_keys=True)}; "
                  f"{user_of(context.spec)} uses the fastest of {context.key.describe()} on this GPU")


def user_of(spec: Any) -> str:
    """The torch entry that reads a tuned config of `spec`."""
    if not spec.fp8:
        return "gemmtune.torch.grouped_mm"
    return "gemmtune.torch.scaled_mm" if spec.groups == 1 else "gemmtune.torch.scaled_grouped_mm"


# --- export-grouped ---------------------------------------------------------------------------------------
def spec_from_args(args: argparse.Namespace) -> Any:
    from ..grouped.spec import GroupedSpec

    fp8 = fp8_options(args)
    epilogue = "none" if args.swiglu else args.epilogue
    rows = rows_from_args(args, required=args.total_m is None and args.groups is None)
    if rows is not None:
        if args.total_m is not None or args.groups is not None or args.masked:
            raise SpecError("give --rows/--tokens, or --groups with --total-m (and --masked), not both")
        return GroupedSpec(len(rows), sum(rows), args.n, args.k, args.dtype, epilogue, args.swiglu, **fp8)
    if args.total_m is None or args.groups is None:
        raise SpecError("--groups and --total-m go together")
    layout = "masked" if args.masked else "contiguous"
    return GroupedSpec(args.groups, args.total_m, args.n, args.k, args.dtype, epilogue, args.swiglu, layout, **fp8)


def given_config(text: str, spec: Any) -> Any:
    from ..grouped.config import rejections
    from ..tune.grouped_records import config_from_json

    try:
        data = json.loads(text)
        config = config_from_json(data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"--config {text!r} is not a JSON object of GroupedConfig fields: {exc}") from None
    if "stages" not in data:  # as deep a ring as fits, as the default and the candidates have
        config = next((config.with_(stages=s) for s in range(8, 1, -1) if not rejections(config.with_(stages=s), spec)),
                      config)
    problems = rejections(config, spec)
    if problems:
        raise ConfigError(f"--config {text}: " + "; ".join(problems.values()))
    return config


def chosen(args: argparse.Namespace, spec: Any, device: Any) -> tuple[Any, Any]:
    """(config, Provenance): --config, else the tuning database's for the key on this GPU, else the default."""
    from ..export.manifest import Provenance
    from ..grouped.config import default_config
    from ..grouped.tuned import tuned_config
    from .common import db_to_read

    if args.config:
        return given_config(args.config, spec), Provenance("given", "--config")
    db_path = db_to_read(args.db)
    tuned = tuned_config(spec, device.ordinal, db_path) if device is not None else None
    if tuned is not None:
        return tuned, Provenance("tuning-db", f"fastest grouped trial on {device.name}")
    return default_config(spec), Provenance("default", "grouped.config.default_config")


def launcher_call(spec: Any) -> str:
    """The launcher's parameters by name: A, B, offs|counts, [bias], [scale_a, scale_b], D, groups, total_m, stream."""
    return ", ".join(["A", "B", spec.rows_operand, *(["bias"] * spec.has_bias),
                      *(["scale_a", "scale_b"] if spec.fp8 else []), "D", "groups", "total_m", "stream"])


def run_export_grouped(args: argparse.Namespace) -> int:
    if not args.out:
        raise SpecError("export-grouped needs --out DIR: the folder to write")
    spec = spec_from_args(args)
    from ..device import present_device
    from ..export.grouped import export_grouped

    device = present_device()
    device = device if device is not None and device.cc == (9, 0) else None
    config, provenance = chosen(args, spec, device)
    result = export_grouped(spec, config, Path(args.out), "sm_90a", args.name,
                            device.sm_count if device is not None else None, provenance)
    where = f"on {device.name}" if device is not None else "no sm_90 GPU here: a grid of the sm_90a table's SMs"
    print(f"exported {spec.slug()} for sm_90a to {result.path} ({where})")
    print(f"config source: {provenance.describe()}")
    print(f"config: {config_label(config)} {json.dumps(config.to_json(), sort_keys=True)}")
    print(f"launcher: {result.name}({launcher_call(spec)}); grid {result.compiled.source.grid[0]} blocks of "
          f"{result.compiled.source.block[0]} threads")
    print(f"check it: cd {result.path} && cmake -B build && cmake --build build && ./build/{result.name}_check")
    return 0
