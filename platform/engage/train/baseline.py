"""Naive baselines logged beside every model's metrics, and the warning when a model loses.

A number like test R² = 0.4 or accuracy 0.9 means little alone: a forecast that repeats
the last observed value, or a classifier that always answers the commonest class, may do
as well. Every run logs such a baseline's metrics under ``baseline_<metric>`` (for example
``baseline_test_r2``, ``baseline_val_accuracy``), computed by the same sums as the model's
(:mod:`engage.train.evaluate`), so a gate can be relative to it
(``tracking.registration.gate.min_over_baseline``) and a model worse than it is flagged.

- classification: the majority class of the training split;
- regression: the target's last observed value in the window when the target is also a
  feature (a persistence forecast), else the training split's mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from engage.spec.models import GateSpec
from engage.train.evaluate import add_predictions, empty_sums, finalize
from engage.train.metrics import PRIMARY_VAL_METRIC, task_metrics

if TYPE_CHECKING:
    from engage.data import PreparedData

BASELINE_PREFIX = "baseline_"
WARNING_TAG = "engage.warning.baseline"


@dataclass(frozen=True)
class Baseline:
    """A naive predictor's metrics on the val and test splits.

    Attributes
    ----------
    name : str
        What the baseline predicts, in words (for the run's ``engage.baseline`` tag).
    metrics : dict of str to float
        ``baseline_val_*`` and ``baseline_test_*``: the model's metric names with the prefix
        (no loss: a constant or copied prediction has no training objective).
    """

    name: str
    metrics: dict[str, float]


def _last_value_column(data: PreparedData) -> int | None:
    """Index of the target among the features, when the windows hold its past values."""
    return data.features.index(data.target) if data.target in data.features else None


def _majority(data: PreparedData) -> int:
    return int(np.bincount(data.train.y, minlength=data.n_classes or 0).argmax())


def baseline_name(data: PreparedData) -> str:
    """What the naive baseline of ``data`` predicts, in words (the run's ``engage.baseline``)."""
    if data.task == "classification":
        majority = _majority(data)
        label = data.classes[majority] if data.classes else majority
        return f"majority class {label!r} of the training split"
    if _last_value_column(data) is None:
        return "mean target of the training split"
    return f"last observed value of {data.target!r}"


def _predict(data: PreparedData, x: np.ndarray, n: int) -> np.ndarray:
    """The naive outputs for windows ``x``: class scores ``(n, k)`` or values ``(n, 1)``."""
    if data.task == "classification":
        scores = np.zeros((n, data.n_classes or 0), dtype=np.float32)
        scores[:, _majority(data)] = 1.0
        return scores
    col = _last_value_column(data)
    if col is None:
        return np.full((n, 1), np.mean(data.train.y, dtype=np.float64), dtype=np.float32)
    last = x[:, -1, col].astype(np.float64)
    norm = data.normalization
    if norm is not None:  # the windows hold standardised features: back to target units
        last = last * float(norm.std[col]) + float(norm.mean[col])
    return last.reshape(n, 1).astype(np.float32)


def naive_baseline(data: PreparedData) -> Baseline:
    """The naive baseline of ``data``'s task on its val and test splits.

    Parameters
    ----------
    data : PreparedData
        The prepared splits; statistics come from the training split only.

    Returns
    -------
    Baseline
        Its description and its ``baseline_val_*`` / ``baseline_test_*`` metrics.
    """
    k = data.n_classes or 0
    metrics: dict[str, float] = {}
    for prefix, split in (("val", data.val), ("test", data.test)):
        out = _predict(data, split.x, len(split.y))
        sums = empty_sums(data.task, k)
        add_predictions(sums, torch.from_numpy(out), torch.from_numpy(split.y), data.task, k)
        for key, value in finalize(sums, data.task, prefix).items():
            if not key.endswith("_loss"):
                metrics[BASELINE_PREFIX + key] = value
    return Baseline(baseline_name(data), metrics)


def baseline_warning(metrics: dict[str, float], gate: GateSpec | None, task: str) -> str | None:
    """A warning when the model is worse than its naive baseline, or None.

    The metric compared is the gate's (when it has a baseline), else the task's primary
    validation metric. A relative gate (``min_over_baseline``) already keeps such a model
    out of the registry, so it gets no warning; nor does a metric without a baseline value.

    Parameters
    ----------
    metrics : dict of str to float
        The run's final metrics, baseline ones included.
    gate : GateSpec or None
        The spec's registration gate.
    task : str
        ``"classification"`` or ``"regression"``.
    """
    if gate is not None and gate.min_over_baseline is not None:
        return None
    metric, direction = PRIMARY_VAL_METRIC[task], task_metrics(task)[PRIMARY_VAL_METRIC[task]]
    if gate is not None and BASELINE_PREFIX + gate.metric in metrics:
        metric, direction = gate.metric, gate.direction
    value, base = metrics.get(metric), metrics.get(BASELINE_PREFIX + metric)
    if value is None or base is None or value != value or base != base:
        return None
    worse = value < base if direction == "maximize" else value > base
    if not worse:
        return None
    return (
        f"the model is worse than its naive baseline on {metric}: {value:.4g} against "
        f"{base:.4g}; set tracking.registration.gate.min_over_baseline to keep such a model "
        "out of the registry"
    )
