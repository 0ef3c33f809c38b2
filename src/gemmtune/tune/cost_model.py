"""A learned cost model: gradient-boosted regression trees in numpy predicting log run time.

No xgboost: it is not installed on the GPU machine, and a few hundred rows of ~20 low-cardinality
features need nothing more than histogram splits. Features come from the config and the spec
(tile shapes, threads, accumulators, shared memory, an occupancy and wave estimate).

Resource reports (ptxas registers, spills) are not features: strategies score configs before they
are compiled, and registers here follow the accumulator count, which is a feature.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..arch import geometry
from ..spec import GemmSpec
from .space import CandidateSet


@dataclass(frozen=True)
class BoostingParams:
    trees: int = 40
    depth: int = 4
    learning_rate: float = 0.2
    min_leaf: int = 2
    subsample: float = 0.8  # rows per tree; the randomness keeps trees from copying each other
    max_bins: int = 32


@dataclass(frozen=True, eq=False)
class Tree:
    """Flat arrays; a node with feature -1 is a leaf holding `value`."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        node = np.zeros(len(x), dtype=np.int64)
        rows = np.arange(len(x))
        for _ in range(len(self.feature)):
            feature = self.feature[node]
            inner = feature >= 0
            if not inner.any():
                break
            go_left = x[rows, np.maximum(feature, 0)] <= self.threshold[node]
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return self.value[node]


