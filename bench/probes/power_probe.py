"""Power, clock and time per launch of the fused kernel, its GEMM alone and cuBLAS, each run back to back
for a few seconds while nvidia-smi samples the card: is the fused kernel's last half per cent cycles,
or a lower clock at the power limit?

Phases run in turn (alone, fused, cuBLAS from a CUDA graph), `--reps` times. In each phase the kernel
is launched back to back for `--seconds` (no L2 flush between launches: the steady state of a loop of
GEMMs); the first third of the phase is left out (the clock settles), the rest gives µs per launch
(host clock over synchronized batches), the mean power and SM clock of nvidia-smi's samples taken
inside it, and cycles per launch = µs × MHz. Only reads the card's state (nvidia-smi --query-gpu).

--ncu NAME: verify, then launch NAME's kernel 3 times and nothing else (for
`ncu --clock-control none --launch-skip 2 --launch-count 1`).

    PYTHONPATH=src python bench/probes/power_probe.py [--seconds 3] [--reps 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np

from gemmtune.baseline import _torch, cublas_launch, prepare
from gemmtune.device import query_device
from gemmtune.evaluate import evaluate, upload_inputs
from gemmtune.runtime import LoadedKernel, release
from gemmtune.spec import GemmSpec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench_paired
from bench_paired import graph_replay  # noqa: E402
from wgmma_variants import S12_FINAL as FINAL, compile_variant  # noqa: E402  FINAL: the shipped fused config (commit 0eaf197)

SPEC = GemmSpec(4096, 4096, 4096, "nt", "fp16", "relu+add")
FIELDS = ("power.draw.instant", "clocks.sm", "temperature.gpu", "clocks_event_reasons.active")


class Sampler:
    """nvidia-smi --query-gpu every `period_ms`, each line stamped with the host clock on arrival."""

    def __init__(self, period_ms: int = 50):
        fields = list(FIELDS)
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields[0]}", "--format=csv,noheader"],
                               capture_output=True, text=True)
        if probe.returncode != 0 or "not a valid" in probe.stdout + probe.stderr:
            fields[0] = "power.draw"  # an older driver: the averaged reading
        self.fields = fields
        self.samples: list[tuple[float, list[str]]] = []
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                                      "--format=csv,noheader,nounits", f"-lms={period_ms}"],
                                     stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.samples.append((time.time(), [v.strip() for v in line.split(",")]))

    def between(self, t0: float, t1: float) -> list[list[str]]:
        return [vals for t, vals in self.samples if t0 <= t <= t1]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def run_phase(launch, sync, seconds: float, batch: int) -> tuple[float, float, float]:
    """Launch back to back for `seconds`; returns (steady start, steady end, µs per launch after the
    first third)."""
    start = time.time()
    stamps: list[tuple[float, int]] = []
    count = 0
    while time.time() - start < seconds:
        for _ in range(batch):
            launch()
        sync()
        count += batch
        stamps.append((time.time(), count))
    steady = [s for s in stamps if s[0] - start >= seconds / 3]
    (t0, n0), (t1, n1) = steady[0], steady[-1]
    return t0, t1, (t1 - t0) / max(n1 - n0, 1) * 1e6


def mean_of(rows: list[list[str]], index: int) -> float | None:
    vals = []
    for row in rows:
        try:
            vals.append(float(row[index]))
        except (ValueError, IndexError):
            pass
    return statistics.fmean(vals) if vals else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=200, help="launches between host synchronizations")
    parser.add_argument("--json")
    parser.add_argument("--ncu", choices=("fused", "alone"), help="launch this kernel 3 times and stop")
    parser.add_argument("--group-m", type=int, default=FINAL.group_m, help="the config's group_m (both kernels)")
    args = parser.parse_args()

    config = FINAL.with_(group_m=args.group_m)
    variants = {"alone": (SPEC.without_epilogue(), config.without_c_options()), "fused": (SPEC, config)}
    if args.ncu:
        variants = {args.ncu: variants[args.ncu]}
    torch, prepared = _torch(), prepare(SPEC)
    buffers, loaded, launches = {}, [], {}
    try:
        bindings = upload_inputs(SPEC, prepared.inputs, buffers)
        for name, (spec, config) in variants.items():
            compiled = compile_variant(spec, config, None)
            check = evaluate(compiled, verify_only=True, rng=np.random.default_rng(5))
            if not check.verify.ok:
                print(f"{name}: wrong result: {check.verify.message}")
                return 1
            loaded.append(LoadedKernel(compiled))
            launches[name] = loaded[-1].bind(bindings)
        if args.ncu:
            for _ in range(3):
                launches[args.ncu]()
            torch.cuda.synchronize()
            return 0
        launches["cuBLAS (graph)"] = graph_replay(torch, cublas_launch(torch, SPEC, prepared.gpu))
        sampler = Sampler()
        rows = []
        try:
            time.sleep(0.5)
            for rep in range(args.reps):
                for name, launch in launches.items():
                    t0, t1, us = run_phase(launch, torch.cuda.synchronize, args.seconds, args.batch)
                    samples = sampler.between(t0, t1)
                    watts, mhz = mean_of(samples, 0), mean_of(samples, 1)
                    reasons = sorted({s[3] for s in samples if len(s) > 3})
                    rows.append({"rep": rep, "name": name, "us": us, "watts": watts, "mhz": mhz,
                                 "temp_c": mean_of(samples, 2), "samples": len(samples), "reasons": reasons,
                                 "mcycles": us * mhz / 1e6 if mhz else None})
                    print(f"rep {rep} {name}: {us:.1f} µs, {watts} W, {mhz} MHz, reasons {reasons}", flush=True)
                    time.sleep(0.5)
        finally:
            sampler.close()
    except BaseException:
        release([k.unload for k in loaded] + [b.free for b in buffers.values()], after_error=True)
        raise
    release([k.unload for k in loaded] + [b.free for b in buffers.values()], after_error=False)
    dev = query_device()
    lines = [f"# Back to back: {SPEC.short()}, group_m {config.group_m}, {dev.name}, {date.today().isoformat()}",
             f"(nvidia-smi fields: {', '.join(sampler.fields)}; {args.seconds:.1f} s a phase, the last two thirds)\n",
             "| rep | kernel | µs a launch | W | SM MHz | M cycles a launch | °C | event reasons |", "|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: format(v, f) if v is not None else "—"
    for r in rows:
        lines.append(f"| {r['rep']} | {r['name']} | {r['us']:.1f} | {fmt(r['watts'], '.0f')} | {fmt(r['mhz'], '.0f')} | "
                     f"{fmt(r['mcycles'], '.4f')} | {fmt(r['temp_c'], '.0f')} | {' '.join(r['reasons'])} |")
    print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": dev.name, "date": date.today().isoformat(), "fields": sampler.fields,
                       "config": config.to_json(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
