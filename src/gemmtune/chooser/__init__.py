"""The config chooser: a fast pick for a shape nobody tuned, and the reason for it.

    picks = rank(spec, "sm_90", sm_count=132)     # every candidate of the family, best first
    picks[0].config, picks[0].predicted_s, picks[0].why()

The family's candidates (``candidates``) are scored by the shipped model (``model``: boosted trees
over ``features``: wave quantization, tile waste, occupancy, bytes per FLOP...) or, for a family the
model has not seen, by a roofline estimate that charges for empty wave slots and padded tiles.
Deterministic: the same spec, arch and model give the same ranking.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import family_for
from ..spec import GemmSpec
from .candidates import candidates
from .features import HBM_BYTES_PER_S, PEAK_FLOPS, features, roofline_s
from .model import ChooserModel, FamilyModel, feature_matrix, load

# Features shown by --explain, in this order.
EXPLAINED = ("waves", "last_wave_full", "tile_waste", "blocks_per_sm", "warps_per_sm", "bytes_per_flop", "splits")


@dataclass(frozen=True)
class Pick:
    family: str
    config: Any
    predicted_s: float
    scored_by: str  # "model (N rows, S shapes)" or "roofline estimate"
    features: tuple[tuple[str, float], ...]

    def feature(self, name: str) -> float:
        return dict(self.features)[name]

    def why(self) -> str:
        f = dict(self.features)
        return (f"predicted {self.predicted_s * 1e6:.1f} µs by the {self.scored_by}: {f['waves']:.2f} waves "
                f"(last wave {100 * f['last_wave_full']:.0f}% full), {100 * f['tile_waste']:.1f}% of the tiles "
                f"outside D, {f['blocks_per_sm']:.0f} block(s)/SM, {f['bytes_per_flop']:.3f} B/FLOP"
                + (f", split-K {f['splits']:.0f}" if f["splits"] > 1 else ""))


_MODEL_CACHE: dict[str, ChooserModel | None] = {}


def shipped_model() -> ChooserModel | None:
    if "shipped" not in _MODEL_CACHE:
        _MODEL_CACHE["shipped"] = load()
    return _MODEL_CACHE["shipped"]


def estimate_s(spec: GemmSpec, f: dict[str, float]) -> float:
    """Roofline with penalties, for families without a trained model: compute time stretched by empty
    wave slots and padded tiles, or the tiling's traffic at HBM speed, whichever is slower."""
    busy = max(f["last_wave_full"] * f["sm_fill"], 1e-3)  # share of the SM slots doing work
    compute = spec.flops / PEAK_FLOPS[spec.dtype] / busy / max(1 - f["tile_waste"], 1e-3)
    memory = f["bytes_per_flop"] * spec.flops / HBM_BYTES_PER_S
    return max(compute, memory, roofline_s(spec))


def _scores(spec: GemmSpec, configs: list[Any], sm_count: int, model: FamilyModel | None
            ) -> tuple[np.ndarray, str]:
    if model is None:
        return np.array([estimate_s(spec, features(spec, c, sm_count)) for c in configs]), "roofline estimate"
    x, _ = feature_matrix([(spec, c, sm_count) for c in configs], model.feature_names)
    scored = f"model ({model.rows} measured rows, {model.shapes} shapes)"
    return np.exp(model.predict_log_ratio(x)) * roofline_s(spec), scored


def rank(spec: GemmSpec, arch: str, sm_count: int = 132, family: str | None = None,
         model: ChooserModel | None = None) -> list[Pick]:
    """Every candidate of the family chosen for the spec (or `family`), best predicted first."""
    chosen = family_for(spec, arch, family)
    configs = candidates(chosen.name, spec, arch, sm_count)
    model = model if model is not None else shipped_model()
    scores, scored_by = _scores(spec, configs, sm_count, model.for_family(chosen.name) if model else None)
    order = sorted(range(len(configs)), key=lambda i: (scores[i], i))  # ties: the candidate list's order
    return [Pick(chosen.name, configs[i], float(scores[i]), scored_by,
                 tuple(features(spec, configs[i], sm_count).items())) for i in order]


def choose(spec: GemmSpec, arch: str, sm_count: int = 132, family: str | None = None,
           model: ChooserModel | None = None) -> Pick:
    return rank(spec, arch, sm_count, family, model)[0]


def explain(picks: list[Pick], top: int = 5) -> str:
    """A few lines: the pick and why, then the runners-up with their predictions."""
    lines = [f"chooser: {picks[0].family} {picks[0].config.describe()}", f"  why: {picks[0].why()}",
             f"  {len(picks)} candidates ranked; the best {min(top, len(picks))}:",
             "  " + " | ".join(["rank", "predicted µs", *EXPLAINED, "config"])]
    for i, p in enumerate(picks[:top], start=1):
        f = dict(p.features)
        cells = [f"{f[n]:.3f}" if isinstance(f[n], float) and not math.isclose(f[n], round(f[n])) else f"{f[n]:.0f}"
                 for n in EXPLAINED]
        lines.append("  " + " | ".join([str(i), f"{p.predicted_s * 1e6:.1f}", *cells, p.config.describe()]))
    return "\n".join(lines)
