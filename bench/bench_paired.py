"""cuBLAS and wgmma variants timed in alternation: one launch of each per round, many rounds, so every
round's ratio compares kernels that ran at the same clock.

At 8192^3 the H100 runs at its power limit and its clock moves between timings taken a second apart:
timed one after the other (probes/wgmma_variants.py --rounds), cuBLAS's own median moved 1369-1580 µs within
one process and single-round ratios ranged 0.90-1.18. Here each round is a few milliseconds (one
launch of each kernel, L2 emptied before each), and the ratio reported is the median of the per-round
ratios, with its quartiles.

Each variant is first verified by the common path (evaluate: float64 reference, poisoned D); the timed
launches then share one set of inputs (cuBLAS reads its own copy of the same values).

torch.mm's host side (Python, cuBLAS's heuristics) takes tens of µs and at times far more; where it
outlasts the L2 flush before the start event, the GPU idles inside cuBLAS's timing (2026-11-23,
commit 58e305f: on one H100 torch.mm timed 204 µs at 4096^3 bf16, p10-p90 185-222, where the same
call replayed from a CUDA graph timed 188, 180-193). --graph adds that replay and takes it as the
reference; --lead-us holds the GPU back before each start event instead (it also lowers the duty
cycle, so the clock rises).

The launches of a round follow a balanced (Williams) order, gemmtune.timing.round_order: every
launch runs after every other equally often, so no variant always follows torch's eager launches.
--set names one of probes/wgmma_variants.py's lists: `bars` (default: the shipped configs at the 4096^3
and 8192^3 bars), `c_path` (the fused relu+add kernel step by step, with its GEMM alone), or an
experiment of docs/journal.md. Method and results: docs/timing.md.

    PYTHONPATH=src python bench/bench_paired.py --set bars --rounds 300 --graph [--only 8192] [--json out.json]
    PYTHONPATH=src python bench/bench_paired.py --set c_path --rounds 300 --graph
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import date
from pathlib import Path

import numpy as np

from gemmtune.baseline import _fp32_precision, _torch, cublas_launch, eager_launch, prepare
from gemmtune.device import query_device
from gemmtune.evaluate import evaluate, upload_inputs
from gemmtune.runtime import LoadedKernel, release
from gemmtune.timing import TimingProtocol, measure_alternating, ratio_to

sys.path.insert(0, str(Path(__file__).resolve().parent / "probes"))  # wgmma_variants: the named configs and sets
from wgmma_variants import SETS, Unverified, compile_variant, max_active_clusters, variant_spec, with_gemm_alone  # noqa: E402


GRAPH = "cuBLAS (CUDA graph)"


def graph_replay(torch, launch):
    """`launch` captured once in a CUDA graph: replaying it enqueues the same kernels with none of
    torch's per-call host work, which shows how much of a launch's timing that host work is."""
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    torch.cuda.synchronize()
    return graph.replay


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="bars", help="wgmma_variants.py's list of cases (default bars)")
    parser.add_argument("--only", help="run the cases whose spec contains this text")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of one launch each (default 200)")
    parser.add_argument("--json", help="write every case's times here")
    parser.add_argument("--lead-us", type=float, default=0.0,
                        help="hold the GPU this long (µs) before each start event, so slow host-side launches "
                             "(torch) are enqueued before their timing starts (default 0: the flush only)")
    parser.add_argument("--graph", action="store_true",
                        help="also time cuBLAS replayed from a CUDA graph (no host work per launch) and take it "
                             "as the reference of the ratios")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    dev = query_device()
    report, lines = [], [f"# Paired timing, {dev.name}, {date.today().isoformat()}"]
    for spec, variants in SETS[args.set]:
        if args.only and args.only not in spec.short():
            continue
        variants = with_gemm_alone(spec, variants)  # timed in the same rounds
        kernels = {}
        for name, config, patch in variants:
            compiled = compile_variant(variant_spec(spec, name), config, patch)
            if isinstance(patch, Unverified):  # a probe that computes a wrong D on purpose
                print(f"{spec.short()} {name}: a timing probe, not verified", flush=True)
                kernels[name] = compiled
                continue
            check = evaluate(compiled, verify_only=True, rng=np.random.default_rng(5))
            if not check.verify.ok:
                print(f"{spec.short()} {name}: wrong result, left out: {check.verify.message}", flush=True)
                continue
            kernels[name] = compiled
            if config.cluster_m > 1:
                print(f"{spec.short()} {name}: clusters of {config.cluster_m} that fit at once: "
                      f"{max_active_clusters(compiled, config.cluster_m)}", flush=True)
        torch, prepared = _torch(), prepare(spec)
        launches = {"cuBLAS": cublas_launch(torch, spec, prepared.gpu)}
        if args.graph:  # captured with tf32 allowed where it is timed so (a graph keeps the kernel it saw)
            with _fp32_precision(torch, tf32=spec.dtype == "tf32"):
                launches[GRAPH] = graph_replay(torch, launches["cuBLAS"])
        if not spec.epilogue.is_identity:
            launches["torch eager"] = eager_launch(torch, spec, prepared.gpu)
        buffers, loaded = {}, []
        try:
            bindings = upload_inputs(spec, prepared.inputs, buffers)
            for name, compiled in kernels.items():
                loaded.append(LoadedKernel(compiled))
                launches[name] = loaded[-1].bind(bindings)
            with _fp32_precision(torch, tf32=spec.dtype == "tf32"):  # as cublas_measurement times it
                times = measure_alternating(launches, args.rounds, dev.l2_bytes, TimingProtocol(),
                                            lead_s=args.lead_us * 1e-6)
        except BaseException:
            release([k.unload for k in loaded] + [b.free for b in buffers.values()], after_error=True)
            raise
        release([k.unload for k in loaded] + [b.free for b in buffers.values()], after_error=False)
        # The reference: cuBLAS replayed from a graph where timed (torch's host time cannot leak into
        # it), else torch.mm itself; the other cuBLAS row is then listed like a variant.
        ref_name = GRAPH if GRAPH in times else "cuBLAS"
        ref = times[ref_name]
        lead = f", {args.lead_us:.0f} µs lead" if args.lead_us else ""
        lines += [f"\n## {spec.short()}: {args.rounds} rounds{lead}, {ref_name} {statistics.median(ref) * 1e6:.1f} µs "
                  f"(per round {min(ref) * 1e6:.1f} to {max(ref) * 1e6:.1f})\n",
                  f"| variant | median µs | × {ref_name} (median of per-round ratios) | quartiles |", "|---|---|---|---|"]
        for name in [n for n in launches if n != ref_name]:
            mid, low, high = ratio_to(ref, times[name])
            lines.append(f"| {name} | {statistics.median(times[name]) * 1e6:.1f} | {mid:.3f} | {low:.3f}–{high:.3f} |")
        print("\n".join(lines[-len(launches) - 2:]), flush=True)
        report.append({"spec": spec.short(), "times_s": times,
                       "configs": {name: config.to_json() for name, config, _ in variants if name in kernels}})
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"device": dev.name, "date": date.today().isoformat(), "rounds": args.rounds,
                           "cases": report}, fh, indent=1)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
