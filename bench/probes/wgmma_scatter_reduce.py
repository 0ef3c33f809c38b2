"""Probe: a split tail's partial tiles gathered by the finisher alone, or reduced in shares by the contributors.

    PYTHONPATH=src:bench python bench/probes/wgmma_scatter_reduce.py [--out rows.json]

With equal splits of SCATTER_SPLITS pieces or more, every piece of a wgmma split tile sums a share
of the tile over every partial tile and writes that share to D (kernels/wgmma/schedule.py,
`sum_share_to_d`; when this probe's table was taken, the contributors stored their shares' sums and
the finisher added them); below it, the finisher adds the partial tiles one after another. For each case (a spec and a wgmma config: the chooser's pick, and others where named) this
compiles the config both ways in this process (serial: SCATTER_SPLITS raised out of reach) and times,
in one process: cuBLAS, serial, scattered, twice each alternately, cuBLAS again (bench_untuned's
protocol: L2 emptied by a read pass, median; every kernel verified against a float64 reference).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# (m, n, k, layout, dtype, tile or None for the chooser's pick): few tiles and long K, where a unit
# is split many ways.
CASES = ((96, 96, 65536, "nt", "bf16", None), (96, 96, 65536, "nt", "bf16", (128, 128)),
         (96, 96, 65536, "nt", "fp16", None), (96, 96, 65536, "nt", "tf32", None),
         (96, 96, 65536, "nt", "tf32", (64, 64)), (96, 96, 65536, "nn", "fp32", None),
         (512, 512, 65536, "nt", "bf16", None), (512, 512, 65536, "nt", "bf16", (128, 256)),
         (512, 512, 65536, "nt", "tf32", None), (1024, 1024, 16384, "nt", "tf32", None),
         (257, 1023, 4104, "nt", "tf32", None), (257, 1023, 4104, "nt", "tf32", (128, 128)),
         (4096, 128, 4096, "nt", "tf32", None), (4096, 128, 4096, "nt", "tf32", (256, 128)),
         (128, 4096, 14336, "nt", "bf16", (128, 256)), (1, 4096, 8192, "nn", "bf16", (128, 256)))


def case_config(spec, tile):
    """The chooser's pick, or the ranked candidate of that tile closest to the top."""
    from gemmtune.chooser import choose, rank

    if tile is None:
        return choose(spec, "sm_90a").config
    for pick in rank(spec, "sm_90a", family="wgmma"):
        if (pick.config.bm, pick.config.bn) == tile and pick.config.split_tail:
            return pick.config
    raise SystemExit(f"no split-tail {tile} candidate for {spec.short()}")


def compile_both(spec, config):
    """(serial, scattered) compiled kernels of one config."""
    import gemmtune.kernels.wgmma.schedule as schedule
    from gemmtune.compiler import compile_kernel
    from gemmtune.kernels.wgmma.render import render

    scattered = compile_kernel(render(spec, config), "sm_90a")
    keep = schedule.SCATTER_SPLITS
    schedule.SCATTER_SPLITS = 1 << 30
    try:
        serial = compile_kernel(render(spec, config), "sm_90a")
    finally:
        schedule.SCATTER_SPLITS = keep
    return serial, scattered


def main() -> int:
    from ab_timing import time_alternately, write_rows
    from gemmtune.kernels.wgmma.schedule import schedule_for
    from gemmtune.spec import GemmSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    for m, n, k, layout, dtype, tile in CASES:
        spec = GemmSpec(m, n, k, layout, dtype)
        config = case_config(spec, tile)
        plan = schedule_for(spec, config)
        kernels = dict(zip(("serial", "scatter"), compile_both(spec, config)))
        c, best, status = time_alternately(spec, kernels)
        s, p = best["serial"], best["scatter"]
        rows.append(dict(spec=f"{m}x{n}x{k} {layout} {dtype}", config=config.describe(), splits=plan.splits,
                         split_units=plan.split_units, pick=tile is None, cublas_us=c * 1e6, serial_us=s * 1e6,
                         scatter_us=p * 1e6, serial_ratio=c / s, scatter_ratio=c / p, status=status))
        print(f"{rows[-1]['spec']:24s} {'pick' if tile is None else 'alt ':4s} {plan.split_units:3d} units x "
              f"{plan.splits:3d}  cuBLAS {c * 1e6:7.1f}  serial {s * 1e6:7.1f} x{c / s:.3f}  "
              f"scatter {p * 1e6:7.1f} x{c / p:.3f}  {status}  {config.describe()}", flush=True)
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
