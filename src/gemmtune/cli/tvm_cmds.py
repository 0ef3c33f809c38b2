"""Verbs of the TVM backend: `ladder --backend tvm` and `tvm test|evaluate|show-cuda|ladder|tune`.

`tune --backend tvm|tvm-manual` lives with the tuner's verbs: tune_cmds calls `run_tvm_tune`
(and may add the TVM options with `add_tvm_tune_arguments`). Without the tvm extra every verb
here stops with one line (TVM_EXTRA_HINT).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError
from ..timing import TimingProtocol
from .common import add_spec_arguments, spec_from_args

BACKENDS = ("tvm", "numba")  # numba: the CUDA-C ladder beside its numba-cuda twin (numba_cmds)
TUNE_BACKENDS = {"tvm": "auto", "tvm-manual": "manual"}
DEFAULT_TUNE_TRIALS = 64


def register(subparsers) -> None:
    if "ladder" not in subparsers.choices:  # another module may own `ladder` for the native kernels
        ladder = subparsers.add_parser("ladder", help="the TVM optimization ladder: naive, then each manual step",
                                       description="Each row adds one manual TensorIR schedule step; with a GPU "
                                                   "every row is verified and timed, without one compiled only.")
        _ladder_arguments(ladder)
        ladder.add_argument("--backend", choices=BACKENDS, default="tvm", help="schedule backend (default tvm)")
    tvm = subparsers.add_parser("tvm", help="the TVM TensorIR backend: test, evaluate, show-cuda, ladder, tune",
                                description="TVM schedules converted to gemmtune kernels (NVRTC, gemmtune timing).")
    tvm.set_defaults(run=lambda _args: tvm.print_help() or 2)
    verbs = tvm.add_subparsers(dest="tvm_verb", metavar="VERB")
    _register_test(verbs)
    _register_evaluate(verbs)
    _register_show_cuda(verbs)
    _ladder_arguments(verbs.add_parser("ladder", help="same as `gemmtune ladder --backend tvm`"))
    tune = verbs.add_parser("tune", help="MetaSchedule tuning (same as `gemmtune tune --backend tvm`)")
    add_spec_arguments(tune)
    tune.add_argument("--trials", type=int, help=f"measured candidates (default {DEFAULT_TUNE_TRIALS})")
    tune.add_argument("--seed", type=int, default=None, help="MetaSchedule's random seed")
    tune.add_argument("--backend", choices=tuple(TUNE_BACKENDS), default="tvm", help="tvm: MetaSchedule's own space;"
                      " tvm-manual: the five manual steps with sampled tiles")
    add_tvm_tune_arguments(tune)
    tune.set_defaults(run=run_tvm_tune)


def _arch_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", help="target arch (default: the GPU's, else sm_90)")


def _ladder_arguments(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    _arch_argument(parser)
    parser.add_argument("--show", metavar="STEP", help="print the TVMScript after STEP instead of the table")
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds of timed runs per kernel")
    parser.set_defaults(run=run_tvm_ladder)


def _schedule_arguments(parser: argparse.ArgumentParser) -> None:
    add_spec_arguments(parser)
    _arch_argument(parser)
    parser.add_argument("--apply-trace", "--trace", dest="trace", type=Path,
                        help="tuned: a saved apply_trace file (best_trace.py) to re-apply")
    parser.add_argument("--work-dir", type=Path, help="tuned: a tune's work dir (its best record)")


def _register_test(verbs) -> None:
    test = verbs.add_parser("test", help="check a TVM kernel against numpy on fresh random inputs",
                            description="With a GPU: the scheduled kernel, verified on ROUNDS random inputs. "
                                        "Without one: the unscheduled workload on the CPU (llvm).")
    _schedule_arguments(test)
    test.add_argument("--schedule", default="manual", help="naive, manual, dlight, tuned or a ladder step")
    test.add_argument("--rounds", type=int, default=5, help="random input sets (default 5)")
    test.set_defaults(run=run_tvm_test)


def _register_evaluate(verbs) -> None:
    evaluate = verbs.add_parser("evaluate", help="verify and time one TVM schedule on the GPU (vs cuBLAS)")
    _schedule_arguments(evaluate)
    which = evaluate.add_mutually_exclusive_group(required=True)
    for name in ("naive", "manual", "tuned", "dlight"):
        which.add_argument(f"--{name}", dest="schedule", action="store_const", const=name, help=f"the {name} schedule")
    evaluate.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs (default 0.3)")
    evaluate.add_argument("--no-cublas", action="store_true", help="skip the cuBLAS comparison")
    evaluate.set_defaults(run=run_tvm_evaluate)


def _register_show_cuda(verbs) -> None:
    show = verbs.add_parser("show-cuda", help="print the CUDA of a TVM schedule (no GPU needed)")
    _schedule_arguments(show)
    show.add_argument("--schedule", default="manual", help="naive, manual, dlight, tuned or a ladder step")
    show.add_argument("--raw", action="store_true", help="TVM's text as generated (all kernels, TVM's includes)")
    show.set_defaults(run=run_tvm_show_cuda)


def add_tvm_tune_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `tune --backend tvm|tvm-manual` reads (skipping any the parser already has)."""
    options: tuple[tuple[str, dict], ...] = (
        ("--work-dir", {"type": Path, "help": "TVM: MetaSchedule work dir (JSON database, best_trace.py); "
                                              "default ./tvm-tune/<spec>-<space>"}),
        ("--cost-model", {"choices": ("xgb", "random"),
                          "help": "TVM: MetaSchedule cost model (default xgb when xgboost imports, else random)"}),
        ("--trials-per-iter", {"type": int, "default": 64, "help": "TVM: candidates measured per search round"}),
        ("--arch", {"help": "target arch (default: the GPU's, else sm_90)"}),
    )
    for flag, kwargs in options:
        try:
            parser.add_argument(flag, **kwargs)
        except argparse.ArgumentError:
            continue  # the tune verb already defines it


