"""GPU benchmark for issue 14: the numba-cuda ladder beside the CUDA-C ladder (same configs), cuBLAS in
the same process; every kernel verified (float64 reference, NaN-poisoned D) before it is timed.

    PYTHONPATH=src python bench/bench_numba.py --sizes 1024 2048 4096 --out DIR

Writes DIR/ladder-<size>.json (what `gemmtune plot` reads) and DIR/numba-ladder.md, and prints the
tables last. The plots and profiles of bench/results/2026-11-23-h100-numba.md came from the same
folder:

    gemmtune plot ladder DIR/ladder-4096.json --out DIR/numba-ladder-4096
    gemmtune plot roofline DIR/ladder-*.json --out DIR/roofline
    gemmtune profile MNK=4096 --family numba --config warptiling      # also simt, cublas, cublas-tf32
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gemmtune.build import target_arch  # noqa: E402
from gemmtune.cli.numba_cmds import ladder_json  # noqa: E402
from gemmtune.device import query_device  # noqa: E402
from gemmtune.numba_ladder.ladder import compare_ladder, markdown_table  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402
from gemmtune.timing import TimingProtocol  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096], help="square sizes M=N=K")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds of timed runs per kernel")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the JSON and markdown")
    args = parser.parse_args()
    device, arch = query_device(), target_arch(None)
    protocol = TimingProtocol(min_time_s=args.min_time)
    args.out.mkdir(parents=True, exist_ok=True)
    tables = [f"# numba-cuda ladder vs CUDA-C ladder on {device.name} ({arch}, {device.sm_count} SMs)", "",
              f"Driver CUDA {device.driver_version}; protocol: {protocol.to_json()}. 'numba speed / CUDA-C' is the "
              "CUDA-C time divided by the numba time of the same config in the same run.", ""]
    for size in args.sizes:
        spec = GemmSpec(size, size, size)
        print(f"{spec.short()} ...", file=sys.stderr)
        cublas, pairs = compare_ladder(spec, arch, protocol, on_pair=lambda p: print(
            f"  {p.step:<14} CUDA-C {p.cuda_c.status} {p.cuda_c.median_s}, numba {p.numba.status} "
            f"{p.numba.median_s} {p.numba.message[:80]}", file=sys.stderr))
        (args.out / f"ladder-{size}.json").write_text(json.dumps(ladder_json(spec, device, cublas, pairs), indent=1))
        tables += [f"## {spec.short()}", "", markdown_table(spec, cublas, pairs), ""]
    (args.out / "numba-ladder.md").write_text("\n".join(tables))
    print("\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
