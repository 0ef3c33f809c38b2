"""cuBLAS and wgmma variants timed in alternation: one launch of each per round, many rounds, so every
round's ratio compares kernels that ran at the same clock.

At 8192^3 the H100 runs at its power limit and its clock moves between timings taken a second apart:
timed one after the other (wgmma_variants.py --rounds), cuBLAS's own median moved 1369-1580 µs within
one process and single-round ratios ranged 0.90-1.18. Here each round is a few milliseconds (one
launch of each kernel, L2 emptied before each), and the ratio reported is the median of the per-round
ratios, with its quartiles.

Each variant is first verified by the common path (evaluate: float64 reference, poisoned D); the timed
launches then share one set of inputs (cuBLAS reads its own copy of the same values).

    PYTHONPATH=src python bench/bench_paired.py --set s8 --only 8192 --rounds 300 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import date

import numpy as np

from gemmtune.baseline import EAGER_OPS, _mm, _operands, _torch, _torch_type, prepare
from gemmtune.device import query_device
from gemmtune.evaluate import evaluate, upload_inputs
from gemmtune.runtime import LoadedKernel, release
from gemmtune.timing import TimingProtocol, measure_alternating, ratio_to

from wgmma_variants import SETS, compile_variant, max_active_clusters


def cublas_launch(spec, prepared):
    """torch.mm into a preallocated D, as bench_cublas times it (16-bit and fp32 outputs alike)."""
    torch = _torch()
    a, b = _operands(spec, prepared.gpu)
    out = torch.empty((spec.m, spec.n), dtype=_torch_type(torch, spec.out_dtype), device="cuda")
    if spec.dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    return lambda: torch.mm(a, b, out=out)


def eager_launch(spec, prepared):
    """The unfused chain an eager model runs: the GEMM, then each epilogue op as its own torch op."""
    torch = _torch()
    a, b = _operands(spec, prepared.gpu)

    def launch():
        v = _mm(torch, spec, a, b)
        for op in spec.epilogue.ops:
            v = EAGER_OPS[op](torch, v, prepared.gpu)
        return v
    return launch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="s8", help="wgmma_variants.py's list of cases")
    parser.add_argument("--only", help="run the cases whose spec contains this text")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of one launch each (default 200)")
    parser.add_argument("--json", help="write every case's times here")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    dev = query_device()
    report, lines = [], [f"# Paired timing, {dev.name}, {date.today().isoformat()}"]
    for spec, variants in SETS[args.set]:
        if args.only and args.only not in spec.short():
            continue
        plain = spec.without_epilogue()
        if not spec.epilogue.is_identity:  # the first variant's GEMM alone, in the same rounds
            variants = [*variants, (f"{variants[0][0]}, GEMM alone", variants[0][1].without_c_options(), None)]
        kernels = {}
        for name, config, patch in variants:
            compiled = compile_variant(plain if name.endswith("GEMM alone") else spec, config, patch)
            check = evaluate(compiled, verify_only=True, rng=np.random.default_rng(5))
            if not check.verify.ok:
                print(f"{spec.short()} {name}: wrong result, left out: {check.verify.message}", flush=True)
                continue
            kernels[name] = compiled
            if config.cluster_m > 1:
                print(f"{spec.short()} {name}: clusters of {config.cluster_m} that fit at once: "
                      f"{max_active_clusters(compiled, config.cluster_m)}", flush=True)
        prepared = prepare(spec)
        launches = {"cuBLAS": cublas_launch(plain, prepared)}
        if not spec.epilogue.is_identity:
            launches["torch eager"] = eager_launch(spec, prepared)
        buffers, loaded = {}, []
        try:
            bindings = upload_inputs(spec, prepared.inputs, buffers)
            for name, compiled in kernels.items():
                loaded.append(LoadedKernel(compiled))
                launches[name] = loaded[-1].bind(bindings)
            times = measure_alternating(launches, args.rounds, dev.l2_bytes, TimingProtocol())
        finally:
            release([k.unload for k in loaded] + [b.free for b in buffers.values()], after_error=False)
        ref = times["cuBLAS"]
        lines += [f"\n## {spec.short()}: {args.rounds} rounds, cuBLAS {statistics.median(ref) * 1e6:.1f} µs "
                  f"(per round {min(ref) * 1e6:.1f} to {max(ref) * 1e6:.1f})\n",
                  "| variant | median µs | × cuBLAS (median of per-round ratios) | quartiles |", "|---|---|---|---|"]
        for name in [n for n in launches if n != "cuBLAS"]:
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
