"""Tuning efficiency against a peer: gemmtune's tuner and kernel_tuner 1.5.0 on the same simt space.

    PYTHONPATH=src python bench/peers/kernel_tuner_peer.py 1024 2048 4096 3000x5000x1504 --time 30 --out "$OUT"
    PYTHONPATH=src python bench/peers/kernel_tuner_peer.py --summarize "$OUT"      # table from finished shapes

Per shape (a word N is N³; MxNxK otherwise; fp32, --layout nn), one after the other on one GPU
(gemmtune first on even positions, kernel_tuner first on odd ones):
1. gemmtune: `python -m gemmtune.cli tune ... --family simt --time T --top 0 --db <fresh file>` (its
   shipped defaults: evolutionary search with the cost model, the chooser's 4 seeds first, NVRTC in
   a process pool, each candidate verified then timed in a watched child). Each trial's end time is
   the database's `created`.
2. kernel_tuner: tune_kernel over the same space (kt_space.py: parameters, one restriction per
   gemmtune rule, gemmtune's renderer as the code generator, the same grid), verified against a
   float64 reference through `answer` with an fp32 atol, stopped by strategy_options time_limit
   (default strategy genetic_algorithm; Python's and numpy's global generators seeded with 0,
   since tune_kernel's own `seed` argument is unused in 1.5.0). Each result's end time is its `timestamp`.
3. One clock: every incumbent (best-so-far config) of either tuner whose own time lies within
   --near of its own best (at most --retime of them, best first) is verified and timed again in one
   process with gemmtune's protocol (bench.bench_config: warm-up, median of >= 10 runs, L2 flushed
   before each) and without the flush (warm L2, closer to kernel_tuner's loop); cuBLAS SGEMM
   (torch.mm fp32, TF32 off) likewise, for context.

Both tuners are launched as child processes and their clocks start at the launch (imports, space
construction, the reference and cuBLAS probes all count). The comparison cuts both at T seconds
from launch: "best" is the best incumbent finished by then, on the common clock; "time to 2%" is
when a tuner's incumbent first came within 2% of the best either tuner found by the cut-off.
Writes <out>/<shape>/{gemmtune.db,kt.json,kt_cache.json,retime.json,summary.json},
<out>/results.json and <out>/table.md.

How each tuner times a candidate (own clocks; neither is used to compare the two):
- gemmtune: CUDA events around each launch after an L2 flush (cold cache), 3 warm-up launches, then
  >= 10 and <= 200 runs adding up to >= 0.1 s; the median.
- kernel_tuner: CUDA events around each of `iterations` (7) back-to-back launches, each after a
  synchronize, no flush (warm L2), no warm-up launch besides one untimed run per config for
  verification; the mean.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "src")]

from gemmtune.kernels.simt.config import SimtConfig  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402

WITHIN = 0.02  # "within 2% of the best"
DEFAULT_STRATEGY = "genetic_algorithm"


# --- shapes ---------------------------------------------------------------------------------------
def parse_shape(word: str, layout: str = "nn") -> GemmSpec:
    parts = [int(p) for p in word.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"shape {word!r}: N (for N³) or MxNxK")
    return GemmSpec(*parts, layout=layout)


def slug(spec: GemmSpec) -> str:
    return f"{spec.m}x{spec.n}x{spec.k}_{spec.layout}"


# --- trials on a common footing -------------------------------------------------------------------
@dataclass(frozen=True)
class Trial:
    """One finished candidate of either tuner: seconds from its tuner's launch, its own time."""

    at_s: float
    config: SimtConfig
    own_s: float | None  # None: failed (compile, launch, verification, invalid)
    status: str


def incumbents(trials: list[Trial], cutoff_s: float | None = None) -> list[Trial]:
    """The best-so-far sequence (own clock), in time order, up to `cutoff_s`."""
    best, out = None, []
    for trial in sorted(trials, key=lambda t: t.at_s):
        if cutoff_s is not None and trial.at_s > cutoff_s:
            break
        if trial.own_s is not None and (best is None or trial.own_s < best):
            best = trial.own_s
            out.append(trial)
    return out


