"""The model-shape suite (issue 67): GEMMs of public models, each with the epilogue its model runs
after it, ours untuned against cuBLAS, torch eager and torch.compile in one run.

    python bench/bench_models.py --list                        # the suite; no GPU needed
    PYTHONPATH=$PWD/src python bench/bench_models.py --out bench/results/2026-11-29-h200-models.md \\
        --json models.json --budget-s 540                     # bf16 + fp16, peers cuBLAS and eager
    PYTHONPATH=$PWD/src python bench/bench_models.py --subset quick --dtypes bf16 \\
        --peers eager,compile --budget-s 540                  # with torch.compile, on 17 GEMMs
    PYTHONPATH=$PWD/src python bench/bench_models.py --largest 10 --dtypes bf16 \\
        --tune-s 60                                           # issue 67's tuning bar, one GPU a tune

The shapes are bench/model_shapes.py's (96 GEMMs of 14 models, layout nt, prefill / decode / moe),
an evaluation set the chooser never trains on. Per GEMM and dtype:
- ours plain and ours fused: `gemmtune.build(spec)` as a new user gets it (an empty tuning database:
  the shipped table or the chooser decides), without and with the GEMM's epilogue. Every kernel is
  built (NVRTC) up front on a thread pool, then checked against a float64 reference with its output
  poisoned (NaN) before timing, and checked again after;
- cuBLAS: torch.mm alone (no bias, no epilogue), the bar a fused kernel must clear;
- eager: the function the model runs, F.linear(x, W, bias) then the activation and/or + residual;
  for a GEMM without epilogue that is cuBLAS's own row;
- compile (--peers eager,compile): torch.compile of the same function, max-autotune without CUDA
  graphs (gemmtune.baselines.inductor says why); its first call, autotuning included, is its
  compile time. On a GEMM with gemmtune's GELU the peers run F.gelu(approximate="tanh"), the form the
  epilogue computes (the models use the erf form; the two cost the same in eager).
torch's launches are replayed from CUDA graphs, so their host time (tens of µs) is not timed
(docs/timing.md, "cuBLAS's host time"); our kernels are launched directly (a few µs, hidden by the
L2 flush queued before each).

Timing (docs/timing.md): all launches of a GEMM in paired rounds (gemmtune.timing.measure_alternating,
balanced order, L2 flushed before every launch, by a read pass unless --flush write), --rounds of
them; every ratio is the median of the per-round ratios, peer time over ours (above 1: ours is
faster). The table has per row: ours plain vs cuBLAS, ours fused vs eager, vs compile and vs
cuBLAS's GEMM alone; then geomean and min of each ratio over all rows, per dtype, per regime and per
epilogue, and issue 67's bars. --json keeps every per-round time.

--largest N keeps the selection's N GEMMs of most FLOPs, plain (the tuning bar is ours against cuBLAS);
--tune-s S first runs `gemmtune tune M= N= K= --time S` for each of them (its own process and database,
as many at once as there are GPUs, each on its own) and builds ours from those databases.

GPU time on an H200 (estimates; --list prints them for a selection): about 1 minute of start-up
(torch, CUDA, the parallel builds on 16 cores), then about 1 s per GEMM and dtype (the whole suite,
both dtypes: about 4-5 minutes); the compile peer adds 20-60 s per GEMM (max-autotune benchmarks
its templates per shape): keep it to a subset (--subset quick: 17 GEMMs). --budget-s stops starting
GEMMs once the next would pass the budget; the files written so far (after every GEMM) stay.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_shapes import DTYPES, EPILOGUES, REGIMES, ModelGemm, quick_suite, suite  # noqa: E402

COMPILE_MODE = "max-autotune-no-cudagraphs"  # as gemmtune.baselines.inductor.MODE
PEERS = ("eager", "compile")
# Launch names, in the order of the table's columns.
CUBLAS, PLAIN, FUSED, EAGER, COMPILED = "cuBLAS", "ours plain", "ours fused", "eager", "compile"
UNTUNED = "ours untuned"  # with --tune-s: the plain kernel from an empty database, timed in the same rounds
EST_START_S, EST_CASE_S, EST_COMPILE_S = 60.0, 1.2, 40.0  # for --list's estimate (H200, 16 cores)
EST_TUNE_EXTRA_S = 15.0  # a `tune --time S` command's wall time beyond S (set-up, cuBLAS, re-measuring its top 5)
DEVICE = "cuda"  # where tensors live; the CPU tests run a case on "cpu" with stand-ins for the GPU parts


# --- what to run (no GPU) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One GEMM of the suite in one dtype."""

    gemm: ModelGemm
    dtype: str
    with_compile: bool = False

    @property
    def fused(self) -> bool:
        return self.gemm.epilogue != "none"

    def spec(self, with_epilogue: bool = True):
        return self.gemm.spec(self.dtype, with_epilogue)

    @property
    def label(self) -> str:
        g = self.gemm
        return f"{g.model} {g.layer} {g.m}x{g.n}x{g.k} {self.dtype} {g.epilogue}"


def _names(text: str | None) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()] if text else []


