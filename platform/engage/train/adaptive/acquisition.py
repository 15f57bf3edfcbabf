"""How the adaptive sampler scores candidate scenarios: disagreement or error.

Every candidate is probed: a short simulation (one household, ``probe_days``) gives windows
with their labels (the loop trains on them too: they are simulated samples). The current
ensemble predicts them, and a candidate scores high where its members disagree
(:func:`disagreement`: the variance of their predictions, averaged over the candidate's
windows; a large variance marks a region of the space the model has not learned) or where
their mean is wrong (:func:`error`: the mean loss of the ensemble's mean prediction).
:func:`pick` then keeps the best ``n`` candidates that are not too close to one another, so
one hard region does not take the whole round. Scores are results; the loop decides what to
simulate (STYLE: results, then decisions).
"""

from __future__ import annotations

import numpy as np


def disagreement(predictions: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Per-candidate ensemble disagreement.

    Parameters
    ----------
    predictions:
        Shape ``(members, windows, outputs)``: class probabilities, or regression outputs
        (one column).
    groups:
        Shape ``(windows,)``: which candidate (0..n-1) each window comes from.
    n:
        The number of candidates.

    Returns
    -------
    numpy.ndarray
        Shape ``(n,)``: the variance across members, summed over outputs and averaged
        over each candidate's windows (0 for a candidate without windows).
    """
    per_window = predictions.var(axis=0).sum(axis=-1)
    return _mean_by_group(per_window, groups, n)


def error(predictions: np.ndarray, y: np.ndarray, groups: np.ndarray, n: int, task: str):
    """Per-candidate error of the ensemble's mean prediction.

    Classification: the mean cross-entropy of the mean class probabilities; regression:
    the mean absolute error of the mean output. Shapes as in :func:`disagreement`.
    """
    mean = predictions.mean(axis=0)
    if task == "classification":
        p = np.clip(mean[np.arange(len(y)), y.astype(int)], 1e-7, 1.0)
        per_window = -np.log(p)
    else:
        per_window = np.abs(mean[:, 0] - y)
    return _mean_by_group(per_window, groups, n)


def pick(scores: np.ndarray, points: np.ndarray, n: int, min_distance: float) -> np.ndarray:
    """Indices of the ``n`` best-scoring points, greedily skipping any closer than
    ``min_distance`` (Euclidean, in the unit cube) to one already picked; when too few
    are far enough apart, the best of the rest fill up."""
    order = np.argsort(-scores, kind="stable")
    chosen: list[int] = []
    for i in order:
        if len(chosen) == n:
            break
        if all(np.linalg.norm(points[i] - points[j]) >= min_distance for j in chosen):
            chosen.append(int(i))
    for i in order:  # fill up when the space ran out of far-apart candidates
        if len(chosen) == n:
            break
        if int(i) not in chosen:
            chosen.append(int(i))
    return np.array(chosen, dtype=int)


def _mean_by_group(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    sums = np.bincount(groups, weights=values, minlength=n)
    counts = np.bincount(groups, minlength=n)
    return np.divide(sums, counts, out=np.zeros(n), where=counts > 0)