# --- runners ----------------------------------------------------------------------------------
def _require() -> None:
    from ..tvm import require_tvm

    require_tvm()


def _arch(args: argparse.Namespace) -> str:
    from ..build import target_arch

    return target_arch(getattr(args, "arch", None))


def _gpu() -> bool:
    from ..device import gpu_available

    return gpu_available()


def check_trace_file(path: Path) -> None:
    """InputFileError (one line, exit 2) unless `path` is Python text defining apply_trace at top
    level, checked with ast before TVM's loader runs it."""
    import ast

    from ..input_files import InputFileError, read_text

    what = "an apply_trace file (best_trace.py)"
    try:
        tree = ast.parse(read_text(path, what), str(path))
    except SyntaxError as err:
        raise InputFileError(f"{path} is not {what}: line {err.lineno}: {err.msg}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "apply_trace" for node in tree.body):
        raise InputFileError(f"{path} is not {what}: it defines no apply_trace(sch) function")


def tuned_from(args: argparse.Namespace):
    """--trace / --work-dir as a TunedFrom, each checked first: a trace that is not a text file, or a
    work dir that is not a folder, is one line (exit 2) here rather than a traceback inside TVM."""
    from ..input_files import InputFileError
    from ..tvm.schedules import TunedFrom

    trace, work_dir = getattr(args, "trace", None), getattr(args, "work_dir", None)
    if trace is not None:
        check_trace_file(trace)
    if work_dir is not None and not Path(work_dir).is_dir():
        raise InputFileError(f"{work_dir} is not a MetaSchedule work dir: "
                             + ("no such folder" if not Path(work_dir).exists() else "it is a file"))
    return TunedFrom(trace, work_dir)


def run_tvm_ladder(args: argparse.Namespace) -> int:
    if getattr(args, "backend", "tvm") == "numba":
        from .numba_cmds import run_numba_ladder

        return run_numba_ladder(args)
    _require()
    from ..tvm import ladder
    from ..tvm.rows import ladder_rows

    spec, arch = spec_from_args(args, "the TVM backend"), _arch(args)
    if args.show:
        done = ladder.schedule_rung(spec, args.show)
        print(done.mod.script())
        for note in done.notes:
            print(f"# completed: {note}")
        return 0
    on_gpu, protocol = _gpu(), TimingProtocol(min_time_s=args.min_time)
    rows = ladder_rows(spec, arch, protocol, on_gpu)  # rows before epilogue_fusion may be 2-kernel sequences
    _print_rows(rows, spec, f"TVM ladder, {spec.short()} ({arch})", on_gpu, protocol if on_gpu else None)
    return 0 if any(r.status in ("ok", "compiled") for r in rows) else 1


def _print_rows(rows: list, spec, title: str, on_gpu: bool, cublas_protocol: TimingProtocol | None = None) -> None:
    """The rows as a table, after a cuBLAS row timed with `cublas_protocol` (None: no cuBLAS row).

    Without a GPU nothing was timed: one plain line per row (status, registers or the reason).
    """
    from .core import print_bench_table

    if not on_gpu:
        print(f"{title}: compiled with NVRTC, not run (no GPU)")
        for r in rows:
            print(f"  {r.name:<18} {r.config:<44} {r.status}: {r.message}")
        return
    if cublas_protocol is not None:
        from ..bench import bench_cublas

        rows = [bench_cublas(spec, cublas_protocol), *rows]
    print_bench_table(rows, title)


def run_tvm_test(args: argparse.Namespace) -> int:
    _require()
    from ..compiler import compile_kernel
    from ..tvm.check import cpu_rounds, gpu_rounds
    from ..tvm.schedules import named_source

    spec, arch = spec_from_args(args, "the TVM backend"), _arch(args)
    if args.rounds < 1:
        raise ConfigError("--rounds must be at least 1")
    compiled = compile_kernel(named_source(spec, args.schedule, arch, tuned=tuned_from(args)), arch)
    print(f"{args.schedule}: {compiled.source.entry} grid {compiled.source.grid} block {compiled.source.block}, "
          f"NVRTC {arch}: {compiled.resources.summary()}")
    if _gpu():
        results, where = gpu_rounds(compiled, args.rounds), f"the {args.schedule} kernel on the GPU"
    else:
        results, where = cpu_rounds(spec, args.rounds), "no GPU: the unscheduled workload on the CPU (llvm)"
    print(f"checking {where} against numpy (float64), {args.rounds} rounds of random inputs")
    for index, result in enumerate(results):
        print(f"  round {index + 1}: {'ok  ' if result.ok else 'FAIL'} rel. error {result.rel_error:.2e} "
              f"(tolerance {result.tolerance:.1e}) {'' if result.ok else result.message}")
    return 0 if all(r.ok for r in results) else 1


def run_tvm_evaluate(args: argparse.Namespace) -> int:
    _require()
    from ..tvm.rows import module_row
    from ..tvm.schedules import named_schedule

    spec, arch = spec_from_args(args, "the TVM backend"), _arch(args)
    if not _gpu():
        from ..errors import NoDeviceError

        raise NoDeviceError("tvm evaluate times on a GPU; `gemmtune tvm test` and `show-cuda` work without one")
    protocol = TimingProtocol(min_time_s=args.min_time)
    # module_row: a schedule TVM lowers to two kernels (naive with relu+add) runs as that launch sequence.
    row = module_row(f"TVM {args.schedule}", args.schedule,
                     lambda: named_schedule(spec, args.schedule, arch, tuned=tuned_from(args)), spec, arch, protocol,
                     True)
    _print_rows([row], spec, f"{spec.short()} ({arch})", True, None if args.no_cublas else protocol)
    return 0 if row.status == "ok" else 1


def run_tvm_show_cuda(args: argparse.Namespace) -> int:
    _require()
    from ..tvm.convert import build_cuda, to_kernel_source
    from ..tvm.schedules import named_schedule

    spec, arch = spec_from_args(args, "the TVM backend"), _arch(args)
    named = named_schedule(spec, args.schedule, arch, tuned=tuned_from(args))
    built = build_cuda(named.mod, arch, symbol=f"{spec.slug()}_tvm")
    if args.raw:
        print(built.cuda)
        for kernel in built.kernels:
            print(f"// {kernel.entry}({', '.join(kernel.params)}) grid {kernel.grid} block {kernel.block}")
        return 0
    source = to_kernel_source(built, spec, named.config)
    print(source.code)
    print(f"// entry {source.entry}({', '.join(source.args)}) grid {source.grid} block {source.block}")
    for note in named.notes:
        print(f"// completed: {note}")
    return 0


def run_tvm_tune(args: argparse.Namespace) -> int:
    """`tune --backend tvm|tvm-manual`: MetaSchedule search, then the best kernel via gemmtune."""
    _require()
    from ..tvm.convert import kernel_source
    from ..tvm.rows import source_row
    from ..tvm.tuning import TuneSettings, tune

    spec, arch = spec_from_args(args, "the TVM backend"), _arch(args)
    backend = getattr(args, "backend", "tvm")
    if backend not in TUNE_BACKENDS:
        raise ConfigError(f"unknown TVM tuning backend '{backend}'; choose {', '.join(TUNE_BACKENDS)}")
    settings = TuneSettings(space=TUNE_BACKENDS[backend], trials=getattr(args, "trials", None) or DEFAULT_TUNE_TRIALS,
                            trials_per_iter=getattr(args, "trials_per_iter", None) or 64,
                            cost_model=getattr(args, "cost_model", None) or "", arch=arch,
                            seed=getattr(args, "seed", None))
    work_dir = getattr(args, "work_dir", None) or Path("tvm-tune") / f"{spec.slug()}-{settings.space}"
    result = tune(spec, work_dir, settings)
    print(result.trace_text)
    if result.time_split():
        print(f"# {result.time_split()}")
    epilogue = "" if spec.epilogue.is_identity else f" --epilogue {spec.epilogue}"
    print(f"# saved to {result.trace_path}; re-apply: gemmtune tvm evaluate --tuned --trace {result.trace_path} "
          f"M={spec.m} N={spec.n} K={spec.k} --layout {spec.layout}{epilogue}")
    source = kernel_source(result.schedule.mod, spec, {"schedule": "tuned", "space": settings.space}, arch)
    row = source_row("TVM tuned", settings.space, lambda: source, arch, TimingProtocol(), True)
    _print_rows([row], spec, f"best of {settings.trials} trials, {spec.short()} ({arch})", True)
    return 0 if row.status in ("ok", "compiled") else 1
