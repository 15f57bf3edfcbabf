"""Task metrics and their directions; the gate's comparison."""

from __future__ import annotations

import math

import pytest

from engage.spec.models import GateSpec
from engage.train.metrics import PRIMARY_VAL_METRIC, task_metrics


def test_classification_metrics_and_directions() -> None:
    metrics = task_metrics("classification")

    assert metrics["val_accuracy"] == metrics["test_f1"] == "maximize"
    assert metrics["train_loss"] == metrics["val_loss"] == metrics["test_loss"] == "minimize"
    assert "val_mae" not in metrics
    assert "test_r2" not in metrics


def test_regression_metrics_and_directions() -> None:
    metrics = task_metrics("regression")

    assert metrics["val_mae"] == metrics["test_rmse"] == metrics["val_loss"] == "minimize"
    assert metrics["test_r2"] == "maximize"
    assert "val_accuracy" not in metrics


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_every_metric_has_a_direction_and_loss_is_minimized(task: str) -> None:
    metrics = task_metrics(task)

    assert set(metrics.values()) <= {"maximize", "minimize"}
    assert all(d == "minimize" for name, d in metrics.items() if name.endswith("_loss"))


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_primary_val_metric_is_a_task_metric(task: str) -> None:
    assert PRIMARY_VAL_METRIC[task] in task_metrics(task)


@pytest.mark.parametrize(
    ("direction", "value", "passes"),
    [
        ("maximize", 0.81, True),
        ("maximize", 0.8, True),
        ("maximize", 0.79, False),
        ("minimize", 0.79, True),
        ("minimize", 0.8, True),
        ("minimize", 0.81, False),
        ("maximize", math.nan, False),
        ("minimize", math.nan, False),
        ("maximize", math.inf, True),
        ("minimize", math.inf, False),
    ],
)
def test_gate_passes(direction: str, value: float, passes: bool) -> None:
    gate = GateSpec(metric="val_accuracy", threshold=0.8, direction=direction)

    assert gate.passes(value) is passes