def select_cases(subset: str, models: str | None, regimes: str | None, dtypes: str, limit: int | None,
                 peers: tuple[str, ...], compile_subset: str) -> list[Case]:
    """The suite's cases after the filters, dtypes interleaved per GEMM; `compile` marks the cases
    (those of `compile_subset`) where torch.compile is a peer."""
    gemms = quick_suite() if subset == "quick" else suite()
    wanted_models = [name.lower() for name in _names(models)]
    wanted_regimes = set(_names(regimes)) or set(REGIMES)
    compile_rows = set(quick_suite() if compile_subset == "quick" else suite())
    cases = [Case(g, dtype, "compile" in peers and g in compile_rows) for g in gemms for dtype in _names(dtypes)
             if g.regime in wanted_regimes and (not wanted_models or any(w in g.model.lower() for w in wanted_models))]
    return cases[:limit] if limit else cases


def largest_cases(cases: list[Case], count: int) -> list[Case]:
    """The cases of the `count` distinct shapes with the most FLOPs, without their epilogues (one case per
    shape and dtype: layers sharing a shape are one GEMM once the epilogue is gone)."""
    shapes = sorted({c.gemm.shape for c in cases}, key=lambda s: (-s[0] * s[1] * s[2], s))[:count]
    plain = {(c.gemm.shape, c.dtype): Case(dataclasses.replace(c.gemm, epilogue="none"), c.dtype)
             for c in reversed(cases) if c.gemm.shape in shapes}  # reversed: the first layer of a shape stays
    return sorted(plain.values(), key=lambda c: (shapes.index(c.gemm.shape), c.dtype))


def estimate_s(cases: list[Case], tune_s: float = 0.0, gpus: int = 1) -> float:
    tuning = math.ceil(len(cases) / gpus) * (tune_s + EST_TUNE_EXTRA_S) if tune_s else 0.0
    return EST_START_S + EST_CASE_S * len(cases) + EST_COMPILE_S * sum(c.with_compile for c in cases) + tuning


def list_text(cases: list[Case], tune_s: float | None = None) -> str:
    """The selection as a markdown table, with its size and estimated GPU time (tunes on one GPU)."""
    lines = ["| model | layer | regime | M | N | K | epilogue | dtype | compile | tokens | source |",
             "|---|---|---|---:|---:|---:|---|---|---|---|---|"]
    for c in cases:
        g = c.gemm
        lines.append(f"| {g.model} | {g.layer} | {g.regime} | {g.m} | {g.n} | {g.k} | {g.epilogue} | {c.dtype} | "
                     f"{'yes' if c.with_compile else ''} | {g.tokens} | {g.source} |")
    gemms = {c.gemm for c in cases}
    lines += ["", f"{len(cases)} cases: {len(gemms)} GEMMs of {len({g.model for g in gemms})} models, "
              f"{sum(c.with_compile for c in cases)} with the compile peer; estimated H200 time "
              f"{estimate_s(cases, tune_s or 0.0) / 60:.1f} min"]
    return "\n".join(lines)


# --- our kernels, built in parallel up front -------------------------------------------------------
@dataclass(frozen=True)
class Built:
    """`gemmtune.build(spec)`'s kernel, or why there is none."""

    kernel: Any  # gemmtune.build.Kernel or None
    error: str = ""

    @property
    def describe(self) -> str:
        if self.kernel is None:
            return f"build failed: {self.error}"
        return f"{self.kernel.family} {self.kernel.config.describe()} ({self.kernel.config_source.split(' (')[0]})"


def build_one(spec, db_path: Path) -> Built:
    import gemmtune
    from gemmtune.errors import GemmtuneError

    try:
        return Built(gemmtune.build(spec, db_path=db_path))
    except GemmtuneError as err:  # a value: the row says why, the run goes on
        return Built(None, str(err))
    except Exception as err:  # a bug in one generator must not cost the other rows their scarce GPU run
        return Built(None, f"{type(err).__name__}: {err}")


def case_specs(cases: list[Case]) -> list[Any]:
    """Every distinct spec of the cases, plain and fused."""
    return list(dict.fromkeys(s for c in cases for s in {c.spec(False), c.spec(True)}))


def build_all(specs: list[Any], db_for: Callable[[Any], Path], workers: int) -> dict[Any, Built]:
    """Each spec's kernel from the tuning database `db_for(spec)`, compiled on `workers` threads (NVRTC lets
    go of the GIL while it compiles)."""
    from gemmtune.device import query_device

    query_device()  # cached: the threads' present_device() needs no driver call of its own
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(specs, pool.map(lambda spec: build_one(spec, db_for(spec)), specs)))


# --- issue 67's tuning bar: each GEMM tuned first, one GPU a tune ----------------------------------
@dataclass(frozen=True)
class Tuned:
    """One `gemmtune tune` run: its database, exit status, wall time and the last lines it printed."""

    spec: Any
    db_path: Path
    returncode: int
    wall_s: float
    tail: str


