"""Short table of bench/i13_probe.py's diagnosis: per shape, cuBLAS, the shipped chooser's pick and the
best candidate measured (ratio = cuBLAS time / ours; GEMV rows also in % of the copy bandwidth).

    python bench/i13_probe_summary.py DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

from gemmtune.chooser import choose
from gemmtune.chooser.training import rows_from_csv


def main(out: Path) -> int:
    cublas = dict(line.split(",") for line in (out / "cublas.csv").read_text().splitlines()[1:])
    copy = float(cublas.pop("copy_bytes_per_s"))
    print(f"copy bandwidth {copy / 1e9:.0f} GB/s")
    for name in ("diag-fp32.csv", "diag-gemv.csv"):
        if not (out / name).exists():
            continue
        by_spec: dict = {}
        for row in rows_from_csv(out / name):
            by_spec.setdefault(row.spec, []).append(row)
        for spec, rows in by_spec.items():
            best = min(rows, key=lambda r: r.median_s)
            pick = choose(spec, "sm_90").config
            picked = [r.median_s for r in rows if r.config == pick]
            ref = float(cublas.get(spec.short(), "nan"))
            pct = f" best {100 * spec.min_bytes / best.median_s / copy:.0f}% of copy" if spec.m == 1 or spec.n == 1 else ""
            pick_text = f"pick {ref / picked[0]:.3f}" if picked else "pick not timed"
            print(f"{spec.short():24s} cuBLAS {ref * 1e6:8.1f}us {pick_text} best {ref / best.median_s:.3f} "
                  f"({best.median_s * 1e6:.1f}us {best.config.describe()}){pct}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
