"""Probe: how well a retrained wgmma chooser model picks on shapes it never saw (CPU only).

    PYTHONPATH=src python bench/probes/chooser_retrain.py [--folds 6] [--without-old] [--shipped] [--per-shape]
        [--drop FEATURE,...] [--seeds N]

The wgmma rounds of bench/collect_chooser_data.py (`--set wgmma`, `wgmma-small-m`, `wgmma-aligned`, `wgmma-aligned-2`, `wgmma-misranked`:
every candidate as the chooser builds it) are cut into folds by shape. For each fold a model is trained on every other
row (the earlier rounds' CSVs and the shipped simulation tables too, unless --without-old) and asked to
rank the fold's candidates; a shape scores the best candidate's time over its pick's time (1.0: the
model picked the fastest). Prints the geomean and the worst shapes per dtype, and the same score of the
shipped model (data/chooser_model.json.gz), for which every shape of the round is new.
"""
from __future__ import annotations

import argparse
import collections
import math
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
NEW = (ROOT / "bench/results/2026-11-26-h100-chooser-rows-wgmma.csv.gz",  # the wgmma rounds
       ROOT / "bench/results/2026-11-26-h100-chooser-rows-wgmma-aligned.csv.gz",
       ROOT / "bench/results/2026-11-26-h100-chooser-rows-wgmma-aligned-2.csv.gz",
       ROOT / "bench/results/2026-11-26-h100-chooser-rows-wgmma-misranked.csv.gz")
OLD = sorted((ROOT / "bench/results").glob("2026-11-23-h100-chooser-rows*.csv.gz"))


def shape_scores(groups: dict, pick) -> dict:
    """dtype -> [(best time / picked time, spec)] over the (family, spec) -> {config: time} groups."""
    out = collections.defaultdict(list)
    for (family, spec), times in groups.items():
        chosen = pick(family, spec, list(times))
        out[spec.dtype].append((min(times.values()) / times[chosen], spec))
    return out


def report(name: str, scores: dict) -> None:
    for dtype, rows in sorted(scores.items()):
        q = [s for s, _ in rows]
        worst = sorted(rows, key=lambda r: r[0])[:3]
        print(f"{name:24s} {dtype:5s} shapes {len(q):3d}  geomean {math.exp(np.mean(np.log(q))):.3f}  "
              f"< 0.9: {sum(s < 0.9 for s in q):2d}  worst " + ", ".join(f"{spec.short().split()[0]} {s:.2f}"
                                                                   for s, spec in worst))


def fit(rows, args):
    """train_family's model, or one with other tree parameters or the per-shape target."""
    from dataclasses import replace

    from gemmtune.chooser import model as chooser_model
    from gemmtune.chooser.features import roofline_s

    params = chooser_model.PARAMS
    params = replace(params, trees=args.trees or params.trees, depth=args.depth or params.depth)
    if not args.per_shape and not args.drop:
        return chooser_model.train_family("wgmma", rows, params=params, seeds=args.seeds)
    x, names = chooser_model.feature_matrix([(r.spec, r.config, r.sm_count) for r in rows])
    keep = [i for i, name in enumerate(names) if name not in args.drop.split(",")]
    x, names = x[:, keep], tuple(names[i] for i in keep)
    y = np.array([math.log(r.median_s / roofline_s(r.spec)) for r in rows])
    if args.per_shape:
        mean = collections.defaultdict(list)
        for r, v in zip(rows, y):
            mean[r.spec].append(v)
        y = y - np.array([np.mean(mean[r.spec]) for r in rows])
    return chooser_model.fit_family("wgmma", names, x, y, rows, params=params, seeds=args.seeds)

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folds", type=int, default=6)
    parser.add_argument("--without-old", action="store_true", help="train wgmma on this round's rows only")
    parser.add_argument("--shipped", action="store_true", help="score the shipped model too")
    parser.add_argument("--trees", type=int, default=None, help="boosted trees (default: the model's PARAMS)")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=1, help="average this many boosted models (subsampling seeds 0, 1, ...)")
    parser.add_argument("--drop", default="", help="features left out of the fit, comma-separated")
    parser.add_argument("--per-shape", action="store_true",
                        help="fit log time less the shape's mean log time (ranking only) instead of log(time / roofline)")
    args = parser.parse_args()

    import gemmtune.chooser as chooser
    from gemmtune.chooser.model import feature_matrix
    from gemmtune.chooser.training import rows_from_csv, rows_from_tables

    new = [r for p in NEW for r in rows_from_csv(p) if r.family == "wgmma"]
    old = [] if args.without_old else [r for p in OLD for r in rows_from_csv(p) if r.family == "wgmma"]
    old += [] if args.without_old else [r for r in rows_from_tables() if r.family == "wgmma"]
    groups: dict = collections.defaultdict(dict)
    for r in new:
        groups[(r.family, r.spec)][r.config] = r.median_s
    sm = new[0].sm_count

    if args.shipped:
        def shipped(family, spec, configs):
            return chooser.rank_configs(spec, family, configs, sm)[0].config
        report("shipped model", shape_scores(groups, shipped))

    specs = sorted({spec for _, spec in groups}, key=lambda s: (s.dtype, s.m, s.n, s.k))
    fold_of = {spec: i % args.folds for i, spec in enumerate(specs)}
    scores: dict = collections.defaultdict(list)
    for fold in range(args.folds):
        train_rows = old + [r for r in new if fold_of[r.spec] != fold]
        model = fit(train_rows, args)

        def pick(family, spec, configs, model=model):
            x, _ = feature_matrix([(spec, c, sm) for c in configs], model.feature_names)
            return configs[int(np.argmin(model.predict_log_ratio(x)))]

        held = {key: v for key, v in groups.items() if fold_of[key[1]] == fold}
        for dtype, rows in shape_scores(held, pick).items():
            scores[dtype] += rows
    report(f"{args.folds}-fold retrained", scores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