def tune_command(spec, seconds: float, db_path: Path) -> list[str]:
    return [sys.executable, "-m", "gemmtune.cli", "tune", f"M={spec.m}", f"N={spec.n}", f"K={spec.k}",
            "--dtype", spec.dtype, "--layout", spec.layout, "--time", f"{seconds:g}", "--db", str(db_path)]


def tune_all(specs: list[Any], seconds: float, folder: Path, gpus: int) -> list[Tuned]:
    """Each spec tuned for `seconds` by the CLI in its own process and database, `gpus` at once (each
    process sees one GPU: CUDA_VISIBLE_DEVICES); a tune that fails leaves an empty database (untuned)."""
    free: queue.Queue[int] = queue.Queue()
    for gpu in range(gpus):
        free.put(gpu)

    def tune(indexed: tuple[int, Any]) -> Tuned:
        index, spec = indexed
        db_path, gpu = folder / f"tuned-{index}.sqlite", free.get()
        started = time.perf_counter()
        try:
            done = subprocess.run(tune_command(spec, seconds, db_path), capture_output=True, text=True,
                                  env={**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "COLUMNS": "160"},
                                  timeout=3 * seconds + 300)
            code, text = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:
            code, text = -1, f"timed out after {err.timeout:.0f} s"
        finally:
            free.put(gpu)
        tuned = Tuned(spec, db_path, code, time.perf_counter() - started, "\n".join(text.strip().splitlines()[-8:]))
        print(f"tuned {spec.m}x{spec.n}x{spec.k} {spec.dtype} on GPU {gpu}: rc {code}, {tuned.wall_s:.0f} s\n"
              f"{tuned.tail}", flush=True)
        return tuned

    with ThreadPoolExecutor(gpus) as pool:
        return list(pool.map(tune, enumerate(specs)))


# --- operands, reference and the peers' function (torch) -------------------------------------------
GELU_K = math.sqrt(2.0 / math.pi)
# gemmtune.epilogue's float64 references, spelled in torch so a large D is judged on the GPU
# (tests/test_bench_sets.py compares the two on the CPU).
EPILOGUE64: dict[str, Callable[[Any, Any, dict], Any]] = {
    "bias_col": lambda torch, v, x: v + x["bias"][None, :],
    "relu": lambda torch, v, x: torch.clamp_min(v, 0.0),
    "gelu": lambda torch, v, x: 0.5 * v * (1.0 + torch.tanh(GELU_K * (v + 0.044715 * v**3))),
    "add": lambda torch, v, x: v + x["C"],
}


def epilogue64(torch: Any, epilogue, product: Any, operands: dict) -> Any:
    """`epilogue` (a gemmtune Epilogue) applied in float64 to `product`, operands by name (bias, C)."""
    v = product.double()
    extra = {name: value.double() for name, value in operands.items()}
    for name in epilogue.ops:
        v = EPILOGUE64[name](torch, v, extra)
    return v


@dataclass(frozen=True)
class Operands:
    """X (M×K), W (N×K, as nn.Linear stores it), the bias (N) and the residual (M×N) where the
    epilogue reads them, uniform in [-1, 1] rounded to their storage types (as verify.make_inputs)."""

    x: Any
    w: Any
    bias: Any = None
    residual: Any = None

    def named(self) -> dict:
        """The epilogue's operands under gemmtune's argument names."""
        return {name: value for name, value in (("bias", self.bias), ("C", self.residual)) if value is not None}

    def bindings(self, out: Any) -> dict[str, int]:
        """Device pointers by kernel argument name, D = `out`."""
        return {"A": self.x.data_ptr(), "B": self.w.data_ptr(), "D": out.data_ptr(),
                **{name: value.data_ptr() for name, value in self.named().items()}}


TORCH_TYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def make_operands(torch: Any, spec, seed: int, device: str | None = None) -> Operands:
    device = device or DEVICE
    generator = torch.Generator(device=device).manual_seed(seed)

    def uniform(shape: tuple[int, ...], operand: str) -> Any:
        values = torch.rand(shape, generator=generator, device=device, dtype=torch.float32) * 2 - 1
        return values.to(getattr(torch, TORCH_TYPES[spec.storage_dtype(operand)]))

    wanted = {op.name for op in spec.epilogue.operands()}
    return Operands(uniform((spec.m, spec.k), "A"), uniform((spec.n, spec.k), "B"),
                    uniform((spec.n,), "bias") if "bias" in wanted else None,
                    uniform((spec.m, spec.n), "C") if "C" in wanted else None)


def product64(operands: Operands) -> Any:
    """X·Wᵀ in float64 of the rounded inputs: the reference of the GEMM alone."""
    return operands.x.double() @ operands.w.double().t()


def model_function(torch: Any, epilogue) -> Callable[..., Any]:
    """What the model runs: F.linear (with the bias where the layer has one), then the activation,
    then + residual; the function eager runs and torch.compile is given."""
    ops = epilogue.ops
    unknown = set(ops) - set(EPILOGUE64)
    if unknown or list(ops) != sorted(ops, key=list(EPILOGUE64).index):
        raise ValueError(f"no model function for epilogue {epilogue}")
    functional = torch.nn.functional

    def linear_then_epilogue(x: Any, w: Any, bias: Any, residual: Any) -> Any:
        y = functional.linear(x, w, bias)
        if "gelu" in ops:
            y = functional.gelu(y, approximate="tanh")
        if "relu" in ops:
            y = functional.relu(y)
        return y + residual if "add" in ops else y
    return linear_then_epilogue


