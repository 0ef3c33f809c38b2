"""The probes' side-by-side timing: kernels of one spec timed in turn between two cuBLAS runs.

bench_untuned's protocol (L2 emptied by a read pass, median of each run); every kernel verified
against a float64 reference with a poisoned D (bench_compiled), a failed or wrong one timed as NaN.
"""
from __future__ import annotations

import math
from typing import Any


def time_alternately(spec, kernels: dict[str, Any], rounds: int = 2) -> tuple[float, dict[str, float], dict[str, str]]:
    """cuBLAS, then every kernel in turn `rounds` times, then cuBLAS again: the best cuBLAS time, the
    best time of each kernel (NaN where it failed), and each kernel's last status. A kernel that is an
    exception (a failed compile) is not run."""
    from bench_untuned import untuned_protocol
    from gemmtune.bench import bench_compiled, bench_cublas

    protocol = untuned_protocol()
    cublas = [bench_cublas(spec, protocol).median_s]
    times: dict[str, list[float]] = {name: [] for name in kernels}
    status = {name: str(kernel)[:120] for name, kernel in kernels.items() if isinstance(kernel, Exception)}
    for _ in range(rounds):
        for name, kernel in kernels.items():
            if isinstance(kernel, Exception):
                times[name].append(math.nan)
                continue
            row = bench_compiled(name, "", kernel, protocol)
            status[name] = row.status
            times[name].append(row.median_s if row.status == "ok" and row.median_s else math.nan)
    cublas.append(bench_cublas(spec, protocol).median_s)
    cublas = [t for t in cublas if t] or [math.nan]  # cuBLAS may refuse a shape (no time)
    return min(cublas), {name: min(t) for name, t in times.items()}, status


def time_moved_picks(cases: list[tuple], dtypes: list[str]) -> list[dict]:
    """(spec, old config, new config) cases: compile both, time them side by side, print a line each
    and the sum of log gains per dtype; the rows."""
    from gemmtune.build import compile_configs

    print(f"{len(cases)} moved picks", flush=True)
    compiled = compile_configs([(spec, c, "sm_90a") for spec, old, new in cases for c in (old, new)])
    rows = []
    for i, (spec, old, new) in enumerate(cases):
        c, best, _ = time_alternately(spec, {"old": compiled[2 * i], "new": compiled[2 * i + 1]})
        o, n = best["old"], best["new"]
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
    return rows


def moved_wgmma_picks(dtypes: list[str], shapes, old_pick, new_pick) -> list[tuple]:
    """(spec, old config, new config) for every shape and dtype (bench_untuned's layouts) whose wgmma
    pick differs between `old_pick(spec)` and `new_pick(spec)`."""
    from bench_untuned import LAYOUT
    from gemmtune.kernels import family_for
    from gemmtune.spec import GemmSpec

    moved = []
    for dtype in dtypes:
        for m, n, k in shapes:
            spec = GemmSpec(m, n, k, LAYOUT[dtype], dtype)
            if family_for(spec, "sm_90a").name != "wgmma":
                continue
            old, new = old_pick(spec), new_pick(spec)
            if old != new:
                moved.append((spec, old, new))
    return moved


def time_variants(cases: list[tuple], out=None) -> list[dict]:
    """(spec, label, config) cases of any family: those the config's family rejects listed, the others
    compiled and timed spec by spec (time_alternately), a line each; the rows (written to `out` after each spec)."""
    from gemmtune.build import compile_configs
    from gemmtune.kernels import family_of_config

    valid = []
    for spec, label, config in cases:
        problems = family_of_config(config).rejections(config, spec, "sm_90a")
        if problems:
            print(f"{spec.short():24s} {label:16s} rejected: {'; '.join(problems.values())}")
        else:
            valid.append((spec, label, config))
    compiled = compile_configs([(spec, config, "sm_90a") for spec, _, config in valid])
    rows = []
    for spec in dict.fromkeys(s for s, _, _ in valid):
        mine = [(label, config, kernel) for (s, label, config), kernel in zip(valid, compiled) if s == spec]
        c, best, _ = time_alternately(spec, {label: kernel for label, _, kernel in mine})
        for label, config, kernel in mine:
            t = best[label]
            error = str(kernel) if isinstance(kernel, Exception) else ""
            rows.append(dict(spec=spec.short(), label=label, config=config.describe(), cublas_us=c * 1e6,
                             ours_us=t * 1e6, ratio=c / t, error=error))
            print(f"{spec.short():24s} {label:16s} {t * 1e6:8.1f} µs  x{c / t:.3f}  (cuBLAS {c * 1e6:.1f})  "
                  f"{config.describe()}{'  ' + error[:80] if error else ''}", flush=True)
        write_rows(out, rows)
    return rows


def write_rows(path, rows: list[dict]) -> None:
    """The rows as JSON at `path` (nothing when it is None)."""
    import json

    if path:
        path.write_text(json.dumps(rows, indent=1))


def nt_cases(shapes, variants) -> list[tuple]:
    """(spec, label, config) for every (m, n, k, dtype) of `shapes` in the nt layout and every
    (label, config) that `variants(spec)` gives."""
    from gemmtune.spec import GemmSpec

    specs = [GemmSpec(m, n, k, "nt", dtype) for m, n, k, dtype in shapes]
    return [(spec, label, config) for spec in specs for label, config in variants(spec)]


def variants_main(description: str, cases_of) -> int:
    """A variants probe's command line: --out FILE, then `cases_of()` ((spec, label, config) cases) timed
    by time_variants."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    time_variants(cases_of(), args.out)
    return 0
