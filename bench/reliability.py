"""The reliability campaign of issue 18, as a script anyone can rerun on a GPU machine.

    PYTHONPATH=src python bench/reliability.py --out DIR [--kills 10] [--tuners 3]

Four parts, each a table in the dated markdown report written to DIR (and printed last):
  faults      candidates that fault (illegal address, trap, hang, wrong result, shared memory out of
              bounds) go through the measuring worker: each must become a failed trial, and the good
              kernel measured right after it must verify and time like before;
  kills       `gemmtune tune` killed with SIGKILL at random moments, N times on one database: after
              each kill the rows never decrease, no key is stored twice, SQLite's integrity check
              passes, and no process the run started is alive 2 s later; a last run resumes to the end;
  tuners      one tuner alone, then three at once on one database: their timed sections (from the
              GPU lock's interval log) never overlap, and each one's best is within 3% of the lone one's;
  sanitizer   compute-sanitizer's memcheck, racecheck, synccheck and initcheck on the exported harness
              of every generator family there is.
--cpu-smoke replays a recorded table instead of tuning on a GPU (kills and tuners only): it checks
the script itself on a machine without one.
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gemmtune.gpu_lock import LOCK_DIR_ENV, LOCK_LOG_ENV, overlaps, read_intervals  # noqa: E402
from gemmtune.lifeline import alive, descendants  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.tune.db import TuningDB  # noqa: E402

MARKER = "GEMMTUNE_CAMPAIGN_RUN"  # every process a run starts inherits it: how orphans are found
GRACE_S = 2.0
SHIPPED_TABLE = Path(__file__).resolve().parents[1] / "src/gemmtune/data/simt_gemm_fp32_nn_1024x1024x1024.csv.gz"


@dataclass(frozen=True)
class Check:
    part: str
    what: str
    result: str
    ok: bool


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gemmtune.cli", *args]


def log(text: str) -> None:
    print(text, flush=True)


# --- processes left behind ------------------------------------------------------------------------
def marked(tag: str) -> list[int]:
    """Living processes whose environment carries MARKER=tag."""
    needle = f"{MARKER}={tag}".encode() + b"\0"
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def left_behind(tag: str, snapshot: list[int], grace_s: float) -> list[int]:
    deadline = time.monotonic() + grace_s
    while True:
        left = sorted(set(marked(tag)) | {p for p in snapshot if alive(p)})
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- part 1: injected faults ----------------------------------------------------------------------
FAULTS = {
    "illegal address": "*(volatile float*)(0x10 + 4 * threadIdx.x) = 1.0f;",
    "trap": 'asm volatile("trap;");',
    "hang": "while (*(volatile const float*)A != 12345.0f) {}  // inputs are in [-1, 1]: never true",
    "wrong result": "D[blockIdx.x * blockDim.x + threadIdx.x] = 0.0f;",
    "shared out of bounds": "__shared__ float s[32]; volatile float* v = s; v[threadIdx.x + (1 << 22)] = 1.0f;",
}


def fault_source(name: str, body: str, spec: GemmSpec):
    from gemmtune.kernel_source import KernelSource

    entry = "fault_" + re.sub(r"\W+", "_", name)
    code = (f'extern "C" __global__ void {entry}(const float* __restrict__ A, const float* __restrict__ B, '
            f"float* __restrict__ D) {{\n    {body}\n}}\n")
    return KernelSource(code, entry, (spec.m * spec.n // 256, 1, 1), (256, 1, 1), ("A", "B", "D"), spec,
                        "fault-injection", "1")


def job_of(source, arch: str, protocol):
    from gemmtune.compiler import compile_kernel
    from gemmtune.tune.worker import MeasureJob

    compiled = compile_kernel(source, arch)
    return MeasureJob(source.config or {"name": source.entry}, source.to_json(), arch, compiled.cubin,
                      compiled.resources.to_json(), compiled.compile_seconds, compiled.nvrtc_version, protocol)


def fault_part(arch: str) -> tuple[list[str], list[Check]]:
    from gemmtune.kernels.simt import render
    from gemmtune.kernels.simt.config import default_config
    from gemmtune.timing import TimingProtocol
    from gemmtune.tune.worker import MeasureWorker, gpu_evaluator

    spec = GemmSpec(256, 256, 256)
    protocol = TimingProtocol(warmup=2, min_reps=10, max_reps=50, min_time_s=0.02)
    good = job_of(render(spec, default_config(spec, arch), arch), arch, protocol)
    worker = MeasureWorker(gpu_evaluator, timeout_s=10.0)
    lines = ["| injected fault | trial status | error | next good kernel | its median |", "|---|---|---|---|---|"]
    checks = []
    try:
        baseline = worker.measure(good)
        for name, body in FAULTS.items():
            started = time.monotonic()
            outcome = worker.measure(job_of(fault_source(name, body, spec), arch, protocol))
            after = worker.measure(good)
            ratio = after.median_s / baseline.median_s if after.median_s and baseline.median_s else float("nan")
            lines.append(f"| {name} | {outcome.status.value} | {outcome.error[:70]} | {after.status.value} | "
                         f"{(after.median_s or 0) * 1e6:.1f} µs ({ratio:.2f}× first) |")
            ok = outcome.status.value != "ok" and after.status.value == "ok" and 0.67 < ratio < 1.5
            checks.append(Check("faults", name, f"{outcome.status.value}, then good kernel "
                                f"{after.status.value} ({time.monotonic() - started:.1f} s)", ok))
            log(f"  fault {name}: {outcome.status.value} ({outcome.error[:60]}); next: {after.status.value}")
    finally:
        worker.close()
    return lines, checks


# --- part 2: kills at random moments ----------------------------------------------------------------
def db_state(path: Path) -> tuple[int, int, str]:
    if not path.exists():
        return 0, 0, "ok"
    with TuningDB(path) as db:
        report = db.check()
    return report.trials, report.duplicates, "; ".join(report.integrity)


def with_trials(tune_args: list[str], trials: int) -> list[str]:
    position = tune_args.index("--trials") + 1
    return [*tune_args[:position], str(trials), *tune_args[position + 1:]]


def search_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        found = int(conn.execute("SELECT COUNT(*) FROM trials WHERE phase = 'search'").fetchone()[0])
    conn.close()
    return found


def kill_part(work: Path, env: dict, tune_args: list[str], kills: int, window: tuple[float, float],
              rng: random.Random) -> tuple[list[str], list[Check]]:
    db = work / "kills.sqlite"
    lines = ["| kill | after | processes before | left after 2 s | rows | duplicates | integrity |",
             "|---|---|---|---|---|---|---|"]
    previous, total_left, bad = 0, 0, []
    endless = with_trials(tune_args, 100000)  # every kill lands in a run that still has work to do
    for number in range(1, kills + 1):
        tag = f"kill-{number}-{os.getpid()}"
        with open(work / f"kill-{number}.log", "w") as out:
            run = subprocess.Popen(cli(*endless, "--db", str(db)), env={**env, MARKER: tag}, stdout=out,
                                   stderr=subprocess.STDOUT)
        moment = rng.uniform(*window)
        time.sleep(moment)
        snapshot = descendants(run.pid)
        finished = run.poll() is not None
        if not finished:
            os.kill(run.pid, signal.SIGKILL)
        run.wait()
        left = left_behind(tag, snapshot, GRACE_S)
        reap(left)
        rows, duplicates, integrity = db_state(db)
        total_left += len(left)
        if rows < previous or duplicates or integrity != "ok" or left:
            bad.append(number)
        lines.append(f"| {number} | {moment:.1f} s{' (had finished)' if finished else ''} | {len(snapshot) + 1} | "
                     f"{len(left)} | {previous} → {rows} | {duplicates} | {integrity} |")
        log(f"  kill {number} at {moment:.1f} s: {len(snapshot)} children, {len(left)} left, rows {previous} → {rows}")
        previous = max(previous, rows)
    searched = search_rows(db)
    with open(work / "resume.log", "w") as out:  # resumes: 8 more trials, then the re-measurement
        done = subprocess.run(cli(*with_trials(tune_args, searched + 8), "--db", str(db)), env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    rows, duplicates, integrity = db_state(db)
    resumed = search_rows(db) == searched + 8
    lines.append(f"| resume | to {searched + 8} search trials (exit {done.returncode}) | | | {previous} → {rows} | "
                 f"{duplicates} | {integrity} |")
    checks = [Check("kills", f"{kills} SIGKILLs at random moments",
                    f"{len(bad)} kills with lost rows, duplicates, damage or survivors; "
                    f"{total_left} processes left behind", not bad),
              Check("kills", "resumed run", f"exit {done.returncode}, {rows} rows, {duplicates} duplicates, "
                    f"integrity {integrity}", done.returncode == 0 and resumed and rows >= previous
                    and not duplicates and integrity == "ok")]
    return lines, checks


# --- part 3: concurrent tuners ------------------------------------------------------------------------
BEST_ROW = re.compile(r"^\s*│\s*1\s*│.*?│\s*([0-9.]+) µs", re.MULTILINE)


def best_us(text: str) -> float | None:
    found = BEST_ROW.search(text)
    return float(found.group(1)) if found else None


def tuners_part(work: Path, env: dict, tune_args: list[str], count: int, tolerance: float
                ) -> tuple[list[str], list[Check]]:
    solo_log = work / "solo-lock.log"
    solo = subprocess.run(cli(*tune_args, "--db", str(work / "solo.sqlite")), env={**env, LOCK_LOG_ENV: str(solo_log)},
                          capture_output=True, text=True)
    (work / "solo.log").write_text(solo.stdout + solo.stderr)
    alone = best_us(solo.stdout)
    shared_log = work / "shared-lock.log"
    started = time.monotonic()
    runs = [subprocess.Popen(cli(*tune_args, "--db", str(work / "shared.sqlite")),
                             env={**env, LOCK_LOG_ENV: str(shared_log)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(count)]
    outputs = [run.communicate() for run in runs]
    wall = time.monotonic() - started
    intervals = read_intervals(shared_log) if shared_log.exists() else []
    clashes = overlaps(intervals)
    lines = ["| tuner | exit | best (re-measured) | vs. alone | waited-for-lock notices |", "|---|---|---|---|---|",
             f"| alone | {solo.returncode} | {alone} µs | — | — |"]
    within = []
    for number, ((out, err), run) in enumerate(zip(outputs, runs), start=1):
        (work / f"tuner-{number}.log").write_text(out + err)
        best = best_us(out)
        ratio = best / alone if best and alone else float("nan")
        # one-sided: a shared database pools the configs all tuners tried, so its best may be faster
        within.append(run.returncode == 0 and ratio <= 1 + tolerance)
        notices = err.count("waiting for the GPU lock")
        lines.append(f"| {number} of {count} | {run.returncode} | {best} µs | {ratio:.3f} | {notices} |")
    held = sum(i.end - i.start for i in intervals)
    common = same_config_ratios(work / "solo.sqlite", work / "shared.sqlite")
    typical = statistics.median(common) if common else float("nan")
    lines.append(f"\n{len(intervals)} timed sections by {len({i.pid for i in intervals})} processes in {wall:.0f} s "
                 f"(held {held:.0f} s in all); overlapping pairs: {len(clashes)}. The same configs timed alone and "
                 f"under contention: median ratio {typical:.3f} over {len(common)} configs "
                 f"(range {min(common, default=0):.3f}–{max(common, default=0):.3f}).")
    checks = [Check("tuners", f"{count} concurrent tuners: timed sections", f"{len(intervals)} sections, "
                    f"{len(clashes)} overlaps", bool(intervals) and not clashes),
              Check("tuners", f"each best no slower than alone's by {tolerance:.0%}",
                    f"alone {alone} µs; " + ", ".join(line.split("|")[3].strip() for line in lines[3:3 + count]),
                    solo.returncode == 0 and all(within)),
              Check("tuners", "same config, alone vs. contended", f"median ratio {typical:.3f} over {len(common)}",
                    len(common) > 0 and abs(typical - 1) <= tolerance)]
    return lines, checks


def same_config_ratios(alone: Path, shared: Path) -> list[float]:
    """Contended over lone median for every config both databases timed (search phase, ok)."""
    def medians(path: Path) -> dict[str, float]:
        if not path.exists():
            return {}
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT config_key, median_s FROM trials WHERE phase = 'search' AND status = 'ok'")
            found = {key: median for key, median in rows}
        conn.close()
        return found

    lone, contended = medians(alone), medians(shared)
    return sorted(contended[k] / lone[k] for k in lone.keys() & contended.keys())


# --- part 4: compute-sanitizer on exported kernels ---------------------------------------------------
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZER_SPECS = (GemmSpec(256, 256, 256), GemmSpec(300, 200, 100, layout="nt", epilogue="relu+add"),
                   GemmSpec(256, 256, 256, dtype="bf16"),
                   GemmSpec(320, 192, 128, layout="nt", dtype="bf16", epilogue="relu+add"))


def find_sanitizer() -> str | None:
    for candidate in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
                      "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def exports(spec: GemmSpec, arch: str, device, out: Path) -> list[tuple[str, Path | str]]:
    """(family, exported folder, or the reason it could not be) for every registered family; a family
    that does not support `spec` is left out (each spec above suits at least one)."""
    from gemmtune.errors import GemmtuneError
    from gemmtune.export import export_spec
    from gemmtune.kernels import families

    results: list[tuple[str, Path | str]] = []
    for family in families():
        if family.supports(spec, arch) is not None:
            continue
        try:
            results.append((family.name, export_spec(spec, out / family.name, arch=arch, device=device,
                                                     family=family.name).path))
        except GemmtuneError as err:
            results.append((family.name, f"export failed: {err}"))
    return results


def sanitize(sanitizer: str, tool: str, executable: Path) -> tuple[int | None, bool, str]:
    """(errors reported, harness passed, one-line note)."""
    try:
        done = subprocess.run([sanitizer, "--tool", tool, str(executable), "2"], capture_output=True, text=True,
                              timeout=240, cwd=executable.parent)
    except subprocess.TimeoutExpired:
        return None, False, "timed out after 240 s"
    text = done.stdout + done.stderr
    # racecheck sums up as "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others
    # as "ERROR SUMMARY: N errors"; a hazard shown counts as an error here, warnings included
    found = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"SUMMARY: (\d+) hazards? displayed", text)
    errors = int(found.group(1)) if found else None
    first = next((line for line in text.splitlines() if "=========" in line and "Error" in line), "")
    return errors, "PASS" in done.stdout, first.strip()[:90]


def sanitizer_part(work: Path, device) -> tuple[list[str], list[Check]]:
    from gemmtune.compiler import ARCHES
    from gemmtune.errors import GemmtuneError
    from gemmtune.export.toolchain import build_harness, find_nvcc

    sanitizer, nvcc = find_sanitizer(), find_nvcc()
    if sanitizer is None or nvcc is None:
        why = "no compute-sanitizer" if sanitizer is None else "no nvcc"
        return [f"skipped: {why}"], [Check("sanitizer", "compute-sanitizer", f"skipped: {why}", False)]
    arch = device.arch if device.arch in ARCHES else "sm_90"
    lines = ["| family | spec | " + " | ".join(SANITIZER_TOOLS) + " |", "|---|---|" + "---|" * len(SANITIZER_TOOLS)]
    checks = []
    for spec in SANITIZER_SPECS:
        for family, folder in exports(spec, arch, device, work / "export" / spec.slug()):
            if isinstance(folder, str):
                lines.append(f"| {family} | {spec.short()} | {folder} |")
                continue
            try:
                executable = build_harness(folder, nvcc)
            except GemmtuneError as err:
                lines.append(f"| {family} | {spec.short()} | harness did not build: {str(err)[:120]} |")
                checks.append(Check("sanitizer", f"{family} {spec.short()}", "harness did not build", False))
                continue
            cells, clean = [], True
            for tool in SANITIZER_TOOLS:
                errors, passed, note = sanitize(sanitizer, tool, executable)
                ok = errors == 0 and passed
                clean &= ok
                cells.append(f"{errors} errors{'' if passed else ', harness FAIL'}" + (f" ({note})" if note else ""))
                log(f"  {family} {spec.short()} {tool}: {errors} errors, harness {'PASS' if passed else 'FAIL'}")
            lines.append(f"| {family} | {spec.short()} | " + " | ".join(cells) + " |")
            checks.append(Check("sanitizer", f"{family} {spec.short()}", "clean" if clean else "errors", clean))
    return lines, checks


# --- the report -------------------------------------------------------------------------------------
def report(title: str, parts: dict[str, list[str]], checks: list[Check]) -> str:
    text = [f"# {title}", "", "| part | check | result | verdict |", "|---|---|---|---|"]
    text += [f"| {c.part} | {c.what} | {c.result} | {'pass' if c.ok else '**FAIL**'} |" for c in checks]
    for name, lines in parts.items():
        text += ["", f"## {name}", "", *lines]
    return "\n".join(text) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the report and logs")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs at random moments (default 10)")
    parser.add_argument("--tuners", type=int, default=3, help="concurrent tuners (default 3)")
    parser.add_argument("--size", type=int, default=1024, help="MNK of the tuned GEMM (default 1024)")
    parser.add_argument("--trials", type=int, default=40, help="trial budget of each tune (default 40)")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--parts", default="faults,kills,tuners,sanitizer", help="comma-separated subset")
    parser.add_argument("--cpu-smoke", action="store_true", help="replay a recorded table: no GPU needed")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gemmtune-reliability-"))
    env = {**os.environ, LOCK_DIR_ENV: str(work / "locks"), "PYTHONUNBUFFERED": "1"}
    tune_args = ["tune", f"MNK={args.size}", "--trials", str(args.trials), "--seed", str(args.seed), "--top", "3",
                 "--no-transfer"]
    if args.cpu_smoke:
        tune_args = ["tune", "MNK=1024", "--trials", str(args.trials), "--top", "3", "--simulate", str(SHIPPED_TABLE)]
        # (a replay is over in about a second: the kills land on finished runs; this checks the plumbing)
        parts_wanted, device, gpu = {"kills", "tuners"} & set(args.parts.split(",")), None, "no GPU (replayed table)"
    else:
        from gemmtune.device import query_device

        parts_wanted, device = set(args.parts.split(",")), query_device()
        gpu = device.summary()
    campaign = Campaign(args.out / f"{datetime.date.today().isoformat()}-reliability.md", gpu)
    log(f"reliability campaign on {gpu}; work folder {work}")
    if "faults" in parts_wanted:
        campaign.run("Injected faults", lambda: fault_part(device.arch))
    if "sanitizer" in parts_wanted:
        campaign.run("compute-sanitizer on exported kernels", lambda: sanitizer_part(work, device))
    if "tuners" in parts_wanted:
        campaign.run(f"{args.tuners} concurrent tuners on one database ({' '.join(tune_args[:4])})",
                     lambda: tuners_part(work, env, tune_args, args.tuners, 0.03))
    if "kills" in parts_wanted:
        window = (0.5, 3.0) if args.cpu_smoke else (8.0, 24.0)
        campaign.run(f"SIGKILL at random moments ({' '.join(tune_args[:4])})",
                     lambda: kill_part(work, env, tune_args, args.kills, window, random.Random(args.seed)))
    print(campaign.text())
    return 0 if all(c.ok for c in campaign.checks) else 1


class Campaign:
    """The parts run so far; the report is rewritten after each, so a cut-off run still leaves one."""

    def __init__(self, path: Path, gpu: str):
        self.path, self.gpu, self.started = path, gpu, time.monotonic()
        self.parts: dict[str, list[str]] = {}
        self.checks: list[Check] = []

    def run(self, name: str, part) -> None:
        log(name)
        began = time.monotonic()
        lines, checks = part()
        self.parts[f"{name} ({time.monotonic() - began:.0f} s)"] = lines
        self.checks += checks
        self.path.write_text(self.text())

    def text(self) -> str:
        date = datetime.date.today().isoformat()
        return report(f"Reliability campaign, {date}, {self.gpu} ({time.monotonic() - self.started:.0f} s)",
                      self.parts, self.checks)


if __name__ == "__main__":
    sys.exit(main())