def judge(out: Any, spec, expected: Any, roundings: int = 1) -> str:
    """'ok' or what is wrong: gemmtune's verifier (tolerance by dtype and K, NaN = unwritten)."""
    from gemmtune.verify import compare

    result = compare(out, expected, spec.dtype, spec.k, spec.out_dtype, roundings)
    return "ok" if result.ok else result.message


def graph_replay(torch: Any, call: Callable[[], Any]) -> tuple[Callable[[], None], Any]:
    """`call` captured once in a CUDA graph: (its replay, the output tensor each replay rewrites)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's graph docs ask
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    torch.cuda.synchronize()
    return graph.replay, out


def graph_times(torch: Any, calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """µs of each call's CUDA-graph replay, `rounds` rounds in timing.round_order's balanced order (every call
    in every place and after every other), CUDA events around each replay."""
    from gemmtune.timing import round_order
    from gemmtune.torch.optimize_model import event_seconds

    replays = {name: graph_replay(torch, call)[0] for name, call in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in replays}
    for r in range(rounds):
        for name in round_order(list(replays), r):
            times[name].append(event_seconds(replays[name]) * 1e6)
    return times


# --- one case on the GPU ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One case, measured: per-round seconds of each timed launch, the checks, what ran."""

    case: Case
    times: dict[str, list[float]]
    checks: dict[str, str]  # launch name -> 'ok' or the verifier's message
    kernels: dict[str, str]  # ours plain / ours fused -> family, config (source)
    compile_s: float | None = None
    notes: tuple[str, ...] = ()

    @functools.cached_property
    def ratios(self) -> dict[str, float | None]:
        """Each of ALL_RATIOS by name, computed once (tables and summaries ask for them many times)."""
        return {which.name: paired_ratio(self, which) for which in ALL_RATIOS}

    def to_json(self) -> dict:
        g = self.case.gemm
        return {"model": g.model, "layer": g.layer, "m": g.m, "n": g.n, "k": g.k, "epilogue": g.epilogue,
                "regime": g.regime, "source": g.source, "dtype": self.case.dtype, "kernels": self.kernels,
                "checks": self.checks, "compile_s": self.compile_s, "notes": list(self.notes),
                "median_us": {name: statistics.median(t) * 1e6 for name, t in self.times.items()},
                "ratios": self.ratios,
                "times_us": {name: [round(t * 1e6, 2) for t in times] for name, times in self.times.items()}}


@dataclass(frozen=True)
class Checked:
    """An output tensor of ours, with what it must equal: checked again after timing."""

    out: Any
    spec: Any
    expected: Any


@dataclass
class Launches:
    """The launches of one case, what was found on the way, and the modules to unload after it."""

    calls: dict[str, Callable[[], None]] = field(default_factory=dict)
    outputs: dict[str, Checked] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    loaded: list[Any] = field(default_factory=list)

    def unload(self) -> None:
        for kernel in self.loaded:
            kernel.unload()
        self.loaded.clear()


def bind_ours(kernel: Any, operands: Operands, out: Any, loaded: list) -> Callable[[], None]:
    """`kernel` loaded (appended to `loaded`, to unload after the case) and bound to the operands."""
    from gemmtune.runtime import LoadedKernel

    loaded.append(LoadedKernel(kernel.compiled))
    return loaded[-1].bind(operands.bindings(out))


def add_ours(launches: Launches, torch: Any, name: str, built: Built, operands: Operands, expected: Any) -> None:
    """Our kernel bound to the operands, kept when it is right (poisoned D, one launch, checked)."""
    from gemmtune.errors import GemmtuneError

    if built.kernel is None:
        launches.checks[name] = built.describe
        return
    spec = built.kernel.spec
    out = torch.empty((spec.m, spec.n), dtype=operands.x.dtype, device=DEVICE)
    try:
        launch = bind_ours(built.kernel, operands, out, launches.loaded)
    except GemmtuneError as err:  # cannot load or bind here (resources, arch): the row says so
        launches.checks[name] = f"not run: {err}"
        return
    out.fill_(float("nan"))
    launch()
    torch.cuda.synchronize()
    launches.checks[name] = judge(out, spec, expected)
    if launches.checks[name] == "ok":
        launches.calls[name], launches.outputs[name] = launch, Checked(out, spec, expected)


def add_peer(launches: Launches, torch: Any, name: str, call: Callable[[], Any], spec, expected: Any,
             roundings: int) -> None:
    """A torch launch, replayed from a CUDA graph (directly where capture fails), checked once; an
    answer off our tolerance is noted and still timed (cuBLAS may round differently)."""
    try:
        replay, out = graph_replay(torch, call)
    except RuntimeError as err:
        launches.notes.append(f"{name}: no CUDA graph ({str(err)[:80]}), launched directly")
        replay, out = call, call()
    replay()
    torch.cuda.synchronize()
    launches.checks[name] = judge(out, spec, expected, roundings)
    launches.calls[name] = replay