def to_retime(trials: list[Trial], near: float, limit: int, cutoff_s: float | None = None) -> list[SimtConfig]:
    """Incumbents up to the cut-off within `near` of the tuner's own best by then, best first, at most `limit`."""
    chain = incumbents(trials, cutoff_s)
    if not chain:
        return []
    best = chain[-1].own_s
    close = [t for t in reversed(chain) if t.own_s <= best * (1 + near)]
    return [t.config for t in close[:limit]]


def first_within(chain: list[Trial], common: dict[str, float], target_s: float) -> float | None:
    """When an incumbent first ran within WITHIN of `target_s` on the common clock (None: never)."""
    for trial in chain:
        seconds = common.get(key(trial.config))
        if seconds is not None and seconds <= target_s * (1 + WITHIN):
            return trial.at_s
    return None


def own_within(chain: list[Trial]) -> float | None:
    """When the tuner's incumbent first came within WITHIN of its own final best (own clock)."""
    if not chain:
        return None
    final = chain[-1].own_s
    return next(t.at_s for t in chain if t.own_s <= final * (1 + WITHIN))


def key(config: SimtConfig) -> str:
    return json.dumps(config.to_json(), sort_keys=True)


# --- gemmtune -----------------------------------------------------------------------------------
def run_gemmtune(spec: GemmSpec, budget_s: float, folder: Path, slack_s: float) -> dict:
    db = folder / "gemmtune.db"
    for stale in folder.glob("gemmtune.db*"):
        stale.unlink()
    command = [sys.executable, "-m", "gemmtune.cli", "tune", f"M={spec.m}", f"N={spec.n}", f"K={spec.k}",
               "--layout", spec.layout, "--family", "simt", "--time", str(budget_s), "--top", "0", "--db", str(db)]
    launched = time.time()
    code = _child(command, folder / "gemmtune.log", budget_s + slack_s)
    return {"launched": launched, "wall_s": time.time() - launched, "exit": code, "command": command}


def gemmtune_trials(db: Path, launched: float) -> list[Trial]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT config_json, status, median_s, created FROM trials "
                                  "WHERE phase = 'search' ORDER BY created").fetchall()
    return [Trial(created - launched, SimtConfig.from_json(json.loads(config)), median if status == "ok" else None,
                  status) for config, status, median, created in rows]


# --- kernel_tuner (the child) ---------------------------------------------------------------------
def kt_worker(args: argparse.Namespace) -> int:
    """Runs in its own process: tune with kernel_tuner until `launched + time`, write kt.json."""
    import kernel_tuner
    import numpy as np

    from gemmtune.device import query_device
    from gemmtune.verify import ELEMENT_FACTOR, make_inputs, reference, tolerance
    from kt_space import peer_space

    spec, folder = args.shapes[0], Path(args.out)
    arch = query_device(0).arch
    peer = peer_space(spec, arch)
    inputs = make_inputs(spec, np.random.default_rng(0))
    expected = reference(spec, inputs)
    rms = float(np.sqrt(np.mean(expected * expected)))
    atol = ELEMENT_FACTOR * tolerance(spec.dtype, spec.k) * rms  # verify.compare's element bound, absolute
    arguments = [inputs["A"], inputs["B"], np.zeros((spec.m, spec.n), np.float32)]
    cache = folder / "kt_cache.json"
    cache.unlink(missing_ok=True)
    random.seed(0)  # kernel_tuner 1.5.0 takes `seed` but never uses it; its strategies draw from these
    np.random.seed(0)
    remaining = args.launched + args.time - time.time()
    started = time.time()
    results, env = kernel_tuner.tune_kernel(
        peer.kernel_name, peer.kernel_source, peer.problem_size, arguments, peer.tune_params,
        **peer.grid_div, restrictions=peer.restrictions(), answer=[None, None, expected], atol=atol,
        lang=args.backend, defines={}, compiler_options=["--std=c++17"], iterations=args.iterations,
        strategy=args.strategy, strategy_options={"time_limit": max(10.0, remaining)}, cache=str(cache),
        quiet=True, seed=0)
    record = {"arch": arch, "device": env.get("device_name"), "tune_started": started, "atol": atol,
              "strategy": args.strategy, "backend": args.backend, "iterations": args.iterations,
              "kernel_tuner": kernel_tuner.__version__, "results": [_kt_row(peer, r) for r in results]}
    (folder / "kt.json").write_text(json.dumps(record))
    return 0


