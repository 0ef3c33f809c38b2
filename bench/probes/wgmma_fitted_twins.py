"""Probe: the chooser's fitted twins against the configs they replace, on shapes outside the eval set
and the chooser's training (tile widths fitted to N: chooser.candidates.fitted_twin).

    PYTHONPATH=src:bench python bench/probes/wgmma_fitted_twins.py [--out rows.json]

For each shape: `parent`, the model's first pick among the measured widths (the chooser before twins),
and `twin`, its fitted twin (what the chooser hands out now), where the saving passes the threshold;
`twin (forced)` where only the larger threshold for parents storing through TMA keeps it out (both
thresholds set to 0 for that build). Timed by ab_timing.time_alternately (bench_untuned's protocol,
every kernel verified against a float64 reference with a poisoned D).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_timing import variants_main  # noqa: E402

SHAPES = ((4096, 700, 4096, "nt", "bf16"), (2048, 900, 2048, "nt", "fp16"), (16384, 200, 1024, "nt", "fp16"),
          (2000, 350, 4000, "nt", "tf32"), (4096, 168, 8192, "nt", "bf16"), (3000, 300, 3000, "tt", "tf32"),
          (6000, 232, 2048, "tt", "bf16"))


def cases():
    import importlib

    from gemmtune.chooser import rank_configs
    from gemmtune.spec import GemmSpec

    candidates = importlib.import_module("gemmtune.chooser.candidates")  # the package re-exports a function of that name
    out = []
    for m, n, k, layout, dtype in SHAPES:
        spec = GemmSpec(m, n, k, layout, dtype)
        parent = rank_configs(spec, "wgmma", candidates.candidates("wgmma", spec, "sm_90a", 132), 132)[0].config
        out.append((spec, "parent", parent))
        twin = candidates.fitted_twin(spec, parent)
        if twin is not None:
            out.append((spec, "twin", twin))
            continue
        saved = candidates.FIT_MIN_SAVING, candidates.FIT_MIN_SAVING_TMA_STORE
        candidates.FIT_MIN_SAVING = candidates.FIT_MIN_SAVING_TMA_STORE = 0.0
        try:
            forced = candidates.fitted_twin(spec, parent)
        finally:
            candidates.FIT_MIN_SAVING, candidates.FIT_MIN_SAVING_TMA_STORE = saved
        if forced is not None:
            out.append((spec, "twin (forced)", forced))
    return out


if __name__ == "__main__":
    raise SystemExit(variants_main(__doc__.splitlines()[0], cases))
