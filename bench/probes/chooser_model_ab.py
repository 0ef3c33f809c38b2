"""Probe: the wgmma picks of two chooser versions, timed side by side on the shapes whose pick moves.

    # with the old chooser checked out: write its picks
    PYTHONPATH=src:bench python bench/probes/chooser_model_ab.py --record old-picks.json
    # with the new one: time every moved pick against the recorded one
    PYTHONPATH=src:bench python bench/probes/chooser_model_ab.py --old old-picks.json [--only holdout] [--out rows.json]

Shapes: the evaluation set (bench_untuned --set eval) and the held-out shapes of the earlier probes
(chooser_tile_ab.HOLDOUT and MORE_HOLDOUT), in bf16, fp16, tf32 and fp32 with
bench_untuned's layouts. A recorded pick is the config's JSON, so the old chooser's code (features,
model file) is not needed to replay it. Timing: ab_timing.time_moved_picks (cuBLAS, both kernels twice
alternately, cuBLAS again; every kernel verified).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DTYPES = ("bf16", "fp16", "tf32", "fp32")


def shape_sets() -> dict[str, tuple]:
    from bench_untuned import EVAL_SHAPES
    from chooser_tile_ab import HOLDOUT, MORE_HOLDOUT

    return {"eval": tuple(EVAL_SHAPES), "holdout": tuple(HOLDOUT) + tuple(MORE_HOLDOUT)}


def key(spec) -> str:
    return f"{spec.m}x{spec.n}x{spec.k} {spec.layout} {spec.dtype}"


def current_picks() -> dict[str, dict]:
    """key -> (set, config JSON) of the current chooser's wgmma pick for every shape and dtype."""
    import gemmtune.chooser as chooser
    from bench_untuned import LAYOUT
    from gemmtune.kernels import family_for
    from gemmtune.spec import GemmSpec

    picks = {}
    for name, shapes in shape_sets().items():
        for dtype in DTYPES:
            for m, n, k in shapes:
                spec = GemmSpec(m, n, k, LAYOUT[dtype], dtype)
                if family_for(spec, "sm_90a").name == "wgmma":
                    picks[key(spec)] = {"set": name, "config": chooser.choose(spec, "sm_90a", 132).config.to_json()}
    return picks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, help="write the current chooser's picks here and stop")
    parser.add_argument("--old", type=Path, help="picks recorded with --record by the chooser to compare against")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", choices=("eval", "holdout"), help="time the moved picks of one shape set only")
    args = parser.parse_args()
    if args.record:
        args.record.write_text(json.dumps(current_picks(), indent=0, sort_keys=True))
        return 0
    from ab_timing import time_moved_picks, write_rows
    from bench_untuned import LAYOUT
    from gemmtune.kernels import get_family
    from gemmtune.spec import GemmSpec

    old = json.loads(args.old.read_text())
    family = get_family("wgmma")
    cases = []
    for name, new in sorted(current_picks().items(), key=lambda kv: kv[1]["set"]):
        before = old.get(name)
        if before is not None and before["config"] != new["config"] and args.only in (None, new["set"]):
            shape, layout, dtype = name.split()
            m, n, k = map(int, shape.split("x"))
            cases.append((GemmSpec(m, n, k, LAYOUT[dtype], dtype), family.config_from_json(before["config"]),
                          family.config_from_json(new["config"]), new["set"]))
    rows = time_moved_picks([c[:3] for c in cases], list(DTYPES))
    for row, case in zip(rows, cases):
        row["set"] = case[3]
    for name in ("eval", "holdout"):
        mine = [r for r in rows if r["set"] == name]
        gain = sum(math.log(r["new_ratio"] / r["old_ratio"]) for r in mine)
        print(f"{name}: {len(mine)} moved; sum of log gains {gain:+.3f}; "
              f"{sum(r['new_ratio'] > r['old_ratio'] for r in mine)} faster, "
              f"{sum(r['new_ratio'] < r['old_ratio'] for r in mine)} slower")
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