def probe_worker(args: argparse.Namespace) -> int:
    """Runs in its own process: one config through kernel_tuner's run_kernel on --backend, its D
    judged by gemmtune's verify.compare (exit 0: the backend works and agrees with gemmtune)."""
    import kernel_tuner
    import numpy as np

    from gemmtune.device import query_device
    from gemmtune.kernels import get_family
    from gemmtune.verify import compare, make_inputs, reference
    from kt_space import peer_space

    spec = args.shapes[0]
    arch = query_device(0).arch
    peer = peer_space(spec, arch)
    params = peer.params_of(get_family("simt").default_config(spec, arch))
    inputs = make_inputs(spec, np.random.default_rng(0))
    arguments = [inputs["A"], inputs["B"], np.full((spec.m, spec.n), np.nan, np.float32)]
    out = kernel_tuner.run_kernel(peer.kernel_name, peer.kernel_source, peer.problem_size, arguments, params,
                                  **peer.grid_div, lang=args.backend, defines={}, compiler_options=["--std=c++17"],
                                  quiet=True)
    verdict = compare(np.asarray(out[2]), reference(spec, inputs), spec.dtype, spec.k)
    print(f"kernel_tuner {kernel_tuner.__version__} {args.backend} on {arch}: {spec.short()} "
          f"{peer.config_of(params).describe()}: {verdict.message}")
    return 0 if verdict.ok else 1


def _kt_row(peer: Any, result: dict) -> dict:
    seconds, error = result.get("time"), result.get("__error__")
    ok = error is None and isinstance(seconds, (int, float)) and _finite(seconds)
    failure = error if error is not None else seconds
    status = "ok" if ok else failure if isinstance(failure, str) else type(failure).__name__
    return {"config": peer.config_of(result).to_json(), "time_ms": float(seconds) if ok else None,
            "status": status, "timestamp": str(result.get("timestamp", "")),
            "compile_ms": _number(result.get("compile_time"))}


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def run_kt(spec: GemmSpec, args: argparse.Namespace, folder: Path) -> dict:
    launched = time.time()
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "kt", spec_word(spec), "--layout",
               spec.layout, "--time", str(args.time), "--out", str(folder), "--launched", repr(launched),
               "--strategy", args.strategy, "--backend", args.backend, "--iterations", str(args.iterations)]
    (folder / "kt.json").unlink(missing_ok=True)
    code = _child(command, folder / "kt.log", args.time + args.slack)
    return {"launched": launched, "wall_s": time.time() - launched, "exit": code, "strategy": args.strategy,
            "backend": args.backend}


def kt_trials(spec: GemmSpec, folder: Path, launched: float) -> tuple[list[Trial], dict]:
    """kernel_tuner's results from kt.json, or, when the child was cut short, from its cache file
    (written as it goes, so a killed run leaves every finished config there)."""
    path = folder / "kt.json"
    if path.exists():
        record = json.loads(path.read_text())
        rows = record.pop("results")
    else:
        record, rows = {"from_cache": True}, _cache_rows(spec, folder / "kt_cache.json")
    trials = [Trial(_epoch(r["timestamp"]) - launched, SimtConfig.from_json(r["config"]),
                    r["time_ms"] / 1e3 if r["time_ms"] is not None else None, r["status"])
              for r in rows if r["timestamp"]]
    return trials, record


