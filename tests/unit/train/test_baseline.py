"""Naive baselines: majority class, last observed value, training mean; the loser warning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engage.data import PreparedData
from engage.data.windowing import Normalization, Split
from engage.spec.models import GateSpec
from engage.train.baseline import baseline_warning, naive_baseline


def _split(x: np.ndarray, y: np.ndarray) -> Split:
    return Split(x=x.astype(np.float32), y=y, times=np.zeros(len(y), dtype="datetime64[ns]"))


def _data(train: Split, val: Split, test: Split, **kw: object) -> PreparedData:
    base = {
        "features": ("a",),
        "target": "y",
        "task": "regression",
        "classes": None,
        "normalization": None,
        "frame": None,
        "fingerprint": None,
    }
    return PreparedData(train=train, val=val, test=test, **{**base, **kw})


def test_classification_baseline_is_the_training_majority_class() -> None:
    x = np.zeros((4, 2, 1))
    train = _split(x, np.array([0, 0, 0, 1]))
    val = _split(x, np.array([0, 1, 1, 0]))
    test = _split(x[:3], np.array([1, 1, 0]))
    data = _data(train, val, test, task="classification", classes=("away", "home"))

    baseline = naive_baseline(data)

    assert set(baseline.metrics) == {
        "baseline_val_accuracy",
        "baseline_val_f1",
        "baseline_test_accuracy",
        "baseline_test_f1",
    }
    assert baseline.metrics["baseline_val_accuracy"] == pytest.approx(0.5)
    assert baseline.metrics["baseline_test_accuracy"] == pytest.approx(1 / 3)
    # val, always "away": away (tp 2, fp 2, fn 0) F1 2/3; home (0, 0, 2) F1 0.
    assert baseline.metrics["baseline_val_f1"] == pytest.approx(1 / 3)
    assert "'away'" in baseline.name


def test_regression_baseline_repeats_the_last_observed_target_in_target_units() -> None:
    norm = Normalization(mean=np.array([400.0], np.float32), std=np.array([5.0], np.float32))
    raw_last = np.array([401.0, 399.0, 405.0, 398.0])
    x = np.zeros((4, 3, 1))
    x[:, -1, 0] = (raw_last - 400.0) / 5.0  # the windows hold standardised features
    y = np.array([402.0, 399.0, 404.0, 396.0], dtype=np.float32)
    split = _split(x, y)
    data = _data(split, split, split, features=("y",), normalization=norm)

    baseline = naive_baseline(data)

    err = raw_last - y  # -1, 0, 1, 2
    assert baseline.metrics["baseline_test_mae"] == pytest.approx(np.abs(err).mean(), rel=1e-5)
    assert baseline.metrics["baseline_val_rmse"] == pytest.approx(
        math.sqrt((err**2).mean()), rel=1e-5
    )
    ss_tot = ((y - y.mean()) ** 2).sum()
    assert baseline.metrics["baseline_test_r2"] == pytest.approx(
        1 - (err**2).sum() / ss_tot, rel=1e-4
    )
    assert "baseline_val_r2" not in baseline.metrics  # the model logs no val R² either
    assert not any(k.endswith("_loss") for k in baseline.metrics)
    assert "last observed value" in baseline.name


def test_regression_baseline_without_the_target_among_features_is_the_training_mean() -> None:
    x = np.zeros((3, 2, 1))
    train = _split(x, np.array([10.0, 20.0, 30.0], dtype=np.float32))
    test = _split(x, np.array([20.0, 20.0, 26.0], dtype=np.float32))
    data = _data(train, test, test)

    baseline = naive_baseline(data)

    assert baseline.metrics["baseline_test_mae"] == pytest.approx(2.0)
    assert baseline.metrics["baseline_test_r2"] == pytest.approx(1 - 36 / 24)
    assert "mean" in baseline.name


def _gate(**kw: object) -> GateSpec:
    return GateSpec(**{"metric": "test_r2", "direction": "maximize", "threshold": -1.0, **kw})


def test_a_model_worse_than_its_baseline_on_the_gate_metric_is_warned_about() -> None:
    metrics = {"test_r2": -3.0, "baseline_test_r2": 0.9}

    warning = baseline_warning(metrics, _gate(), "regression")

    assert warning is not None
    assert "test_r2" in warning
    assert "-3" in warning
    assert "0.9" in warning
    assert "min_over_baseline" in warning


def test_without_a_gate_the_primary_metric_is_compared() -> None:
    worse = {"val_mae": 300.0, "baseline_val_mae": 0.5}
    better = {"val_mae": 0.4, "baseline_val_mae": 0.5}

    assert "val_mae" in (baseline_warning(worse, None, "regression") or "")
    assert baseline_warning(better, None, "regression") is None
    assert baseline_warning({"val_accuracy": 0.5}, None, "classification") is None


def test_a_gate_metric_without_a_baseline_falls_back_to_the_primary_metric() -> None:
    metrics = {"val_loss": 0.1, "val_accuracy": 0.4, "baseline_val_accuracy": 0.7}
    gate = GateSpec(metric="val_loss", threshold=0.5, direction="minimize")

    assert "val_accuracy" in (baseline_warning(metrics, gate, "classification") or "")


def test_a_relative_gate_needs_no_warning() -> None:
    metrics = {"test_r2": -3.0, "baseline_test_r2": 0.9}

    assert baseline_warning(metrics, _gate(min_over_baseline=0.0), "regression") is None
