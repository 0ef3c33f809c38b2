"""Probe: a fused GEMM on the tile the plain GEMM's pick uses, against the chooser's own fused pick.

    PYTHONPATH=src:bench python bench/probes/fused_tile.py [--out rows.json]

The chooser's model was trained on plain GEMMs; on a spec whose epilogue reads C it ranks the
C-path candidates (c_ring, c_spread) of every tile and often lands on another tile than the plain
GEMM's pick, slower by 7-43% (the model-shape suite of 2026-11-28, all ten such rows). Here, per
shape (none a suite or evaluation shape; bf16 nt; epilogues that read C, and bias): `fused-pick`,
the chooser's pick for the fused spec; `plain-tile`, the fused spec's candidate with the plain pick's
tile, grid and cluster (chooser.candidates builds both lists from the same bases); `plain`, the
plain GEMM alone. Verified against float64 with a poisoned D; bench_untuned's protocol; best of
two alternating runs; cuBLAS (the GEMM alone) before and after.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ((40, 5120, 13824, "add"), (24, 4096, 4096, "add"), (56, 8192, 8192, "add"), (5000, 1024, 1024, "bias_col+add"),
         (3000, 1024, 4096, "bias_col+add"), (6000, 768, 768, "bias_col+add"), (1000, 1280, 5120, "bias_col+add"),
         (4096, 2048, 1024, "add"), (1024, 2048, 8192, "add"), (3072, 3072, 1536, "bias_col+add"),
         (40, 14336, 4096, "bias_col"), (3000, 2560, 2560, "bias_col"))


def variants(spec) -> list[tuple[str, object]]:
    from gemmtune.chooser import fitted, plain_tile_pick, rank, rank_configs
    from gemmtune.chooser.candidates import candidates

    ranked = fitted(spec, rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132), 132)  # the model's order
    same = plain_tile_pick(spec, ranked, "sm_90a", 132)
    plain = rank(spec.without_epilogue(), "sm_90a", 132)[0].config
    return [("fused-pick", ranked[0].config), ("plain-tile", same.config), ("plain", plain)]


def main() -> int:
    from bench_untuned import untuned_protocol
    from gemmtune.bench import bench_compiled, bench_cublas
    from gemmtune.build import compile_configs
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    protocol = untuned_protocol()
    specs = [GemmSpec(m, n, k, "nt", "bf16", epilogue) for m, n, k, epilogue in CASES]
    jobs = [(spec if label != "plain" else spec.without_epilogue(), config, label)
            for spec in specs for label, config in variants(spec)]
    compiled = compile_configs([(s, c, "sm_90a") for s, c, _ in jobs])
    rows = []
    for spec in specs:
        mine = [(label, s, c, k) for (s, c, label), k in zip(jobs, compiled) if s.without_epilogue() == spec.without_epilogue()]
        cublas = [bench_cublas(spec.without_epilogue(), protocol).median_s]
        best: dict[str, float] = {}
        for _ in range(2):
            for label, _, _, kernel in mine:
                t = math.nan
                if not isinstance(kernel, Exception):
                    row = bench_compiled(label, "", kernel, protocol)
                    t = row.median_s if row.status == "ok" and row.median_s else math.nan
                best[label] = min(best.get(label, math.inf), t) if t == t else math.nan
        cublas.append(bench_cublas(spec.without_epilogue(), protocol).median_s)
        c = min(t for t in cublas if t)
        for label, _, config, kernel in mine:
            rows.append(dict(spec=spec.short(), label=label, config=config.describe(), us=best[label] * 1e6,
                             cublas_us=c * 1e6, ratio=c / best[label],
                             error=str(kernel)[:120] if isinstance(kernel, Exception) else ""))
            r = rows[-1]
            print(f"{r['spec']:34s} {label:11s} {r['us']:8.1f} µs x{r['ratio']:.3f} (cuBLAS {c * 1e6:.1f})  {r['config']} {r['error']}",
                  flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    print("\nspec | fused pick µs | plain tile µs | plain µs | cuBLAS µs")
    for spec in specs:
        t = {r["label"]: r["us"] for r in rows if r["spec"] == spec.short()}
        c = next(r["cublas_us"] for r in rows if r["spec"] == spec.short())
        print(f"{spec.short()} | {t['fused-pick']:.1f} | {t['plain-tile']:.1f} | {t['plain']:.1f} | {c:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
