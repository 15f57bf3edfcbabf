"""The adaptive sampler's parts: samplers, acquisition scores, the pick, and simulated windows."""

from __future__ import annotations

import numpy as np
import pytest

from engage.errors import DataError
from engage.spec import parse_spec
from engage.train.adaptive.acquisition import disagreement, error, pick
from engage.train.adaptive.samplers import SAMPLERS, latin_hypercube, uniform
from engage.train.adaptive.world import encode, merge, simulate_windows
from tests.unit.train._adaptive_spec import DATA_AND_MODEL


def test_a_latin_hypercube_has_one_point_in_every_slice_of_every_axis() -> None:
    points = latin_hypercube(np.random.default_rng(0), 10, 18)

    assert points.shape == (10, 18)
    assert ((points >= 0) & (points < 1)).all()
    for axis in points.T:
        assert sorted((axis * 10).astype(int)) == list(range(10))


def test_uniform_points_fill_the_cube_and_the_samplers_are_named() -> None:
    points = uniform(np.random.default_rng(1), 500, 3)

    assert points.shape == (500, 3)
    assert 0.4 < points.mean() < 0.6
    assert set(SAMPLERS) == {"uniform", "lhs"}


def test_disagreement_is_the_members_variance_averaged_per_candidate() -> None:
    agree = np.tile([[0.9, 0.1]], (3, 2, 1))  # 3 members, 2 windows of candidate 0
    split = np.array([[[0.9, 0.1]], [[0.1, 0.9]], [[0.5, 0.5]]])  # 1 window of candidate 1
    predictions = np.concatenate([agree, split], axis=1)

    scores = disagreement(predictions, np.array([0, 0, 1]), 3)

    assert scores[0] == pytest.approx(0.0)
    assert scores[1] > 0.2
    assert scores[2] == 0.0  # no windows


def test_error_is_the_ensemble_means_loss_per_candidate() -> None:
    predictions = np.array([[[0.9, 0.1], [0.9, 0.1]], [[0.7, 0.3], [0.7, 0.3]]])
    y = np.array([0, 1])

    scores = error(predictions, y, np.array([0, 1]), 2, "classification")
    mae = error(np.array([[[1.0], [3.0]]]), np.array([1.5, 3.0]), np.array([0, 0]), 1, "regression")

    assert scores[0] == pytest.approx(-np.log(0.8))
    assert scores[1] == pytest.approx(-np.log(0.2))
    assert mae[0] == pytest.approx(0.25)


def test_pick_keeps_the_best_far_enough_apart_and_fills_up_when_it_must() -> None:
    points = np.array([[0.0, 0.0], [0.01, 0.0], [1.0, 1.0], [0.5, 0.5]])
    scores = np.array([0.9, 0.8, 0.5, 0.1])

    assert pick(scores, points, 2, 0.5).tolist() == [0, 2]
    assert pick(scores, points, 4, 0.5).tolist() == [0, 2, 3, 1]


SPEC = DATA_AND_MODEL


def test_simulated_windows_are_cut_per_scenario_with_gaps_filled() -> None:
    data = parse_spec(SPEC).spec.data
    points = np.array([[0.5] * 18, [1.0] * 18])  # the second: every sensor fault and dropout on

    windows = simulate_windows(
        points, data, households=1, days=1, seeds=np.array([1, 2]), classes=(0, 1)
    )

    assert windows.x.shape[1:] == (20, 3)
    assert set(np.unique(windows.groups)) == {0, 1}
    assert np.isfinite(windows.x).all()
    assert set(np.unique(windows.y)) <= {0, 1}
    assert windows.rows == 2 * 1440
    both = merge([windows, windows])
    assert len(both) == 2 * len(windows)
    assert set(np.unique(both.groups)) == {0, 1, 2, 3}


def test_a_label_outside_the_known_classes_is_a_data_error() -> None:
    assert encode(np.array([True, False]), (False, True)).tolist() == [1, 0]
    with pytest.raises(DataError, match="not in"):
        encode(np.array([0, 2]), (0, 1))