def add_compiled(launches: Launches, torch: Any, function: Callable, args: tuple, spec, expected: Any) -> float | None:
    """torch.compile of the model's function; returns its compile time (first call)."""
    torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, its own compile time
    compiled = torch.compile(function, mode=COMPILE_MODE, dynamic=False)
    started = time.perf_counter()
    try:
        compiled(*args)
        torch.cuda.synchronize()
    except Exception as err:  # a peer that cannot compile is a note, not the end of the run
        launches.notes.append(f"compile failed: {type(err).__name__}: {str(err)[:120]}")
        return None
    compile_s = time.perf_counter() - started
    add_peer(launches, torch, COMPILED, lambda: compiled(*args), spec, expected, 1 + len(spec.epilogue.ops))
    return compile_s


@dataclass(frozen=True)
class RunSettings:
    rounds: int
    flush: str
    lead_us: float
    peers: str  # said in the table's header
    commit: str
    seed: int = 67
    tune_s: float | None = None  # ours from a `tune --time tune_s` of each spec, else untuned


def run_case(case: Case, built: dict, settings: RunSettings) -> Outcome:
    """Set up, check and time one case; our modules are unloaded after it whatever happens."""
    launches = Launches()
    try:
        return measure_case(case, built, settings, launches)
    finally:
        launches.unload()


def measure_case(case: Case, built: dict, settings: RunSettings, launches: Launches) -> Outcome:
    from gemmtune.device import query_device
    from gemmtune.timing import TimingProtocol, measure_alternating

    compile_s = set_up(case, built, settings, launches)
    protocol = TimingProtocol(warmup=3, flush_mode=settings.flush)
    times = measure_alternating(launches.calls, settings.rounds, query_device().l2_bytes, protocol,
                                lead_s=settings.lead_us * 1e-6)
    for name, checked in launches.outputs.items():  # checked again: what the timed launches left
        after = judge(checked.out, checked.spec, checked.expected)
        if after != "ok":
            launches.checks[name] = f"after timing: {after}"
    spec, bare = case.spec(True), case.spec(False)
    kernels = {PLAIN: built[bare].describe, **({FUSED: built[spec].describe} if case.fused else {}),
               **({UNTUNED: built[UNTUNED, bare].describe} if (UNTUNED, bare) in built else {})}
    return Outcome(case, times, launches.checks, kernels, compile_s, tuple(launches.notes))


def set_up(case: Case, built: dict, settings: RunSettings, launches: Launches) -> float | None:
    """Operands, the float64 references, and every launch of the case, checked (returns the compile
    peer's compile time)."""
    import torch

    spec, bare = case.spec(True), case.spec(False)
    operands = make_operands(torch, spec, settings.seed)
    expected_bare = product64(operands)
    expected = epilogue64(torch, spec.epilogue, expected_bare, operands.named())
    gemm_out = torch.empty((spec.m, spec.n), dtype=operands.x.dtype, device=DEVICE)
    w_t = operands.w.t()
    add_peer(launches, torch, CUBLAS, lambda: torch.mm(operands.x, w_t, out=gemm_out), bare, expected_bare, 1)
    add_ours(launches, torch, PLAIN, built[bare], operands, expected_bare)
    if (UNTUNED, bare) in built:
        add_ours(launches, torch, UNTUNED, built[UNTUNED, bare], operands, expected_bare)
    function, args = model_function(torch, spec.epilogue), (operands.x, operands.w, operands.bias, operands.residual)
    if case.fused:
        add_ours(launches, torch, FUSED, built[spec], operands, expected)
        add_peer(launches, torch, EAGER, lambda: function(*args), spec, expected, 1 + len(spec.epilogue.ops))
    return add_compiled(launches, torch, function, args, spec, expected) if case.with_compile else None


# --- ratios and the summary (no GPU) ---------------------------------------------------------------
@dataclass(frozen=True)
class Ratio:
    """Peer time over ours, round by round (above 1: ours is faster)."""

    name: str
    ours: str
    peer: str


RATIOS = (Ratio("plain vs cuBLAS", PLAIN, CUBLAS), Ratio("fused vs eager", FUSED, EAGER),
          Ratio("fused vs compile", FUSED, COMPILED), Ratio("fused vs cuBLAS", FUSED, CUBLAS))
TUNED_VS_UNTUNED = Ratio("tuned vs untuned", PLAIN, UNTUNED)  # --tune-s runs only
ALL_RATIOS = (*RATIOS, TUNED_VS_UNTUNED)


def times_of(outcome: Outcome, name: str) -> list[float] | None:
    """A launch's per-round times; without an epilogue ours fused is ours plain and eager is cuBLAS."""
    if not outcome.case.fused:
        name = {FUSED: PLAIN, EAGER: CUBLAS}.get(name, name)
    return outcome.times.get(name)


