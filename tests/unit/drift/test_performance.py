"""Delayed labels joined by request id, rolling metrics with intervals, label-free proxy."""

from __future__ import annotations

import numpy as np

from engage.drift import LabelJoin, prediction_shift, rolling_metric
from engage.drift.performance import wilson


def test_labels_join_predictions_by_request_id_in_any_order() -> None:
    join = LabelJoin()
    join.add_predictions([("r1", 1.0), ("r2", 0.0), ("r3", 1.0)])

    joined = join.add_labels([("r3", 1.0), ("zz", 0.0), ("r1", 0.0)])

    assert joined == 2
    assert join.pairs == [(1.0, 1.0), (1.0, 0.0)]
    assert join.unmatched_labels == 1
    assert list(join.pending) == ["r2"]


def test_pending_predictions_are_bounded() -> None:
    join = LabelJoin(max_pending=2)
    join.add_predictions([("a", 1.0), ("b", 1.0), ("c", 1.0)])

    assert list(join.pending) == ["b", "c"]


def test_wilson_interval_contains_the_proportion() -> None:
    lo, hi = wilson(90, 100)

    assert lo < 0.9 < hi
    assert lo > 0.8
    assert hi < 0.96


def test_accuracy_decay_is_flagged_only_when_the_interval_is_below_baseline() -> None:
    rng = np.random.default_rng(0)
    good = [(1.0, float(rng.random() < 0.9)) for _ in range(500)]
    bad = [(1.0, float(rng.random() < 0.7)) for _ in range(500)]

    assert not rolling_metric(good, baseline=0.9).is_drift
    result = rolling_metric(bad, baseline=0.9)
    assert result.is_drift
    assert result.extra["ci"][1] < 0.9


def test_mae_decay() -> None:
    rng = np.random.default_rng(0)
    pairs = [(float(v), float(v + rng.normal(0, 2))) for v in range(400)]

    assert rolling_metric(pairs, baseline=0.8, metric="mae").is_drift
    assert not rolling_metric(pairs, baseline=2.0, metric="mae").is_drift


def test_too_few_labels_is_an_error_not_no_decay() -> None:
    assert rolling_metric([(1.0, 1.0)] * 5, baseline=0.9).error is not None


def test_label_free_proxy_sees_a_class_shift_and_a_confidence_drop() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, (1000, 2)) + np.array([2.0, 0.0])
    same = rng.normal(0, 1, (300, 2)) + np.array([2.0, 0.0])
    shifted = rng.normal(0, 1, (300, 2)) + np.array([0.0, 0.3])

    assert not prediction_shift(ref, same, "classification").is_drift
    result = prediction_shift(ref, shifted, "classification")
    assert result.is_drift
    assert result.extra["confidence_drop"] > 0.1


def test_regression_proxy() -> None:
    rng = np.random.default_rng(0)

    assert prediction_shift(rng.normal(size=500), rng.normal(1, 1, 300), "regression").is_drift
