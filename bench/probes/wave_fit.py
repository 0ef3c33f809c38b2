"""Probe: tiles fitted to whole waves (cuBLAS's habit on Hopper) against the chooser's pick.

    PYTHONPATH=src:bench python bench/probes/wave_fit.py [--out rows.json] [--fits 4]

cuBLAS (nvjet, torch 2.11) runs 128x80 tiles on 3072x384x5120 (120 tiles: one wave, no split),
128x160 on 3072x1664x2048 (264: two waves of 132), 112x128 on 1280x1280x10240 (120): it sizes the tile
so that the tile count fills whole waves (bench/results/2026-11-28-h200-cublas-kernels.md). Our tiles
are 64, 128 or 256 rows (wgmma's M is 64 a warpgroup) and any multiple of 8 columns up to 256 for B
stored K-major. For each shape (the model-shape regimes, none a suite or evaluation shape; bf16 nt):
the pick, and the `--fits` configs whose tiles fill the most of their waves (work in D over the
tile-slots of the waves it takes), each in the pick's form where its width allows a TMA store and with
direct stores otherwise, split tail on. Verified against float64 with a poisoned D; bench_untuned's
protocol; best of two alternating runs; cuBLAS before and after.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = ((5120, 640, 2560), (7040, 896, 4096), (3072, 384, 5120), (9216, 1280, 1536), (200, 10240, 3072),
          (448, 8192, 5120), (640, 5632, 2048), (120, 12288, 6144), (704, 3584, 7168), (1280, 1280, 10240),
          (1024, 3072, 9216), (3072, 1664, 2048), (2304, 2304, 4096), (24, 6144, 4096), (56, 5120, 5120),
          (3000, 640, 1536), (5000, 1536, 1024), (320, 7168, 2560))
SLOTS = 132


def wave_fill(m: int, n: int, bm: int, bn: int, slots: int = SLOTS) -> float:
    """Work in D over the tile-slots of the waves the tiles take (1.0: every slot of every wave busy on D)."""
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    return m * n / (math.ceil(tiles / slots) * slots * bm * bn)


def tile_rate(bm: int, bn: int) -> float:
    """A guess at a tile's speed relative to 128x256: the square root of its products per operand byte
    (bm·bn / (bm + bn)) over 128x256's (small tiles reread A and B more, from L2 and shared memory)."""
    return math.sqrt(bm * bn / (bm + bn) / (128 * 256 / 384))


def fits(spec, count: int) -> list[tuple[int, int]]:
    """The `count` (bm, bn) with the best wave fill times tile_rate: bm 64/128/256, bn the narrowest
    multiple of 16 that covers N in t tiles (t = 1 ...), 64 to 256 columns; ties to the wider tile."""
    found = set()
    for bm in (64, 128, 256):
        for across in range(1, math.ceil(spec.n / 64) + 1):
            bn = 16 * math.ceil(spec.n / (16 * across))
            if 64 <= bn <= 256:
                found.add((bm, bn))
    score = lambda t: wave_fill(spec.m, spec.n, *t) * tile_rate(*t)  # noqa: E731
    return sorted(found, key=lambda t: (-score(t), -t[0] * t[1]))[:count]


def fitted_config(spec, pick, bm: int, bn: int):
    """The pick re-tiled: consumers for bm, a TMA store where the width allows its slices, else direct
    stores; split tail on; the deepest ring that fits."""
    from gemmtune.chooser.candidates import _deepest, with_write_back_options
    from gemmtune.kernels.wgmma import FAMILY

    base = pick.with_(bm=bm, bn=bn, consumers=1 if bm == 64 else 2, cluster_m=1, split_tail=True, persistent=True,
                      stages=2)
    stored = with_write_back_options(base.with_(tma_store=True, store_slices=1, stmatrix=False, serpentine=False,
                                                overlap_epilogue=False), spec)
    if not FAMILY.rejections(stored, spec, "sm_90a"):
        return stored
    direct = _deepest(base.with_(tma_store=False, store_slices=1, stmatrix=False, overlap_epilogue=False,
                                 c_ring=False, c_l2_prefetch=False, d_over_c=False, c_first_buffer=False), spec)
    return None if FAMILY.rejections(direct, spec, "sm_90a") else direct


def variants(spec, count: int) -> list[tuple[str, object]]:
    from gemmtune.chooser import rank

    pick = rank(spec, "sm_90a", SLOTS)[0].config
    found = [(f"pick {wave_fill(spec.m, spec.n, pick.bm, pick.bn) * tile_rate(pick.bm, pick.bn):.2f}", pick)]
    for bm, bn in fits(spec, count):
        config = fitted_config(spec, pick, bm, bn)
        if config is not None and config not in (c for _, c in found):
            found.append((f"fit{bm}x{bn} {wave_fill(spec.m, spec.n, bm, bn) * tile_rate(bm, bn):.2f}", config))
    return found


def time_spec(spec, labelled, compiled, rounds: int = 2) -> list[dict]:
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
            best[label] = min(best.get(label, math.inf), t) if t == t else math.nan
    cublas.append(bench_cublas(spec, protocol).median_s)
    c = min(t for t in cublas if t)
    return [dict(spec=spec.short(), label=label, config=config.describe(), cublas_us=c * 1e6,
                 ours_us=best[label] * 1e6, ratio=c / best[label],
                 error=str(kernel)[:160] if isinstance(kernel, Exception) else "")
            for (label, config), kernel in zip(labelled, compiled)]


def main() -> int:
    from gemmtune.build import compile_configs
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fits", type=int, default=4)
    args = parser.parse_args()
    specs = [GemmSpec(m, n, k, "nt", "bf16") for m, n, k in SHAPES]
    labelled = {spec: variants(spec, args.fits) for spec in specs}
    compiled = iter(compile_configs([(spec, c, "sm_90a") for spec in specs for _, c in labelled[spec]]))
    rows = []
    for spec in specs:
        mine = [next(compiled) for _ in labelled[spec]]
        rows += time_spec(spec, labelled[spec], mine)
        for row in rows[-len(mine):]:
            print(f"{row['spec']:26s} {row['label']:18s} {row['ours_us']:8.1f} µs x{row['ratio']:.3f} "
                  f"(cuBLAS {row['cublas_us']:.1f})  {row['config']} {row['error']}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    print("\nspec | pick | best fit | cuBLAS µs")
    for spec in specs:
        mine = [r for r in rows if r["spec"] == spec.short()]
        pick = mine[0]
        fitted = [r for r in mine[1:] if r["ratio"] == r["ratio"]]
        best = max(fitted, key=lambda r: r["ratio"]) if fitted else None
        print(f"{spec.short()} | x{pick['ratio']:.3f} {pick['label']} | "
              + (f"x{best['ratio']:.3f} {best['label']}" if best else "-") + f" | {pick['cublas_us']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