def bin_features(x: np.ndarray, max_bins: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each column to small integers; thresholds[j][b] separates bin b from bin b+1 of column j."""
    binned = np.empty(x.shape, dtype=np.int64)
    thresholds = []
    for j in range(x.shape[1]):
        edges = np.unique(x[:, j])
        if edges.size > max_bins:
            edges = np.unique(np.quantile(x[:, j], np.linspace(0, 1, max_bins)))
        cuts = (edges[:-1] + edges[1:]) / 2
        binned[:, j] = np.searchsorted(cuts, x[:, j], side="left")
        thresholds.append(cuts)
    return binned, thresholds


def best_split(binned: np.ndarray, target: np.ndarray, n_bins: int, min_leaf: int) -> tuple[float, int, int]:
    """(gain, feature, bin) of the split that most reduces squared error; gain 0 when none helps."""
    rows, features = binned.shape
    flat = (binned + np.arange(features) * n_bins).ravel()
    count = np.bincount(flat, minlength=features * n_bins).reshape(features, n_bins)
    total = np.bincount(flat, weights=np.repeat(target, features), minlength=features * n_bins)
    left_n, left_sum = np.cumsum(count, axis=1)[:, :-1], np.cumsum(total.reshape(features, n_bins), axis=1)[:, :-1]
    right_n, right_sum = rows - left_n, target.sum() - left_sum
    ok = (left_n >= min_leaf) & (right_n >= min_leaf)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(ok, left_sum**2 / left_n + right_sum**2 / right_n - target.sum() ** 2 / rows, 0.0)
    if gain.size == 0 or gain.max() <= 1e-12:
        return 0.0, -1, -1
    feature, cut = np.unravel_index(int(np.argmax(gain)), gain.shape)
    return float(gain.max()), int(feature), int(cut)


def grow_tree(binned: np.ndarray, thresholds: list[np.ndarray], target: np.ndarray, params: BoostingParams) -> Tree:
    n_bins = max((t.size + 1 for t in thresholds), default=1)
    nodes: list[list] = []  # [feature, threshold, left, right, value]
    stack = [(np.arange(len(target)), 0, -1, False)]
    while stack:
        rows, depth, parent, is_right = stack.pop()
        index = len(nodes)
        nodes.append([-1, 0.0, -1, -1, float(target[rows].mean())])
        if parent >= 0:
            nodes[parent][3 if is_right else 2] = index
        if depth >= params.depth or rows.size < 2 * params.min_leaf:
            continue
        gain, feature, cut = best_split(binned[rows], target[rows], n_bins, params.min_leaf)
        if feature < 0:
            continue
        nodes[index][0], nodes[index][1] = feature, float(thresholds[feature][cut])
        left = binned[rows, feature] <= cut
        stack.append((rows[~left], depth + 1, index, True))
        stack.append((rows[left], depth + 1, index, False))
    columns = list(zip(*nodes))
    return Tree(np.asarray(columns[0], np.int64), np.asarray(columns[1]), np.asarray(columns[2], np.int64),
                np.asarray(columns[3], np.int64), np.asarray(columns[4]))


class GradientBoostedTrees:
    """Least-squares boosting: each tree fits the residual of the ensemble so far."""

    def __init__(self, params: BoostingParams = BoostingParams(), seed: int = 0):
        self.params = params
        self.rng = np.random.default_rng(seed)
        self.base = 0.0
        self.trees: list[Tree] = []

    def fit(self, x: np.ndarray, y: np.ndarray) -> "GradientBoostedTrees":
        binned, thresholds = bin_features(x, self.params.max_bins)
        self.base, self.trees = float(np.mean(y)), []
        prediction = np.full(len(y), self.base)
        take = max(2 * self.params.min_leaf, int(round(self.params.subsample * len(y))))
        for _ in range(self.params.trees):
            rows = self.rng.choice(len(y), size=min(take, len(y)), replace=False)
            tree = grow_tree(binned[rows], thresholds, (y - prediction)[rows], self.params)
            tree = Tree(tree.feature, tree.threshold, tree.left, tree.right, tree.value * self.params.learning_rate)
            self.trees.append(tree)
            prediction += tree.predict(x)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = np.full(len(x), self.base)
        for tree in self.trees:
            out += tree.predict(x)
        return out


# --- features -------------------------------------------------------------------------------------
SM_THREADS, SM_SMEM = 2048, 228 * 1024  # per-SM limits of sm_80/sm_90 class parts, for the estimate


def simt_features(cols: dict[str, np.ndarray], spec: GemmSpec, sm_count: int) -> np.ndarray:
    bm, bn, bk, tm, tn = (cols[k] for k in ("bm", "bn", "bk", "tm", "tn"))
    wm, wn, wniter = cols["wm"], cols["wn"], cols["wniter"]
    warped = wm > 0
    threads = np.where(warped, (bm // np.maximum(wm, 1)) * (bn // np.maximum(wn, 1)) * 32, (bm // tm) * (bn // tn))
    wmiter = np.where(warped, np.maximum(1, (wm * wn) // (32 * tm * tn * wniter)), 1)
    accumulators = tm * tn * wmiter * np.where(warped, wniter, 1)
    smem = 4 * cols["stages"] * bk * (bm + bn + 2 * cols["pad"])
    per_sm = np.maximum(1, np.minimum(SM_THREADS // np.maximum(threads, 1), SM_SMEM // np.maximum(smem, 1)))
    blocks = np.ceil(spec.m / bm) * np.ceil(spec.n / bn)
    slots = per_sm * sm_count
    waves = blocks / (np.ceil(blocks / slots) * slots)  # 1.0 = every wave fills the GPU
    log = np.log2
    return np.stack([
        log(bm), log(bn), log(bk), log(tm), log(tn), log(np.maximum(wm, 1)), log(np.maximum(wn, 1)), log(wniter),
        cols["vec"], cols["stages"], cols["async_copy"], cols["pad"], log(np.maximum(threads, 1)),
        log(accumulators), smem / 1024, bm * bn / (bm + bn), tm * tn / (tm + tn), log(blocks), waves,
        per_sm * threads / SM_THREADS,
    ], axis=1)


def generic_features(cols: dict[str, np.ndarray], spec: GemmSpec, sm_count: int) -> np.ndarray:
    """Features of a family without its own: every parameter column that varies, log2 where all values
    are at least 1 (tile sizes, stage counts), as is elsewhere (flags, positions in a domain)."""
    varying = [c for c in cols.values() if len(c) and np.ptp(c) > 0]
    if not varying:
        return np.zeros((len(next(iter(cols.values()), ())), 1))
    return np.stack([np.log2(c) if np.all(c >= 1) else c for c in varying], axis=1)


# Families with hand-made features; every other family gets generic_features.
FEATURES: dict[str, Callable[[dict[str, np.ndarray], GemmSpec, int], np.ndarray]] = {"simt": simt_features}


class CostModel:
    """Predicts log time for positions of a CandidateSet; features are computed once per set."""

    def __init__(self, candidates: CandidateSet, sm_count: int | None = None,
                 params: BoostingParams = BoostingParams(), seed: int = 0):
        """`sm_count`: the GPU's (None: the arch table's GPU for the candidates' arch, gemmtune.arch)."""
        if sm_count is None:
            sm_count = geometry(None, candidates.arch).sm_count
        featurize = FEATURES.get(candidates.space.family, generic_features)
        self.features = featurize(candidates.columns, candidates.spec, sm_count)
        self.params, self.seed = params, seed
        self.model: GradientBoostedTrees | None = None

    def fit(self, positions: np.ndarray, log_times: np.ndarray) -> None:
        self.model = GradientBoostedTrees(self.params, self.seed).fit(self.features[positions], log_times)
        self.seed += 1  # a fresh row sample next time

    def predict(self, positions: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.zeros(len(positions))
        return self.model.predict(self.features[positions])
