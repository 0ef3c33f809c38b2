"""Probe: the chooser's wgmma picks with and without one tile among its candidates, timed side by side.

    PYTHONPATH=src:bench python bench/probes/chooser_tile_ab.py --drop 128x192 [--dtypes bf16,fp16] [--holdout]
        [--out rows.json]

For every eval-set shape (bench_untuned --set eval; with --holdout the held-out shapes of
chooser_split_stretch.py and MORE_HOLDOUT, in neither that set nor the bench set) whose wgmma pick moves when the tile is taken out
of `chooser.candidates.wgmma_tiles` for 2-byte inputs, this times in one process: cuBLAS, the old
pick, the new pick, twice each alternately, cuBLAS again (bench_untuned's protocol: L2 emptied by a
read pass, median; every kernel verified against a float64 reference). Prints one line per moved
pick and the sum of log gains per dtype.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# More held-out shapes (mid-sized, one to a few waves), chosen 2026-11-26 before their first run.
MORE_HOLDOUT = ((768, 2304, 1536), (1280, 3840, 2048), (2560, 2560, 3072), (384, 6144, 2048), (3584, 1792, 1024),
                (640, 5120, 4096), (1792, 1792, 7168), (896, 2688, 896), (1152, 4608, 2304), (2304, 3072, 1536))


def moved_picks(dtypes: list[str], shapes, tile: tuple[int, int]) -> list[tuple]:
    """(spec, old config, new config) where dropping `tile` moves the chooser's wgmma pick."""
    import gemmtune.chooser as chooser
    from bench_untuned import LAYOUT
    from gemmtune.kernels import family_for
    from gemmtune.spec import GemmSpec

    candidates = sys.modules["gemmtune.chooser.candidates"]
    keep, moved = candidates.wgmma_tiles, []

    def without(spec):
        return tuple(t for t in keep(spec) if t != tile)

    for dtype in dtypes:
        for m, n, k in shapes:
            spec = GemmSpec(m, n, k, LAYOUT[dtype], dtype)
            if family_for(spec, "sm_90a").name != "wgmma":
                continue
            old = chooser.choose(spec, "sm_90a").config
            candidates.wgmma_tiles = without
            try:
                new = chooser.choose(spec, "sm_90a").config
            finally:
                candidates.wgmma_tiles = keep
            if old != new:
                moved.append((spec, old, new))
    return moved


def main() -> int:
    from bench_untuned import EVAL_SHAPES, untuned_protocol
    from gemmtune.bench import bench_compiled, bench_cublas
    from gemmtune.build import compile_configs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", default="128x192", help="the tile taken out, BMxBN")
    parser.add_argument("--dtypes", default="bf16,fp16")
    parser.add_argument("--holdout", action="store_true", help="the held-out shapes instead of the eval set")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    tile = tuple(int(x) for x in args.drop.split("x"))
    dtypes = args.dtypes.split(",")
    if args.holdout:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from chooser_split_stretch import HOLDOUT
    cases = moved_picks(dtypes, HOLDOUT + MORE_HOLDOUT if args.holdout else EVAL_SHAPES, tile)
    print(f"{len(cases)} moved picks", flush=True)
    compiled = compile_configs([(spec, c, "sm_90a") for spec, old, new in cases for c in (old, new)])
    protocol, rows = untuned_protocol(), []
    for i, (spec, old, new) in enumerate(cases):
        kernels = {"old": compiled[2 * i], "new": compiled[2 * i + 1]}
        cublas = [bench_cublas(spec, protocol).median_s]
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(2):
            for name, kernel in kernels.items():
                row = None if isinstance(kernel, Exception) else bench_compiled(name, "", kernel, protocol)
                ok = row is not None and row.median_s and row.status == "ok"
                times[name].append(row.median_s if ok else math.nan)
        cublas.append(bench_cublas(spec, protocol).median_s)
        c, o, n = min(cublas), min(times["old"]), min(times["new"])
        rows.append(dict(spec=f"{spec.m}x{spec.n}x{spec.k} {spec.layout} {spec.dtype}", dtype=spec.dtype,
                         old=old.describe(), new=new.describe(), cublas_us=c * 1e6, old_us=o * 1e6,
                         new_us=n * 1e6, old_ratio=c / o, new_ratio=c / n))
        print(f"{rows[-1]['spec']:28s} cuBLAS {c * 1e6:8.1f} µs  old {o * 1e6:8.1f} ×{c / o:.3f}  "
              f"new {n * 1e6:8.1f} ×{c / n:.3f}  {old.describe()} -> {new.describe()}", flush=True)
    for dtype in dtypes:
        mine = [r for r in rows if r["dtype"] == dtype]
        if mine:
            gain = sum(math.log(r["new_ratio"] / r["old_ratio"]) for r in mine)
            print(f"{dtype}: {len(mine)} moved; sum of log gains {gain:+.3f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
