"""Probe: stream-K over the last two waves (wgmma config.stream_k) against the schedules before it.

    PYTHONPATH=src:bench python bench/probes/stream_k_ab.py [--out rows.json] [--top 6]

On shapes of the regimes the model-shape suite showed slow (a wave and a bit of tiles, MoE-sized M,
N of a few hundred, long K with few tiles), none of them a suite or evaluation shape, in bf16 nt:
the chooser's pick as it was (no stream-K twins), the pick as it is, and each of the model's top
`--top` parents with its stream-K twin where it has one; cuBLAS before and after, in the same
process. Each kernel is verified against a float64 reference with a poisoned D and timed by
bench_untuned's protocol (L2 emptied by a read pass, median), best of two alternating runs. What it
answers: does the twin beat its parent where the schedule says it should (the rule), and how far is
the pick from the best of the candidates timed (the chooser's headroom).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (M, N, K): a wave and a bit; small N with M in the thousands; MoE experts with a few hundred tokens;
# few tiles with a long K; near two waves.
SHAPES = ((5120, 640, 2560), (7040, 896, 4096), (3072, 384, 5120), (9216, 1280, 1536),
          (200, 10240, 3072), (448, 8192, 5120), (640, 5632, 2048), (120, 12288, 6144), (704, 3584, 7168),
          (1280, 1280, 10240), (1792, 2560, 16384), (1024, 3072, 9216), (3072, 1664, 2048), (2304, 2304, 4096))


def variants(spec, top: int) -> list[tuple[str, object]]:
    """(label, config): the pick before stream-K twins, the pick now, the top parents and their twins."""
    from gemmtune.chooser import fitted, rank, rank_configs
    from gemmtune.chooser.candidates import candidates, stream_k_twin

    sm = 132
    before = fitted(spec, rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", sm), sm), sm)
    found = [("pick-before", before[0].config), ("pick-now", rank(spec, "sm_90a", sm)[0].config)]
    for i, pick in enumerate(before[:top]):
        found.append((f"r{i}", pick.config))
        twin = stream_k_twin(spec, pick.config, sm)
        if twin is not None:
            found.append((f"r{i}-sk{twin[1]:.2f}", twin[0]))
    return found


def time_spec(spec, labelled: list[tuple[str, object]], compiled: list, rounds: int = 2) -> list[dict]:
    from bench_untuned import untuned_protocol
    from gemmtune.bench import bench_compiled, bench_cublas

    protocol = untuned_protocol()
    cublas = [bench_cublas(spec, protocol).median_s]
    best: dict[str, float] = {}
    for _ in range(rounds):
        for (label, _), kernel in zip(labelled, compiled):
            t = math.nan
            if not isinstance(kernel, Exception):
                row = bench_compiled(label, "", kernel, protocol)
                t = row.median_s if row.status == "ok" and row.median_s else math.nan
            best[label] = min(best.get(label, math.inf), t) if not math.isnan(t) else math.nan
    cublas.append(bench_cublas(spec, protocol).median_s)
    c = min(t for t in cublas if t)
    return [dict(spec=spec.short(), label=label, config=config.describe(), cublas_us=c * 1e6,
                 ours_us=best[label] * 1e6, ratio=c / best[label]) for label, config in labelled]


def moved_on_eval() -> dict:
    """{spec: [(label, config)]}: the evaluation set's 16-bit wgmma shapes whose pick the stream-K twins
    moved, the pick before and now (a regression check: nothing is chosen from these timings)."""
    from bench_untuned import EVAL_SHAPES
    from gemmtune.chooser import fitted, rank, rank_configs
    from gemmtune.chooser.candidates import candidates
    from gemmtune.kernels import family_for
    from gemmtune.spec import GemmSpec

    moved = {}
    for dtype in ("bf16", "fp16"):
        for m, n, k in EVAL_SHAPES:
            spec = GemmSpec(m, n, k, "nt", dtype)
            if family_for(spec, "sm_90a").name != "wgmma":
                continue
            before = fitted(spec, rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132), 132)[0]
            now = rank(spec, "sm_90a", 132)[0]
            if now.config != before.config:
                moved[spec] = [("pick-before", before.config), ("pick-now", now.config)]
    return moved


def main() -> int:
    from gemmtune.build import compile_configs
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--eval-moved", action="store_true", help="time the evaluation set's moved picks instead")
    args = parser.parse_args()
    if args.eval_moved:
        labelled = moved_on_eval()
        specs = list(labelled)
    else:
        specs = [GemmSpec(m, n, k, "nt", "bf16") for m, n, k in SHAPES]
        labelled = {spec: list({c: (l, c) for l, c in reversed(variants(spec, args.top))}.values())[::-1]
                    for spec in specs}
    jobs = [(spec, config, "sm_90a") for spec in specs for _, config in labelled[spec]]
    compiled = iter(compile_configs(jobs))
    rows = []
    for spec in specs:
        mine = [next(compiled) for _ in labelled[spec]]
        rows += time_spec(spec, labelled[spec], mine)
        for row in rows[-len(mine):]:
            print(f"{row['spec']:26s} {row['label']:14s} {row['ours_us']:8.1f} µs x{row['ratio']:.3f} "
                  f"(cuBLAS {row['cublas_us']:.1f})  {row['config']}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    print("\nspec | pick before | pick now | best timed | cuBLAS µs")
    for spec in specs:
        mine = {r["label"]: r for r in rows if r["spec"] == spec.short()}
        fastest = max((r for r in mine.values() if r["ratio"] == r["ratio"]), key=lambda r: r["ratio"])
        now = mine.get("pick-now", mine.get("pick-before"))
        print(f"{spec.short()} | x{mine['pick-before']['ratio']:.3f} | x{now['ratio']:.3f} | "
              f"x{fastest['ratio']:.3f} {fastest['label']} | {fastest['cublas_us']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
