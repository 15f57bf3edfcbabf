"""A tiny in-process time-series buffer and the few PromQL functions the alert rules need.

Each rule in :mod:`engage.monitor.rules` has a PromQL expression (for Prometheus) and a
Python ``check`` over a :class:`SeriesBuffer` (for the job's own monitor). The functions
here reproduce Prometheus 2.x semantics exactly where the rules depend on them, so the two
agree on the same samples (the contract test feeds both the same scenarios):

- an instant selection takes each series' latest sample in ``[t - lookback, t]``
  (lookback 5 min, both ends inclusive as in Prometheus 2.x);
- a range selection ``x[w]`` takes the samples in ``[t - w, t]``;
- ``min``/``max`` (aggregation and ``*_over_time``) skip NaN unless every value is NaN;
- ``deriv`` is the least-squares slope, 0 for a constant series, absent under 2 samples.

Not reproduced, because engage's metrics never need it: staleness markers for series that
vanish from a scrape (a vanished series is seen for one more lookback).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs; the metric name is apart
Vector = dict[Labels, float]  # an instant vector: one value per label set
Points = list[tuple[float, float]]  # (unix seconds, value), oldest first

JOB_LABELS = ("job", "run_id")
LOOKBACK_S = 300.0  # Prometheus' default lookback delta
RETENTION_S = 900.0  # the longest rule window (10 min) plus room


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """A label mapping as :data:`Labels`: sorted ``(name, value)`` pairs, usable as a key."""
    return tuple(sorted(mapping.items()))


class SeriesBuffer:
    """Recent samples per series, bounded by ``retention_seconds``.

    ``names`` limits what is kept to the metric names the rules read (None keeps all).
    """

    def __init__(
        self,
        *,
        names: Iterable[str] | None = None,
        retention_seconds: float = RETENTION_S,
        lookback_seconds: float = LOOKBACK_S,
    ) -> None:
        self.names = frozenset(names) if names is not None else None
        self.retention_seconds = retention_seconds
        self.lookback_seconds = lookback_seconds
        self._series: dict[str, dict[Labels, deque[tuple[float, float]]]] = {}

    # -- writing -------------------------------------------------------------------------------
    def add(self, name: str, labels: Mapping[str, str], t: float, value: float) -> None:
        """Append one sample of series ``name{labels}`` at time ``t`` and drop samples older than
        the retention. A name the buffer does not keep, or a sample older than the series'
        latest, is ignored.
        """
        if self.names is not None and name not in self.names:
            return
        points = self._series.setdefault(name, {}).setdefault(labels_of(labels), deque())
        if points and t < points[-1][0]:
            return  # out of order: a scrape never goes back in time
        points.append((t, float(value)))
        while points[0][0] < t - self.retention_seconds:
            points.popleft()

    def sample_registry(self, registry: Any, t: float) -> None:
        """Take one sample of every series of a prometheus_client ``CollectorRegistry``."""
        self._sample_families(registry.collect(), t)

    def sample_text(self, text: str, t: float) -> None:
        """Take one sample from a Prometheus text exposition (a scraped ``/metrics`` page)."""
        self._sample_families(text_string_to_metric_families(text), t)

    def _sample_families(self, families: Iterable[Any], t: float) -> None:
        for family in families:
            for sample in family.samples:
                self.add(sample.name, sample.labels, t, sample.value)

    # -- reading -------------------------------------------------------------------------------
    def instant(self, name: str, t: float, **match: str) -> Vector:
        """``name{match}`` at ``t``: each series' latest sample within the lookback."""
        out: Vector = {}
        for labels, points in self._matching(name, match):
            for at, value in reversed(points):
                if at <= t:
                    if at >= t - self.lookback_seconds:
                        out[labels] = value
                    break
        return out

    def window(self, name: str, t: float, seconds: float, **match: str) -> dict[Labels, Points]:
        """``name{match}[seconds]`` at ``t``: the samples in ``[t - seconds, t]``."""
        out: dict[Labels, Points] = {}
        for labels, points in self._matching(name, match):
            inside = [(at, v) for at, v in points if t - seconds <= at <= t]
            if inside:
                out[labels] = inside
        return out

    def _matching(self, name: str, match: Mapping[str, str]):
        for labels, points in self._series.get(name, {}).items():
            have = dict(labels)
            if all(have.get(k, "") == v for k, v in match.items()):
                yield labels, points


# -- PromQL functions ----------------------------------------------------------------------------
def _nan_skipping(pick: Callable[[float, float], float]) -> Callable[[Iterable[float]], float]:
    def reduce(values: Iterable[float]) -> float:
        """The ``pick`` of ``values``, skipping NaN; NaN if every value is NaN or there are none."""
        out = math.nan
        for v in values:
            out = v if math.isnan(out) else (out if math.isnan(v) else pick(out, v))
        return out

    return reduce


nan_min = _nan_skipping(min)
nan_max = _nan_skipping(max)


def aggregate(
    vector: Vector, how: Callable[[list[float]], float], by: tuple[str, ...] = JOB_LABELS
) -> Vector:
    """``how by (by) (vector)``; like PromQL, an empty label value is dropped from the key."""
    groups: dict[Labels, list[float]] = {}
    for labels, value in vector.items():
        have = dict(labels)
        key = tuple((k, have[k]) for k in sorted(by) if have.get(k))
        groups.setdefault(key, []).append(value)
    return {key: how(values) for key, values in groups.items()}


def max_by(vector: Vector, by: tuple[str, ...] = JOB_LABELS) -> Vector:
    """``max by (by) (vector)``, NaN values skipped."""
    return aggregate(vector, nan_max, by)


def count_by(vector: Vector, by: tuple[str, ...] = JOB_LABELS) -> Vector:
    """``count by (by) (vector)``: how many series fall in each group."""
    return aggregate(vector, lambda values: float(len(values)), by)


def over_time(ranges: Mapping[Labels, Points], fn: Callable[[Points], float | None]) -> Vector:
    """Apply a ``*_over_time``-style function per series; None drops the series."""
    out: Vector = {}
    for labels, points in ranges.items():
        value = fn(points)
        if value is not None:
            out[labels] = value
    return out


def min_over_time(points: Points) -> float:
    """``min_over_time`` of one series' points, NaN values skipped."""
    return nan_min(v for _, v in points)


def max_over_time(points: Points) -> float:
    """``max_over_time`` of one series' points, NaN values skipped."""
    return nan_max(v for _, v in points)


def deriv(points: Points) -> float | None:
    """Per-second least-squares slope, as PromQL's ``deriv``; None under two samples."""
    if len(points) < 2:
        return None
    first = points[0][1]
    if all(v == first for _, v in points):
        return 0.0  # Prometheus special-cases a constant series to exactly 0
    t0 = points[0][0]
    xs = [t - t0 for t, _ in points]
    ys = [v for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