def _cache_rows(spec: GemmSpec, path: Path) -> list[dict]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    from kernel_tuner.util import read_cache
    from kt_space import peer_space

    peer = peer_space(spec, "sm_90")  # only its parameter names are used
    return [_kt_row(peer, entry) for entry in read_cache(str(path), open_cache=False).get("cache", {}).values()]


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


# --- one clock ------------------------------------------------------------------------------------
def retime_worker(args: argparse.Namespace) -> int:
    """Runs in its own process: every listed config and cuBLAS, with and without the L2 flush."""
    from gemmtune.bench import bench_config, bench_cublas
    from gemmtune.device import query_device
    from gemmtune.timing import TimingProtocol

    spec, folder = args.shapes[0], Path(args.out)
    arch = query_device(0).arch
    configs = [SimtConfig.from_json(c) for c in json.loads((folder / "to_retime.json").read_text())]
    protocols = {"flush": TimingProtocol(), "warm": TimingProtocol(flush_l2=False)}
    out: dict[str, Any] = {"arch": arch, "device": query_device(0).name, "configs": {}, "cublas": {}}
    for name, protocol in protocols.items():
        out["cublas"][name] = bench_cublas(spec, protocol).to_json()
    for config in configs:
        out["configs"][key(config)] = {name: bench_config(spec, config.describe(), config, arch, p).to_json()
                                       for name, p in protocols.items()}
        (folder / "retime.json").write_text(json.dumps(out))
    (folder / "retime.json").write_text(json.dumps(out))
    return 0


def run_retime(spec: GemmSpec, configs: list[SimtConfig], folder: Path, timeout_s: float) -> dict:
    (folder / "to_retime.json").write_text(json.dumps([c.to_json() for c in configs]))
    (folder / "retime.json").unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "retime", spec_word(spec), "--layout",
               spec.layout, "--out", str(folder)]
    code = _child(command, folder / "retime.log", timeout_s)
    path = folder / "retime.json"
    data = json.loads(path.read_text()) if path.exists() else {"configs": {}, "cublas": {}}
    return {**data, "exit": code}


def common_seconds(retime: dict, clock: str = "flush") -> dict[str, float]:
    return {k: v[clock]["median_s"] for k, v in retime.get("configs", {}).items() if v[clock]["median_s"]}


