"""Performance decay: delayed labels joined to predictions, and a label-free proxy.

Labels arrive late and keyed by request id; :class:`LabelJoin` pairs them with the
predictions the serve sampler stored. :func:`rolling_metric` compares the newest
``window`` pairs with the training baseline and gives a confidence interval (Wilson for
accuracy, normal approximation for MAE); decay is flagged when the interval lies entirely
on the bad side of the baseline. :func:`prediction_shift` needs no labels: a shift in the
predicted class distribution (chi-square) or value distribution (KS) against the
reference outputs, and the drop in mean confidence (max softmax probability).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal

import numpy as np

from engage.drift.base import DriftResult, FeatureDrift

Metric = Literal["accuracy", "mae"]


class LabelJoin:
    """Predictions waiting for their labels, keyed by request id (bounded, oldest dropped)."""

    def __init__(self, max_pending: int = 100_000) -> None:
        self.pending: OrderedDict[str, float] = OrderedDict()
        self.max_pending = max_pending
        self.pairs: list[tuple[float, float]] = []  # (prediction, label) in label order
        self.unmatched_labels = 0

    def add_predictions(self, items: Iterable[tuple[str, float]]) -> None:
        """Remember ``(request_id, prediction)`` pairs until their labels arrive (the oldest
        are dropped past ``max_pending``)."""
        for request_id, prediction in items:
            self.pending[request_id] = prediction
            if len(self.pending) > self.max_pending:
                self.pending.popitem(last=False)

    def add_labels(self, items: Iterable[tuple[str, float]]) -> int:
        """Join labels to waiting predictions; returns how many joined."""
        joined = 0
        for request_id, label in items:
            prediction = self.pending.pop(request_id, None)
            if prediction is None:
                self.unmatched_labels += 1
                continue
            self.pairs.append((prediction, label))
            joined += 1
        return joined


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (mid - half, mid + half)


def rolling_metric(
    pairs: list[tuple[float, float]],
    baseline: float,
    metric: Metric = "accuracy",
    window: int = 500,
    confidence: float = 0.95,
) -> DriftResult:
    """The metric over the newest ``window`` pairs vs ``baseline``, with a CI.

    ``is_drift`` when the whole interval is worse than the baseline (below it for
    accuracy, above it for MAE). Too few pairs (< 30) is an error, not "no decay".
    """
    name = f"performance_{metric}"
    recent = np.asarray(pairs[-window:], dtype=np.float64).reshape(-1, 2)
    if len(recent) < 30:
        return DriftResult.failed(name, f"only {len(recent)} labelled predictions (need 30)")
    from scipy.special import ndtri

    z = float(ndtri(0.5 + confidence / 2))
    pred, label = recent[:, 0], recent[:, 1]
    if metric == "accuracy":
        hits = int((pred == label).sum())
        value, (lo, hi) = hits / len(recent), wilson(hits, len(recent), z)
        decayed = hi < baseline
    else:
        err = np.abs(pred - label)
        value = float(err.mean())
        half = z * float(err.std(ddof=1)) / math.sqrt(len(err))
        lo, hi = value - half, value + half
        decayed = lo > baseline
    return DriftResult(
        name,
        value,
        baseline,
        None,
        bool(decayed),
        (),
        len(recent),
        extra={"ci": (lo, hi), "confidence": confidence, "metric": metric},
    )


def prediction_shift(
    reference_outputs: np.ndarray,
    outputs: np.ndarray,
    task: Literal["classification", "regression"],
    p_val: float = 0.01,
    max_confidence_drop: float = 0.1,
) -> DriftResult:
    """Label-free proxy: predicted-class (chi-square) or value (KS) shift, confidence drop."""
    ref, cur = np.asarray(reference_outputs, np.float64), np.asarray(outputs, np.float64)
    if task == "regression":
        from scipy import stats  # imported here: a second's start-up for every importer

        res = stats.ks_2samp(ref.ravel(), cur.ravel())
        feats = (
            FeatureDrift(
                "prediction",
                float(res.statistic),
                float(res.pvalue),
                p_val,
                bool(res.pvalue < p_val),
            ),
        )
        return DriftResult(
            "prediction_shift",
            float(res.statistic),
            p_val,
            float(res.pvalue),
            bool(res.pvalue < p_val),
            feats,
            len(cur),
        )
    k = ref.shape[1]
    counts = [np.bincount(o.argmax(axis=1), minlength=k) + 0.5 for o in (ref, cur)]
    expected = counts[0] / counts[0].sum() * counts[1].sum()
    from scipy import stats

    chi = stats.chisquare(counts[1], expected)
    drop = _confidence(ref) - _confidence(cur)
    feats = (
        FeatureDrift(
            "predicted_class",
            float(chi.statistic),
            float(chi.pvalue),
            p_val,
            bool(chi.pvalue < p_val),
        ),
        FeatureDrift(
            "confidence_drop",
            float(drop),
            None,
            max_confidence_drop,
            bool(drop > max_confidence_drop),
        ),
    )
    return DriftResult(
        "prediction_shift",
        float(chi.statistic),
        p_val,
        float(chi.pvalue),
        any(f.is_drift for f in feats),
        feats,
        len(cur),
        extra={"confidence_drop": float(drop)},
    )


def _confidence(logits: np.ndarray) -> float:
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return float(p.max(axis=1).mean())
