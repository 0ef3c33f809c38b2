"""Probe: how a split tail's contributors sum their shares of the partial tiles (schedule.ShareSum).

    PYTHONPATH=src:bench python bench/probes/wgmma_share_sum.py [--out rows.json]

For each case of wgmma_scatter_reduce.py (and the eval set's few-tile long-K picks) the same config
is rendered several ways in this process and compiled in a pool, then timed in one process: cuBLAS,
every variant twice alternately, cuBLAS again (bench_untuned's protocol: L2 emptied by a read pass,
median; every kernel verified against a float64 reference with a poisoned D):

- `serial`: the finisher adds the partial tiles one after another (SCATTER_SPLITS out of reach);
  only where a unit has at most 16 pieces;
- `before`: the contributors' sums as before ShareSum: one lane an element, contributors in order,
  (8 loads, 2 elements) with at most 64 accumulators a thread, else (4, 1);
- `now`: the shipped plan (`schedule.scatter_loads`, `share_sum`);
- `loads16`: 16 loads in flight where the shipped rule allows fewer.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wgmma_scatter_reduce import CASES, case_config  # noqa: E402

EXTRA = ((96, 96, 65536, "nt", "fp16", None), (512, 512, 65536, "nt", "fp16", None),
         (256, 256, 32768, "nt", "bf16", None), (384, 256, 16384, "nt", "bf16", None))


def before_plan(schedule, config, loads):
    """The plan the contributors ran before ShareSum (lanes 1, the old loads and chunk)."""
    from gemmtune.kernels.config_base import ceil_div
    from gemmtune.kernels.wgmma.schedule import THREADS, ShareSum

    old_loads, old_chunk = (8, 2) if config.accumulators <= 64 else (4, 1)
    contributors = schedule.splits - 1
    per_thread = ceil_div(ceil_div(THREADS * config.accumulators // 4, contributors), THREADS)
    chunk = min(per_thread, old_chunk)
    return ShareSum(1, chunk, old_loads // chunk)


def render_variants(spec, config) -> dict:
    """name -> KernelSource of the variants that apply to this case."""
    import gemmtune.kernels.wgmma.schedule as schedule
    from gemmtune.kernels.wgmma.render import render

    plan = schedule.schedule_for(spec, config)
    shipped_plan, shipped_loads, keep_splits = schedule.reduce_plan, schedule.scatter_loads, schedule.SCATTER_SPLITS
    out = {}
    try:
        if plan.splits <= 16:
            schedule.SCATTER_SPLITS = 1 << 30
            out["serial"] = render(spec, config)
            schedule.SCATTER_SPLITS = keep_splits
        schedule.reduce_plan = before_plan
        out["before"] = render(spec, config)
        schedule.reduce_plan = shipped_plan
        out["now"] = render(spec, config)
        if shipped_loads(spec, config) < 16:
            schedule.scatter_loads = lambda spec, config: 16
            out["loads16"] = render(spec, config)
    finally:
        schedule.reduce_plan, schedule.scatter_loads, schedule.SCATTER_SPLITS = shipped_plan, shipped_loads, keep_splits
    return out


def compile_source(source):
    from gemmtune.compiler import compile_kernel
    from gemmtune.errors import GemmtuneError

    try:
        return compile_kernel(source, "sm_90a")
    except GemmtuneError as err:
        return err


def main() -> int:
    from ab_timing import time_alternately, write_rows
    from gemmtune.kernels.wgmma.schedule import reduce_plan, scatter_loads, schedule_for
    from gemmtune.lifeline import spawn_pool
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    cases = []
    for m, n, k, layout, dtype, tile in CASES + EXTRA:
        spec = GemmSpec(m, n, k, layout, dtype)
        config = case_config(spec, tile)
        if schedule_for(spec, config).scatter:
            cases.append((spec, config, tile, render_variants(spec, config)))
    sources = [source for *_, variants in cases for source in variants.values()]
    with spawn_pool(None) as pool:
        compiled = iter(list(pool.map(compile_source, sources)))
    rows = []
    for spec, config, tile, variants in cases:
        kernels = {name: next(compiled) for name in variants}
        c, best, status = time_alternately(spec, kernels)
        plan = schedule_for(spec, config)
        share = reduce_plan(plan, config, scatter_loads(spec, config))
        rows.append(dict(spec=spec.short(), config=config.describe(), pick=tile is None, splits=plan.splits,
                         split_units=plan.split_units, share_sum=str(share), cublas_us=c * 1e6,
                         **{f"{name}_us": t * 1e6 for name, t in best.items()}, status=status))
        times = "  ".join(f"{name} {t * 1e6:7.1f} x{c / t:.3f}" for name, t in best.items())
        print(f"{spec.short():26s} {'pick' if tile is None else 'alt ':4s} {plan.split_units:3d} x {plan.splits:3d} "
              f"cuBLAS {c * 1e6:7.1f}  {times}  [{share}]  {config.describe()}", flush=True)
        bad = {name: s for name, s in status.items() if s != "ok"}
        if bad:
            print(f"    not ok: {bad}", flush=True)
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