# --- one shape ------------------------------------------------------------------------------------
def run_shape(spec: GemmSpec, args: argparse.Namespace, index: int = 0) -> dict:
    """Both tuners one after the other (gemmtune first on even shapes, kernel_tuner first on odd ones,
    so neither always meets the GPU fresh), then the common clock."""
    folder = Path(args.out) / slug(spec)
    folder.mkdir(parents=True, exist_ok=True)
    if index % 2:
        k_run = run_kt(spec, args, folder)
        g_run = run_gemmtune(spec, args.time, folder, args.slack)
    else:
        g_run = run_gemmtune(spec, args.time, folder, args.slack)
        k_run = run_kt(spec, args, folder)
    g_trials = gemmtune_trials(folder / "gemmtune.db", g_run["launched"])
    k_trials, k_record = kt_trials(spec, folder, k_run["launched"])
    wanted = {key(c): c for tr in (g_trials, k_trials) for c in to_retime(tr, args.near, args.retime, args.time)}
    retime = run_retime(spec, list(wanted.values()), folder, args.retime_timeout)
    summary = summarize_shape(spec, args.time, {"gemmtune": (g_run, g_trials), "kernel_tuner": (k_run, k_trials)},
                              retime)
    summary["kernel_tuner_run"] = {k: v for k, v in k_record.items() if k != "results"}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def summarize_shape(spec: GemmSpec, cutoff_s: float, runs: dict[str, tuple[dict, list[Trial]]], retime: dict) -> dict:
    common = common_seconds(retime)
    warm = common_seconds(retime, "warm")
    chains = {name: incumbents(trials, cutoff_s) for name, (_, trials) in runs.items()}
    bests = {name: _best_common(chain, common) for name, chain in chains.items()}
    target = min((b for b in bests.values() if b is not None), default=None)
    tuners = {}
    for name, (run, trials) in runs.items():
        chain, best = chains[name], bests[name]
        best_config = _best_config(chain, common)
        done = [t for t in trials if t.at_s <= cutoff_s]
        tuners[name] = {
            "wall_s": run["wall_s"], "exit": run["exit"], "trials_total": len(trials),
            "trials": len(done), "ok": sum(t.own_s is not None for t in done),
            "first_trial_s": min((t.at_s for t in trials), default=None),
            "own_best_us": chain[-1].own_s * 1e6 if chain else None,
            "best_us": best * 1e6 if best else None,
            "best_tflops": spec.flops / best / 1e12 if best else None,
            "best_warm_us": warm.get(key(best_config)) * 1e6 if best_config and warm.get(key(best_config)) else None,
            "best_config": best_config.describe() if best_config else None,
            "to_2pct_s": first_within(chain, common, target) if target else None,
            "own_to_2pct_s": own_within(chain),
        }
    cublas = {name: row.get("median_s") for name, row in retime.get("cublas", {}).items()}
    return {"shape": slug(spec), "m": spec.m, "n": spec.n, "k": spec.k, "cutoff_s": cutoff_s,
            "device": retime.get("device"), "arch": retime.get("arch"),
            "cublas_us": cublas.get("flush") * 1e6 if cublas.get("flush") else None,
            "cublas_warm_us": cublas.get("warm") * 1e6 if cublas.get("warm") else None,
            "best_of_both_us": target * 1e6 if target else None, "tuners": tuners,
            "retimed": len(common), "date": datetime.date.today().isoformat()}


def _best_common(chain: list[Trial], common: dict[str, float]) -> float | None:
    values = [common[key(t.config)] for t in chain if key(t.config) in common]
    return min(values) if values else None


def _best_config(chain: list[Trial], common: dict[str, float]) -> SimtConfig | None:
    timed = [t for t in chain if key(t.config) in common]
    return min(timed, key=lambda t: common[key(t.config)]).config if timed else None


