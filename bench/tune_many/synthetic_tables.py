"""Synthetic simulation tables for every shape of a workload, in the family tune-many picks for it on
sm_90, so `tune_many_gpu.sh` can be run with DRY=1 (tune-many --simulate) on a machine without a GPU.
Times are the workload's roofline estimate times a config-dependent factor in [1, 3); the untuned
pick is always in the table; meta carries a cuBLAS time (0.9 × the roofline estimate).

    PYTHONPATH=src python bench/tune_many/synthetic_tables.py WORKLOAD DIR
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np

from gemmtune.kernels import family_for
from gemmtune.tune.many import untuned_config
from gemmtune.tune.simulation import SimulationTable, TableRow, table_path
from gemmtune.tune.space import candidate_set, space_for
from gemmtune.tune.trial import Environment, Status
from gemmtune.workload import estimated_seconds, load_workload

ENV = Environment("Synthetic H100 (dry run)", "9.0", 132, "sm_90", "13.0", "13.0")
ROWS = 400


def factor(config) -> float:
    return 1.0 + (zlib.crc32(config.key().encode()) % 1000) / 500.0


def main(workload_path: str, directory: str) -> None:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for shape in load_workload(workload_path).shapes:
        spec = shape.spec
        family = family_for(spec, "sm_90", None).name
        space = space_for(family)
        candidates = candidate_set(space, spec, "sm_90")
        rng = np.random.default_rng(zlib.crc32(spec.short().encode()))
        picked = rng.choice(len(candidates), size=min(ROWS, len(candidates)), replace=False)
        configs = candidates.configs(sorted(int(p) for p in picked)) + [untuned_config(spec, "sm_90", family)]
        rows = {c: TableRow(Status.OK, estimated_seconds(spec) * factor(c)) for c in configs}
        table = SimulationTable(family, space.version, spec, ENV, rows,
                                {"source": "synthetic dry run", "cublas_median_s": 0.9 * estimated_seconds(spec)})
        path = table_path(family, spec, out)
        table.to_csv(path)
        print(f"{spec.short():26s} {family:6s} {len(rows)} rows -> {path}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
