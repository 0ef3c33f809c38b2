"""The numpy gradient-boosted trees and the simt features."""
from __future__ import annotations

import numpy as np

from gemmtune.spec import GemmSpec
from gemmtune.tune.cost_model import BoostingParams, CostModel, GradientBoostedTrees, best_split, bin_features
from gemmtune.tune.space import candidate_set, space_for


def test_split_finds_the_step() -> None:
    x = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 6.0], [3.0, 6.0], [4.0, 5.0], [5.0, 6.0]])
    y = np.array([0.0, 0.0, 0.0, 10.0, 10.0, 10.0])
    binned, thresholds = bin_features(x, 32)
    gain, feature, cut = best_split(binned, y, 6, 1)
    assert feature == 0 and thresholds[0][cut] == 2.5 and gain > 0


def test_boosting_learns_a_nonlinear_function() -> None:
    rng = np.random.default_rng(0)

    def truth(x: np.ndarray) -> np.ndarray:
        return np.sin(x[:, 0]) + 0.1 * x[:, 1] * x[:, 2] + (x[:, 3] > 3)

    train = rng.integers(0, 6, size=(400, 12)).astype(float)
    test = rng.integers(0, 6, size=(1000, 12)).astype(float)
    model = GradientBoostedTrees(BoostingParams(), seed=0).fit(train, truth(train) + rng.normal(0, 0.05, 400))
    residual = model.predict(test) - truth(test)
    assert 1 - residual.var() / truth(test).var() > 0.9


def test_boosting_is_deterministic_per_seed_and_handles_tiny_data() -> None:
    x = np.arange(12, dtype=float).reshape(6, 2)
    y = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0])
    one = GradientBoostedTrees(seed=1).fit(x, y).predict(x)
    two = GradientBoostedTrees(seed=1).fit(x, y).predict(x)
    assert np.array_equal(one, two) and np.all(np.isfinite(one))
    constant = GradientBoostedTrees().fit(x, np.ones(6)).predict(x)
    assert np.allclose(constant, 1.0)


def test_features_cover_the_whole_simt_space() -> None:
    candidates = candidate_set(space_for("simt"), GemmSpec(1024, 1024, 1024), "sm_90")
    model = CostModel(candidates, sm_count=132)
    assert model.features.shape[0] == len(candidates)
    assert np.all(np.isfinite(model.features))
    assert np.array_equal(model.predict(np.arange(5)), np.zeros(5))  # untrained: no preference
    positions = np.arange(0, len(candidates), 997)
    model.fit(positions, np.log(1.0 + positions.astype(float)))
    assert model.predict(positions).shape == positions.shape


def test_families_without_features_get_generic_ones() -> None:
    from gemmtune.tune.cost_model import generic_features

    cols = {"bm": np.array([64.0, 128.0, 256.0]), "flag": np.array([0.0, 1.0, 0.0]), "fixed": np.array([3.0] * 3)}
    features = generic_features(cols, GemmSpec(64, 64, 64), 132)
    np.testing.assert_array_equal(features, np.array([[6.0, 0.0], [7.0, 1.0], [8.0, 0.0]]))
    assert generic_features({"fixed": np.array([1.0, 1.0])}, GemmSpec(8, 8, 8), 132).shape == (2, 1)
