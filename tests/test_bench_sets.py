"""The untuned evaluation set (bench/bench_untuned.py, issue 34) is kept apart from the shapes the
chooser is trained on (bench/collect_chooser_data.py draws those, seeded, and skips every shape of
the evaluation set)."""
from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _bench_modules():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_untuned
        import collect_chooser_data
    finally:
        sys.path.remove(str(BENCH))
    return bench_untuned, collect_chooser_data


def test_the_evaluation_set_has_forty_shapes_and_no_training_shape():
    untuned, collect = _bench_modules()
    shapes = untuned.EVAL_SHAPES
    assert len(set(shapes)) == len(shapes) >= 40
    training = set(collect.training_shapes()) | set(collect.extra_shapes())
    assert training and not training & set(shapes)
    assert all(spec.m * spec.n * spec.k and (spec.m, spec.n, spec.k) not in set(shapes)
               for which in ("first", "extra", "small", "wgmma", "wgmma-small-m") for spec in collect.specs(which))