# --- the table ----------------------------------------------------------------------------------
def table(summaries: list[dict]) -> str:
    if not summaries:
        return "no shape finished\n"
    first = summaries[0]
    lines = [f"# gemmtune's tuner vs kernel_tuner 1.5.0, simt fp32 ({first['date']}, {first.get('device')})", "",
             f"Both cut at {first['cutoff_s']:.0f} s from launch; times on one clock (gemmtune's protocol, L2 "
             "flushed; µs). `to 2%`: seconds until the tuner's best-so-far ran within 2% of the best either found.",
             "", "| shape | cuBLAS µs | tuner | trials (ok) | best µs | TFLOP/s | % cuBLAS | to 2% s "
                 "| own-clock best µs | best config |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    wins = 0
    for s in summaries:
        for name, t in s["tuners"].items():
            pct = f"{100 * s['cublas_us'] / t['best_us']:.0f}" if s.get("cublas_us") and t["best_us"] else "—"
            lines.append(f"| {s['shape']} | {_f(s.get('cublas_us'))} | {name} | {t['trials']} ({t['ok']}) | "
                         f"{_f(t['best_us'])} | {_f(t['best_tflops'], 2)} | {pct} | {_f(t['to_2pct_s'])} | "
                         f"{_f(t['own_best_us'])} | {t['best_config'] or '—'} |")
        g, k = s["tuners"]["gemmtune"]["best_us"], s["tuners"]["kernel_tuner"]["best_us"]
        wins += int(g is not None and (k is None or g <= k * (1 + 0.005)))
    lines += ["", f"gemmtune's best better or equal (within 0.5%) on {wins} of {len(summaries)} shapes."]
    stops = [f"{s['shape']} {name}: exit {t['exit']}"
             for s in summaries for name, t in s["tuners"].items() if t["exit"]]
    if stops:  # 124: killed at --slack past T; kernel_tuner stops at a config that fails verification
        lines += ["", "Runs that did not end cleanly (their finished trials still count): " + "; ".join(stops) + "."]
    return "\n".join(lines) + "\n"


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def write_outputs(out: Path) -> list[dict]:
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    (out / "results.json").write_text(json.dumps(summaries, indent=1))
    (out / "table.md").write_text(table(summaries))
    return summaries


# --- plumbing -----------------------------------------------------------------------------------
def _child(command: list[str], log: Path, timeout_s: float) -> int:
    """Run a child in its own process group with its output in `log`. After `timeout_s` (or when this
    process is told to stop) the whole group gets SIGTERM, then SIGKILL: a tuner's compile pool and
    measuring process go with it. Exit 124 on a timeout, like timeout(1)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, process_group=0)
        previous = signal.signal(signal.SIGTERM, lambda *_: (_stop_group(process), sys.exit(143)))
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(process)
            return 124
        finally:
            signal.signal(signal.SIGTERM, previous)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the child's process group; SIGKILL 5 s later to whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return  # nothing of the group is left
        try:
            process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass


def spec_word(spec: GemmSpec) -> str:
    return f"{spec.m}x{spec.n}x{spec.k}"


class _HelpFormat(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as the epilog, and each option's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=_HelpFormat,
                                     epilog="\n".join(__doc__.split("\n")[1:]))
    parser.add_argument("shapes", nargs="*", help="N (N³) or MxNxK; default 1024 2048 4096 3000x5000x1504")
    parser.add_argument("--layout", default="nn")
    parser.add_argument("--time", type=float, default=30.0, help="seconds per tuner per shape, from launch")
    parser.add_argument("--out", required=False, help="output folder")
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help="kernel_tuner strategy")
    parser.add_argument("--backend", default="NVCUDA", help="kernel_tuner lang: NVCUDA (cuda-python), CUPY or CUDA")
    parser.add_argument("--iterations", type=int, default=7, help="kernel_tuner's timed runs per config")
    parser.add_argument("--near", type=float, default=0.05, help="re-time incumbents within this of a tuner's own best")
    parser.add_argument("--retime", type=int, default=6, help="at most this many incumbents per tuner are re-timed")
    parser.add_argument("--slack", type=float, default=45.0, help="seconds past --time before a child is killed")
    parser.add_argument("--retime-timeout", type=float, default=90.0)
    parser.add_argument("--first-index", type=int, default=0, help="position of the first shape in a longer list "
                        "(which tuner goes first alternates by position)")
    parser.add_argument("--summarize", metavar="OUT", help="rebuild results.json, table.md from OUT/*/summary.json")
    parser.add_argument("--worker", choices=("kt", "retime", "probe"), help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    words = args.shapes or ["1024", "2048", "4096", "3000x5000x1504"]
    args.shapes = [parse_shape(w, args.layout) for w in words]
    if args.launched is None:
        args.launched = time.time()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "kt":
        return kt_worker(args)
    if args.worker == "retime":
        return retime_worker(args)
    if args.worker == "probe":
        return probe_worker(args)
    if args.summarize:
        print(table(write_outputs(Path(args.summarize))), end="")
        return 0
    if not args.out:
        raise SystemExit("--out is required")
    for index, spec in enumerate(args.shapes):
        summary = run_shape(spec, args, index + args.first_index)
        g, k = summary["tuners"]["gemmtune"], summary["tuners"]["kernel_tuner"]
        print(f"{summary['shape']}: gemmtune {_f(g['best_us'])} µs ({g['trials']} trials), kernel_tuner "
              f"{_f(k['best_us'])} µs ({k['trials']} trials), cuBLAS {_f(summary['cublas_us'])} µs", flush=True)
    print(table(write_outputs(Path(args.out))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
