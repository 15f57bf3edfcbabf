"""Batch performance decay: served predictions joined to delayed labels, vs the baseline.

The predictions come from the serving app's sample store
(``<home>/serve/<app>/samples.sqlite``, written by :mod:`engage.serve.sampling`) or from a
table the user passes (``request_id``, ``prediction`` and optionally ``outputs``, the
model's output row). Labels are a table of ``request_id`` and ``label``. They are joined
with :class:`LabelJoin` in prediction-time order; :func:`rolling_metric` compares the newest
``window`` pairs with the training baseline minus a tolerance, and
:func:`prediction_shift` gives the label-free proxy against the reference's outputs.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engage.data.sources import read_table
from engage.drift.base import DriftResult
from engage.drift.performance import LabelJoin, Metric, prediction_shift, rolling_metric
from engage.errors import DataError, TrackingError

# Run metrics tried in order for the baseline: held-out test first, then validation.
BASELINE_KEYS: dict[str, tuple[str, ...]] = {
    "accuracy": ("test_accuracy", "val_accuracy"),
    "mae": ("test_mae", "val_mae"),
}


@dataclass(frozen=True)
class Predictions:
    """Served predictions, oldest first: what each request id got, and the output rows."""

    request_ids: list[str]
    predicted: list[Any]  # the class or value the caller got
    outputs: np.ndarray | None  # (n, k) output rows for the label-free proxy, if known
    source: str
    other_versions: int = 0  # samples of the same app answered by another version


@dataclass(frozen=True)
class DecayReport:
    """The rolling metric vs baseline, the join's counts and the label-free proxy."""

    metric: Metric
    baseline: float
    baseline_key: str
    tolerance: float
    result: DriftResult
    joined: int
    unmatched_labels: int
    unlabelled: int
    proxy: DriftResult | None
    proxy_note: str | None = None

    @property
    def decayed(self) -> bool:
        """True when the performance check found decay (a failed check is not decay)."""
        return self.result.error is None and self.result.is_drift


def samples_path(home: Path, model: str, app: str | None = None) -> Path:
    """Where the serving app of ``model`` keeps its samples (app name as deploy makes it)."""
    name = app or "".join(c if c.isalnum() or c in "-_" else "-" for c in model)
    return home / "serve" / name / "samples.sqlite"


def read_served(path: Path, model: str, version: str) -> Predictions:
    """The samples of ``model`` ``version`` in a serve sample store, oldest first."""
    if not path.exists():
        raise DataError(
            f"{path}: no served samples here",
            hint="deploy the model with sampling on, or pass --predictions FILE.parquet",
        )
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10) as db:
            rows = db.execute(
                "SELECT request_id, version, prediction, label FROM samples"
                " WHERE model = ? ORDER BY ts",
                (model,),
            ).fetchall()
    except sqlite3.Error as exc:
        raise DataError(f"{path}: cannot read served samples: {exc}") from None
    mine = [r for r in rows if str(r[1]) == str(version)]
    outputs = [json.loads(r[2]) for r in mine]
    predicted = [
        r[3] if r[3] is not None else (o[0] if len(o) == 1 else None)
        for r, o in zip(mine, outputs, strict=True)
    ]
    return Predictions(
        [r[0] for r in mine],
        predicted,
        _matrix(outputs),
        str(path),
        other_versions=len(rows) - len(mine),
    )


def read_predictions(path: Path) -> Predictions:
    """A predictions table: ``request_id``, ``prediction``, optional ``outputs`` and ``ts``."""
    frame = read_table(path, ("request_id", "prediction"))
    if "ts" in frame.columns:
        frame = frame.sort_values("ts", kind="stable")
    outputs = _matrix(list(frame["outputs"])) if "outputs" in frame.columns else None
    return Predictions(
        [str(r) for r in frame["request_id"]], list(frame["prediction"]), outputs, str(path)
    )


def read_labels(path: Path) -> list[tuple[str, Any]]:
    """A labels table: ``request_id`` and ``label``, one row per labelled request."""
    frame = read_table(path, ("request_id", "label"))
    if frame["label"].isna().any():
        row = int(np.flatnonzero(frame["label"].isna().to_numpy())[0])
        raise DataError(
            f"{path}: column 'label' is empty in row {row}", hint="drop unlabelled rows"
        )
    return list(zip((str(r) for r in frame["request_id"]), frame["label"], strict=True))


def baseline_of(
    metrics: dict[str, float], metric: Metric, key: str | None = None
) -> tuple[str, float]:
    """The training run's baseline: ``key``, else the first of :data:`BASELINE_KEYS` logged."""
    keys = (key,) if key else BASELINE_KEYS[metric]
    for k in keys:
        if k in metrics:
            return k, float(metrics[k])
    logged = ", ".join(sorted(metrics)) or "none"
    raise TrackingError(
        f"the model's training run logged no {' or '.join(keys)} (its metrics: {logged})",
        hint="pass --baseline-metric KEY or --baseline VALUE",
    )


def assess(
    predictions: Predictions,
    labels: list[tuple[str, Any]],
    baseline: tuple[str, float],
    *,
    metric: Metric = "accuracy",
    tolerance: float = 0.02,
    window: int = 500,
    reference_outputs: np.ndarray | None = None,
) -> DecayReport:
    """Join, compare the newest ``window`` pairs with ``baseline`` -/+ ``tolerance``, proxy."""
    join = LabelJoin(max_pending=max(len(predictions.request_ids), 1))
    encode = _encoder(metric)
    join.add_predictions(
        zip(predictions.request_ids, map(encode, predictions.predicted), strict=True)
    )
    join.add_labels((rid, encode(label)) for rid, label in labels)
    key, value = baseline
    bar = value - tolerance if metric == "accuracy" else value + tolerance
    result = rolling_metric(join.pairs, bar, metric, window)
    proxy, note = _proxy(reference_outputs, predictions.outputs, metric)
    return DecayReport(
        metric, value, key, tolerance, result, len(join.pairs), join.unmatched_labels,
        len(join.pending), proxy, note,
    )  # fmt: skip


def _proxy(reference: np.ndarray | None, outputs: np.ndarray | None, metric: Metric):
    if reference is None:
        return None, "the model version has no reference outputs"
    if outputs is None or len(outputs) < 2:
        return None, "the predictions carry no output rows"
    task = "classification" if metric == "accuracy" else "regression"
    if task == "classification" and (reference.ndim != 2 or reference.shape[1] != outputs.shape[1]):
        return (
            None,
            f"output rows of width {outputs.shape[1]} vs the reference's {reference.shape[-1]}",
        )
    return prediction_shift(reference, outputs, task), None


def _encoder(metric: Metric):
    """Accuracy compares classes (1, 1.0 and "1" alike; names as names); MAE needs numbers."""
    if metric == "mae":
        return float
    codes: dict[str, int] = {}

    def code(value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if number is not None and number.is_integer():
            value = int(number)
        return float(codes.setdefault(str(value), len(codes)))

    return code


def _matrix(rows: list[Any]) -> np.ndarray | None:
    try:
        out = np.asarray([np.asarray(r, dtype=np.float64).ravel() for r in rows])
    except (TypeError, ValueError):
        return None
    return out if out.ndim == 2 and len(out) else None
