"""Probe: the chooser's wgmma picks with and without `split_stretch`, timed side by side.

    PYTHONPATH=src python bench/probes/chooser_split_stretch.py [--dtypes tf32,fp32] [--holdout] [--out rows.json]

The chooser's model was trained without split-tail rows and describes a split-tail candidate's tiles
unsplit; `chooser.split_stretch` scales its time by how much the split schedule shortens the unsplit
one. For every shape (the evaluation set of bench_untuned, or with --holdout shapes in neither that
set nor the bench set: few tiles, long K) whose pick moves, this times in one process: cuBLAS, the old
pick (stretch 1.0), the new pick, twice each alternately, cuBLAS again (bench_untuned's protocol:
L2 emptied by a read pass, median; every kernel verified against a float64 reference). Kernels are
compiled first in a process pool. Prints one line per moved pick and the sum of log gains per dtype.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HOLDOUT = ((768, 768, 8192), (1024, 2048, 8192), (256, 4096, 8192), (384, 1536, 12288), (2048, 1024, 4096),
           (640, 640, 20480), (1280, 1280, 5120), (256, 2048, 16384), (1536, 768, 6144), (512, 2560, 2560),
           (3000, 1000, 6000), (200, 5000, 3000), (1024, 512, 32768), (768, 3072, 3072), (2048, 1536, 2048),
           (448, 7168, 2048))


def moved_picks(dtypes: list[str], shapes, min_bytes: int | None = None) -> list[tuple]:
    """(spec, old config, new config) where the stretch moves the chooser's wgmma pick (min_bytes:
    the new pick with the stretch on for inputs of that many bytes per element and more)."""
    import gemmtune.chooser as chooser
    from bench_untuned import LAYOUT
    from gemmtune.kernels import family_for
    from gemmtune.spec import GemmSpec

    stretch, moved = chooser.split_stretch, []
    for dtype in dtypes:
        for m, n, k in shapes:
            spec = GemmSpec(m, n, k, LAYOUT[dtype], dtype)
            if family_for(spec, "sm_90a").name != "wgmma":
                continue
            keep = chooser.STRETCH_MIN_ELEMENT_BYTES
            chooser.STRETCH_MIN_ELEMENT_BYTES = min_bytes or keep
            try:
                new = chooser.choose(spec, "sm_90a").config
            finally:
                chooser.STRETCH_MIN_ELEMENT_BYTES = keep
            chooser.split_stretch = lambda *args: 1.0
            try:
                old = chooser.choose(spec, "sm_90a").config
            finally:
                chooser.split_stretch = stretch
            if old != new:
                moved.append((spec, old, new))
    return moved


def main() -> int:
    from bench_untuned import EVAL_SHAPES, untuned_protocol
    from gemmtune.bench import bench_compiled, bench_cublas
    from gemmtune.build import compile_configs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bf16,tf32,fp32")
    parser.add_argument("--holdout", action="store_true", help="the held-out shapes instead of the eval set")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--min-bytes", type=int, help="the new arm stretches inputs of this many bytes per element "
                        "and more (default chooser.STRETCH_MIN_ELEMENT_BYTES)")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    cases = moved_picks(dtypes, HOLDOUT if args.holdout else EVAL_SHAPES, args.min_bytes)
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