def paired_ratio(outcome: Outcome, which: Ratio) -> float | None:
    """The median of the per-round ratios peer / ours; None where either was not timed."""
    from gemmtune.timing import ratio_to

    ours, peer = times_of(outcome, which.ours), times_of(outcome, which.peer)
    return ratio_to(peer, ours)[0] if ours and peer else None


def ratio(outcome: Outcome, which: Ratio) -> float | None:
    return outcome.ratios[which.name]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def groups(outcomes: list[Outcome]) -> list[tuple[str, list[Outcome]]]:
    """All rows, then per dtype, per regime, with an epilogue, and per epilogue."""
    pick = lambda test: [o for o in outcomes if test(o)]  # noqa: E731
    found = [("all", outcomes)]
    found += [(dtype, pick(lambda o, d=dtype: o.case.dtype == d)) for dtype in DTYPES]
    found += [(regime, pick(lambda o, r=regime: o.case.gemm.regime == r)) for regime in REGIMES]
    found += [("with an epilogue", pick(lambda o: o.case.fused))]
    found += [(f"epilogue {e}", pick(lambda o, e=e: o.case.gemm.epilogue == e)) for e in EPILOGUES]
    return [(name, rows) for name, rows in found if rows]


def summary_cell(outcomes: list[Outcome], which: Ratio) -> str:
    values = [v for o in outcomes if (v := ratio(o, which)) is not None]
    return f"{geomean(values):.3f} (min {min(values):.3f}, n={len(values)})" if values else "-"


def lowest_lines(outcomes: list[Outcome]) -> list[str]:
    lines = []
    for which in RATIOS:
        values = sorted((v, o.case.label) for o in outcomes if (v := ratio(o, which)) is not None)
        if values:
            lines.append(f"- lowest {which.name}: " + "; ".join(f"{v:.3f} {label}" for v, label in values[:3]))
    return lines


def bars_lines(outcomes: list[Outcome]) -> list[str]:
    """Issue 67's bars for the untuned suite, met or not, on the rows measured."""
    def stats(rows: list[Outcome], which: Ratio) -> tuple[float, float] | None:
        values = [v for o in rows if (v := ratio(o, which)) is not None]
        return (geomean(values), min(values)) if values else None

    fused = [o for o in outcomes if o.case.fused]
    with_epilogue = "(rows with an epilogue)"
    checks = [("plain vs cuBLAS: geomean >= 1.05, none < 0.90", stats(outcomes, RATIOS[0]), 1.05, 0.90),
              (f"fused vs eager {with_epilogue}: geomean >= 1.15, none < 1.00", stats(fused, RATIOS[1]), 1.15, 1.00),
              (f"fused vs compile {with_epilogue}: geomean >= 1.00", stats(fused, RATIOS[2]), 1.00, 0.0),
              (f"fused vs cuBLAS alone {with_epilogue}: none < 0.95", stats(fused, RATIOS[3]), 0.0, 0.95)]
    lines = []
    for text, found, geo_bar, min_bar in checks:
        if found is None:
            lines.append(f"- {text}: not measured")
            continue
        met = found[0] >= geo_bar and found[1] >= min_bar
        lines.append(f"- {text}: geomean {found[0]:.3f}, min {found[1]:.3f}: **{'met' if met else 'not met'}**")
    return lines


def summary_text(outcomes: list[Outcome]) -> str:
    head = "| rows | " + " | ".join(f"{r.name}: geomean (min, n)" for r in RATIOS) + " |"
    lines = [head, "|---|" + "---|" * len(RATIOS)]
    lines += [f"| {name} | " + " | ".join(summary_cell(rows, r) for r in RATIOS) + " |"
              for name, rows in groups(outcomes)]
    tuned = [v for o in outcomes if (v := ratio(o, TUNED_VS_UNTUNED)) is not None]
    if tuned:
        lines += ["", f"Tuned vs untuned (ours from an empty database, timed in the same rounds): geomean "
                      f"{geomean(tuned):.3f}, min {min(tuned):.3f}, max {max(tuned):.3f}, n={len(tuned)}"]
    bars = "tuned" if tuned else "untuned"
    return "\n".join(lines + ["", *lowest_lines(outcomes), "", f"Issue 67's bars ({bars}):", *bars_lines(outcomes)])


def _us(outcome: Outcome, name: str) -> str:
    times = times_of(outcome, name)
    return f"{statistics.median(times) * 1e6:.1f}" if times else "-"


def _ratio_cell(outcome: Outcome, which: Ratio) -> str:
    value = ratio(outcome, which)
    return f"{value:.3f}" if value is not None else "-"


def row_text(o: Outcome) -> str:
    g = o.case.gemm
    checks = "; ".join(f"{name}: {text}" for name, text in o.checks.items() if text != "ok") or "all ok"
    if o.notes:
        checks += "; " + "; ".join(o.notes)
    ours = o.kernels.get(FUSED, o.kernels[PLAIN])
    return (f"| {g.model} | {g.layer} | {g.regime} | {g.m}x{g.n}x{g.k} | {g.epilogue} | {ours} | "
            + " | ".join(_us(o, name) for name in (CUBLAS, PLAIN, FUSED, EAGER, COMPILED)) + " | "
            + " | ".join(_ratio_cell(o, r) for r in RATIOS) + f" | {checks} |")


