"""How the adaptive sampler scores candidate scenarios: disagreement, error, or out of bag.

With ``disagreement`` or ``error`` every candidate is probed: a short simulation (the
first ``probe_hours`` of its scenario, or one household for ``probe_days``) gives windows
with their labels (the loop trains on them too: they are simulated samples). The current
ensemble predicts them, and a candidate scores high where its members disagree
(:func:`disagreement`: the variance of their predictions, averaged over the candidate's
windows; a large variance marks a region of the space the model has not learned) or where
their mean is wrong (:func:`error`: the mean loss of the ensemble's mean prediction).
:func:`pick` then keeps the best ``n`` candidates that are not too close to one another, so
one hard region does not take the whole round.

``acquisition: out_of_bag`` probes nothing. Every ensemble member trains on a bootstrap
resample, so each window already simulated is left out of about a third of the members;
:func:`out_of_bag` is the loss of those members' mean prediction on it, an honest estimate
of how wrong the model is there that costs no simulation. :func:`per_group` averages it per
scenario simulated so far (the loop continues the worst ones: the same households, later
days), and :func:`surrogate` spreads it over the parameter space (a Gaussian-kernel average
of the scenarios' scores) to score fresh points. With ``span_hours`` the loop simulates
short spans of fresh scenarios instead, and :func:`by_hour` and :func:`span_starts` turn
the same out-of-bag error into where in the day a span starts: the hours the model gets
wrong (departures and returns) are simulated more often. Scores are results; the loop
decides what to simulate (STYLE: results, then decisions).
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


def out_of_bag(
    predictions: np.ndarray, y: np.ndarray, bags: list[np.ndarray], task: str
) -> np.ndarray:
    """Per-window out-of-bag loss of an ensemble on the windows it was trained on.

    Parameters
    ----------
    predictions:
        Shape ``(members, windows, outputs)``, every member's predictions on the training
        windows (as in :func:`disagreement`).
    y:
        Shape ``(windows,)``: the labels (class index) or targets.
    bags:
        Per member, the rows of the training windows its bootstrap resample drew (with
        repeats).
    task:
        ``"classification"``: the cross-entropy of the out-of-bag members' mean class
        probabilities; otherwise the absolute error of their mean output.

    Returns
    -------
    numpy.ndarray
        Shape ``(windows,)``; NaN for a window every member trained on.
    """
    members, n = predictions.shape[:2]
    out = np.ones((members, n), dtype=bool)
    for k, rows in enumerate(bags):
        out[k, rows] = False
    count = out.sum(axis=0)
    mean = np.einsum("kn,kno->no", out.astype(predictions.dtype), predictions)
    mean = mean / np.maximum(count, 1)[:, None]
    if task == "classification":
        p = np.clip(mean[np.arange(n), y.astype(int)], 1e-7, 1.0)
        loss = -np.log(p)
    else:
        loss = np.abs(mean[:, 0] - y)
    return np.where(count > 0, loss, np.nan)


def per_group(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """The mean of ``values`` per group ``0..n-1``, NaN entries left out (NaN for a group
    with no finite value)."""
    finite = np.isfinite(values)
    sums = np.bincount(groups[finite], weights=values[finite], minlength=n)
    counts = np.bincount(groups[finite], minlength=n)
    return np.divide(sums, counts, out=np.full(n, np.nan), where=counts > 0)


def surrogate(
    known: np.ndarray, scores: np.ndarray, candidates: np.ndarray, bandwidth: float
) -> np.ndarray:
    """Scores of ``candidates`` predicted from scored points (Nadaraya-Watson regression).

    Each candidate gets the average of the ``known`` points' ``scores`` (NaN ones left out),
    weighted by a Gaussian kernel of their Euclidean distance (sd ``bandwidth``, in the unit
    cube): near a scenario the model got wrong, a candidate scores high. Shapes: ``known``
    ``(m, d)``, ``scores`` ``(m,)``, ``candidates`` ``(c, d)``; returns ``(c,)`` (all 0 when
    no score is finite).
    """
    keep = np.isfinite(scores)
    if not keep.any():
        return np.zeros(len(candidates))
    known, scores = known[keep], scores[keep]
    d2 = ((candidates[:, None, :] - known[None, :, :]) ** 2).sum(axis=-1)
    # Shift by each candidate's nearest distance before exp, so far candidates do not
    # underflow to 0/0; the shift cancels in the ratio.
    logw = -(d2 - d2.min(axis=1, keepdims=True)) / (2 * bandwidth**2)
    w = np.exp(logw)
    return (w @ scores) / w.sum(axis=1)


def by_hour(loss: np.ndarray, minutes: np.ndarray) -> np.ndarray:
    """The mean of per-window ``loss`` (NaN left out) by the hour of the day of each
    window's label (``minutes``: minute of the day, 0..1439); shape ``(24,)``, an hour
    without a finite loss gets the mean of the others (0 when none has one)."""
    hours = per_group(loss, (np.asarray(minutes) // 60).astype(np.int64), 24)
    if not np.isfinite(hours).any():
        return np.zeros(24)
    return np.where(np.isfinite(hours), hours, np.nanmean(hours))


def span_starts(hourly: np.ndarray, span_hours: int, mix: float) -> np.ndarray:
    """The probability of each hour of the day (24) to start a span of ``span_hours``.

    A span starting in hour ``h`` has its labels in hours ``h .. h + span_hours - 1``
    (mod 24): its score is their mean ``hourly`` loss. The probabilities are ``mix`` times
    the scores normalised plus ``1 - mix`` spread evenly, so every hour keeps some chance
    (one round's error per hour is noisy, and a model trained only on the hard hours
    forgets the easy ones). All-zero scores give the even spread.
    """
    hours = (np.arange(24)[:, None] + np.arange(max(1, span_hours))[None, :]) % 24
    score = np.asarray(hourly, dtype=float)[hours].mean(axis=1)
    even = np.full(24, 1 / 24)
    if not score.sum() > 0:
        return even
    return mix * score / score.sum() + (1 - mix) * even


def _mean_by_group(values: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    sums = np.bincount(groups, weights=values, minlength=n)
    counts = np.bincount(groups, minlength=n)
    return np.divide(sums, counts, out=np.zeros(n), where=counts > 0)