def table_text(outcomes: list[Outcome], header: list[str]) -> str:
    lines = list(header)
    for dtype in DTYPES:
        rows = [o for o in outcomes if o.case.dtype == dtype]
        if not rows:
            continue
        lines += ["", f"## {dtype}", "",
                  "| model | layer | regime | M×N×K | epilogue | ours fused (plain where none) | cuBLAS µs | "
                  "plain µs | fused µs | eager µs | compile µs | " + " | ".join(r.name for r in RATIOS)
                  + " | checks |",
                  "|---|---|---|---|---|---|" + "---:|" * (5 + len(RATIOS)) + "---|"]
        lines += [row_text(o) for o in rows]
    return "\n".join(lines + ["", "## Summary", "", summary_text(outcomes)]) + "\n"


# --- the run ---------------------------------------------------------------------------------------
def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def header_lines(settings: RunSettings, not_run: list[Case], failed: list[str]) -> list[str]:
    import torch

    from gemmtune.compiler import nvrtc_version
    from gemmtune.device import query_device

    today = datetime.date.today().isoformat()
    tuned = f"tuned {settings.tune_s:g} s each" if settings.tune_s else "untuned"
    database = (f"the database a `gemmtune tune M= N= K= --time {settings.tune_s:g}` of that GEMM filled just before "
                "(one process and GPU a tune)" if settings.tune_s else "an empty tuning database")
    lines = [f"# Model-shape suite, {tuned} ({query_device().name}, {today})", "",
             f"`python bench/bench_models.py` (commit {settings.commit}, torch {torch.__version__}, NVRTC "
             f"{nvrtc_version()}): GEMMs of public model configs (bench/model_shapes.py), layout nt, each with its "
             f"model's epilogue. Ours: `gemmtune.build(spec)` with {database}, checked against a float64 "
             "reference (poisoned D) before and after timing. cuBLAS: torch.mm alone; eager: F.linear (+bias) then "
             f"the activation / + residual; compile: torch.compile {COMPILE_MODE} of the same function; torch's "
             f"launches replayed from CUDA graphs. Peers: {settings.peers}.",
             f"Timing: {settings.rounds} paired rounds in balanced order, L2 flushed ({settings.flush} pass) before "
             f"every launch{f', {settings.lead_us:.0f} µs lead' if settings.lead_us else ''}; µs are medians; "
             "a ratio is the median of the per-round ratios peer time / ours (above 1: ours is faster). Without an "
             "epilogue 'fused' is ours plain and eager is cuBLAS."]
    if not_run:
        lines.append(f"Not run (yet, or past the budget): {len(not_run)} cases, from {not_run[0].label}.")
    lines += [f"Failed: {text}" for text in failed]
    return lines


def write_outputs(args: argparse.Namespace, outcomes: list[Outcome], header: list[str]) -> str:
    text = table_text(outcomes, header)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"header": header, "rows": [o.to_json() for o in outcomes]}))
    return text


def outcomes_from_json(path: Path) -> tuple[list[Outcome], list[str]]:
    """The outcomes and header a run's --json kept: its tables written again without the GPU."""
    data = json.loads(Path(path).read_text())
    outcomes = []
    for row in data["rows"]:
        gemm = ModelGemm(row["model"], row["layer"], row["m"], row["n"], row["k"], row["epilogue"], row["regime"],
                         row["source"], "")
        times = {name: [t / 1e6 for t in values] for name, values in row["times_us"].items()}
        outcomes.append(Outcome(Case(gemm, row["dtype"]), times, row["checks"], row["kernels"], row["compile_s"],
                                tuple(row["notes"])))
    return outcomes, data["header"]


def run(args: argparse.Namespace, cases: list[Case]) -> int:
    started = time.perf_counter()
    compile_where = f" (compile on the {args.compile_subset} subset's GEMMs)" if "compile" in args.peer_names else ""
    settings = RunSettings(args.rounds, args.flush, args.lead_us, ", ".join((CUBLAS, *args.peer_names)) + compile_where,
                           args.commit or git_commit(), tune_s=args.tune_s)
    folder = Path(tempfile.mkdtemp())
    empty = folder / "empty.sqlite"  # untuned: a fresh, empty tuning database
    databases: dict[Any, Path] = {}
    if args.tune_s:
        import torch

        tuned = tune_all(list(dict.fromkeys(c.spec(False) for c in cases)), args.tune_s, folder,
                         max(1, torch.cuda.device_count()))
        databases = {t.spec: t.db_path for t in tuned}
        print(f"tuned {len(tuned)} GEMMs ({sum(t.returncode != 0 for t in tuned)} failed) in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    built = build_all(case_specs(cases), lambda spec: databases.get(spec, empty), args.workers)
    # the tuned specs' untuned kernels too, timed beside the tuned ones in the same rounds
    built.update({(UNTUNED, spec): b for spec, b in build_all(list(databases), lambda spec: empty, args.workers).items()})
    print(f"built {len(built)} kernels in {time.perf_counter() - started:.0f} s "
          f"({sum(b.kernel is None for b in built.values())} failed)", flush=True)
    outcomes: list[Outcome] = []
    failed: list[str] = []
    failed_in_a_row = 0
    for index, case in enumerate(cases):
        elapsed = time.perf_counter() - started
        if args.budget_s and elapsed + EST_CASE_S + EST_COMPILE_S * case.with_compile > args.budget_s:
            print(f"budget: stopping before {case.label} ({len(cases) - index} cases left)", flush=True)
            break
        try:
            outcomes.append(run_case(case, built, settings))
        except Exception as err:  # one case's failure (memory, a launch) is reported; the rest still run
            failed.append(f"{case.label}: {type(err).__name__}: {str(err)[:200]}")
            failed_in_a_row += 1
            print(f"[{index + 1}/{len(cases)} {elapsed:.0f}s] FAILED {failed[-1]}", flush=True)
            if failed_in_a_row == 3:  # the GPU context is likely gone: later cases would fail alike
                print("three cases failed in a row: stopping", flush=True)
                break
            continue
        failed_in_a_row = 0
        print(f"[{index + 1}/{len(cases)} {elapsed:.0f}s] {progress_text(outcomes[-1])}", flush=True)
        not_run = cases[index + 1:]
        write_outputs(args, outcomes, header_lines(settings, not_run, failed))
    print(summary_text(outcomes) if outcomes else "nothing measured", flush=True)
    return 0 if outcomes and not failed else 1


def progress_text(o: Outcome) -> str:
    ratios = ", ".join(f"{r.name} {_ratio_cell(o, r)}" for r in ALL_RATIOS if ratio(o, r) is not None)
    bad = [f"{name}: {text}" for name, text in o.checks.items() if text != "ok"]
    return f"{o.case.label}: cuBLAS {_us(o, CUBLAS)} µs; {ratios}" + (f"; {'; '.join(bad)}" if bad else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true",
                        help="print the selected cases and the time estimate, then stop (no GPU)")
    parser.add_argument("--subset", choices=("all", "quick"), default="all",
                        help="all: the whole suite (96 GEMMs); quick: 17 of every regime and epilogue")
    parser.add_argument("--models", help="only models whose name contains one of these, e.g. llama,vit")
    parser.add_argument("--regimes", help=f"only these regimes, of {','.join(REGIMES)}")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="default bf16,fp16")
    parser.add_argument("--limit", type=int, help="only the first N cases of the selection")
    parser.add_argument("--largest", type=int, metavar="N",
                        help="only the selection's N GEMMs of most FLOPs, without their epilogues")
    parser.add_argument("--tune-s", type=float, metavar="SECONDS",
                        help="tune each GEMM this long first (gemmtune tune --time, one GPU a tune) and build ours "
                             "from what it found")
    parser.add_argument("--peers", default="eager",
                        help="beside cuBLAS and eager (always timed): add compile with eager,compile")
    parser.add_argument("--compile-subset", choices=("quick", "all"), default="quick",
                        help="the GEMMs where --peers compile runs (default quick: 17 GEMMs, 20-60 s each)")
    parser.add_argument("--rounds", type=int, default=60, help="paired rounds per case (default 60)")
    parser.add_argument("--flush", choices=("read", "write"), default="read", help="how L2 is emptied (default read)")
    parser.add_argument("--lead-us", type=float, default=0.0, help="hold the GPU this long before each start event")
    parser.add_argument("--workers", type=int, default=16, help="threads compiling our kernels (default 16)")
    parser.add_argument("--budget-s", type=float, help="start no case past this many seconds of the run")
    parser.add_argument("--out", type=Path, help="write the markdown table here (rewritten after every case)")
    parser.add_argument("--json", type=Path, help="write every row with its per-round times here")
    parser.add_argument("--commit", help="the commit measured, for the header (default: git's HEAD where it can tell)")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="no GPU: write --out again from a run's --json (its rows and header)")
    args = parser.parse_args(argv)
    asked = set(_names(args.peers))
    args.peer_names = tuple(peer for peer in PEERS if peer in asked or peer == "eager")
    unknown = asked - set(PEERS) or set(_names(args.dtypes)) - set(DTYPES)
    if unknown:
        parser.error(f"unknown peers or dtypes: {', '.join(sorted(unknown))}")
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    if args.largest is not None and args.largest < 1 or args.tune_s is not None and args.tune_s <= 0:
        parser.error("--largest and --tune-s must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = select_cases(args.subset, args.models, args.regimes, args.dtypes, args.limit, args.peer_names,
                         args.compile_subset)
    if args.largest:
        cases = largest_cases(cases, args.largest)
    if args.list:
        print(list_text(cases, args.tune_s))
        return 0
    if args.from_json:
        outcomes, header = outcomes_from_json(args.from_json)
        text = table_text(outcomes, header)
        if args.out:
            args.out.write_text(text)
        print(summary_text(outcomes))
        return 0
    if not cases:
        print("no case matches the filters", file=sys.stderr)
        return 2
    return run(args, cases)


if __name__ == "__main__":
    raise SystemExit(main())
