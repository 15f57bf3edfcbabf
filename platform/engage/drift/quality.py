"""Data-quality checks on live input: NaN/inf rate, out-of-range, missing features, stuck sensors.

:func:`check_quality` reports on a table or an array; the registered ``quality`` detector
wraps it in the common interface, keeping the last rows between calls so a stuck sensor
(a span of identical readings) is found across batch boundaries.

Ranges: the training 1 %-99 % quantiles widened by ``margin`` (0.5) times their distance
on each side, never narrower than the training extremes (:func:`robust_range`), so a
daily excursion just past a short reference's extremes is not "out of range".
Stuck: a feature constant in under ``stuck_tolerance`` of its training windows is stuck
after ``window`` equal readings; one that was legitimately constant for spans (light at
night) only after twice its longest constant training span (:func:`stuck_span`). A
quantised sensor (a thermometer in 0.1-degree steps in a quiet room) repeats its last
reading by chance: a run its training repeat rate makes likely is not stuck
(:func:`chance_run`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, register_detector
from engage.drift.reference import FeatureStats, Reference

# A run of equal readings this unlikely per row under the sensor's training repeat rate is
# called stuck: about one chance run in 10,000 rows, the live default's rate of false alarms.
STUCK_CHANCE = 1e-4


@dataclass(frozen=True)
class FeatureQuality:
    """One feature's data quality over the checked rows (rates are shares of rows)."""

    feature: str
    missing: bool
    nan_rate: float
    inf_rate: float
    out_of_range_rate: float
    stuck_windows: int
    first_stuck_row: int | None  # last row of the first all-equal window
    first_bad_row: int | None = None  # first NaN, infinite or out-of-range value

    @property
    def worst_rate(self) -> float:
        """The largest of the NaN, infinite and out-of-range rates (1.0 when missing)."""
        return 1.0 if self.missing else max(self.nan_rate, self.inf_rate, self.out_of_range_rate)


@dataclass(frozen=True)
class QualityReport:
    """Quality of every feature over ``rows`` checked rows."""

    rows: int
    features: tuple[FeatureQuality, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        """Features absent from the input."""
        return tuple(f.feature for f in self.features if f.missing)


def check_quality(
    x: np.ndarray,
    reference: Reference,
    *,
    window: int | None = None,
    margin: float = 0.5,
    missing: tuple[str, ...] = (),
    history: np.ndarray | None = None,
    stuck_tolerance: float = 0.001,
) -> QualityReport:
    """Quality of rows ``x`` ``(n, F)`` (raw units) against ``reference``.

    Parameters
    ----------
    window : int or None
        Rows per stuck-sensor window; default: the model's window (at least 5).
    margin : float
        Out of range means outside the training 1 %-99 % quantiles widened by ``margin``
        times their distance on each side, or past the training extremes by more than a
        tenth of their distance, whichever is wider (:func:`robust_range`).
    missing : tuple of str
        Features absent from the input (their column in ``x`` is NaN).
    history : numpy.ndarray or None
        Rows that came just before ``x``, so windows can span the boundary.
    """
    w = window or max(reference.window, 5)
    x = np.asarray(x, dtype=np.float64)
    past = history if history is not None else np.empty((0, x.shape[1]))
    joined = np.concatenate([past, x])
    out = []
    for j, name in enumerate(reference.features):
        col, stats = x[:, j], reference.stats[name]
        finite = np.isfinite(col)
        low, high = robust_range(stats, margin)
        outside = finite & ((col < low) | (col > high))
        stuck, first = 0, None
        span = stuck_span(stats, w, stuck_tolerance)
        if span is not None and len(joined) >= span:
            flat = np.ptp(sliding_window_view(joined[:, j], span), axis=1) == 0
            flat &= np.arange(len(flat)) + span - 1 >= len(past)  # windows ending in x
            stuck = int(flat.sum())
            first = int(np.argmax(flat)) + span - 1 - len(past) if stuck else None
        n = max(len(col), 1)
        bad = np.flatnonzero(~finite | outside)
        out.append(
            FeatureQuality(
                name,
                name in missing,
                float(np.isnan(col).sum() / n) if name not in missing else 1.0,
                float(np.isinf(col).sum() / n),
                float(outside.sum() / n),
                stuck,
                first,
                int(bad[0]) if len(bad) else None,
            )
        )
    return QualityReport(len(x), tuple(out))


def robust_range(stats: FeatureStats, margin: float) -> tuple[float, float]:
    """The in-range interval of a feature: its training 1 %-99 % quantiles widened by
    ``margin`` times their distance on each side, and never narrower than the training
    min..max widened by a tenth of their distance (a heavy-tailed sensor's own extremes
    stay in range). A short reference's daily excursion past its extremes fits in the
    margin."""
    q = stats.quantiles
    lo, hi = q.get("0.01", stats.min), q.get("0.99", stats.max)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        lo, hi = stats.min, stats.max
    span = (hi - lo) or (stats.max - stats.min) or abs(hi) or 1.0
    full = (stats.max - stats.min) or abs(stats.max) or 1.0
    low = min(lo - margin * span, stats.min - 0.1 * full)
    return low, max(hi + margin * span, stats.max + 0.1 * full)


def stuck_span(stats: FeatureStats, window: int, tolerance: float) -> int | None:
    """Rows of identical readings that make a sensor stuck; None: never called stuck.

    A feature constant in under ``tolerance`` of its training windows is stuck after
    ``window`` equal rows, or after the run its training repeat rate makes a chance event
    (:func:`chance_run`), whichever is longer. One that was legitimately constant (light at
    night) is stuck only after twice its longest constant training span, when that span is
    known; otherwise (a reference of windows in random order) it is not checked.
    """
    if stats.constant_window_rate < tolerance:
        return max(window, chance_run(stats.repeat_rate, stats.repeat_pairs))
    if stats.longest_constant > 0:
        return max(window, 2 * stats.longest_constant + 1)
    return None


def chance_run(rate: float, pairs: int, chance: float = STUCK_CHANCE) -> int:
    """Shortest run of equal readings that a sensor repeating its last reading with
    probability ``rate`` (measured over ``pairs`` consecutive training pairs) reaches with
    probability under ``chance`` per row: the smallest ``s`` with ``p ** (s - 1) <= chance``,
    where ``p`` is the rate's 95 % upper (Wilson) bound, so a short reference that saw few
    repeats does not make chance runs look stuck. 1 when the sensor never repeated."""
    if pairs <= 0 or rate <= 0.0:
        return 1
    z = 1.96
    centre = rate + z * z / (2 * pairs)
    spread = z * math.sqrt(rate * (1 - rate) / pairs + z * z / (4 * pairs * pairs))
    high = min((centre + spread) / (1 + z * z / pairs), 1.0 - 1e-9)
    return 1 + math.ceil(math.log(chance) / math.log(high))


@register_detector("quality")
class QualityDetector(DriftDetector):
    """Data quality as a detector: drift = any NaN/inf/out-of-range rate above
    ``max_rate``, a missing feature, or a stuck sensor (a window with zero variance)."""

    kind = "online"
    default_threshold = 0.01
    threshold_meaning = "largest tolerated share of NaN, infinite or out-of-range values"

    def __init__(
        self, max_rate: float = default_threshold, window: int | None = None, margin: float = 0.5
    ) -> None:
        super().__init__()
        self.max_rate, self.window, self.margin = max_rate, window, margin
        self.history: np.ndarray | None = None

    def _fit(self, reference: Reference) -> None:
        self.w = self.window or max(reference.window, 5)
        spans = [stuck_span(s, self.w, 0.001) for s in reference.stats.values()]
        self.keep = max([self.w, *(s for s in spans if s is not None)])  # rows of history
        self.reset()

    def reset(self) -> None:
        """Forget the rows kept for stuck spans across checks."""
        self.history = None

    def _check(self, x: np.ndarray, missing: tuple[str, ...] = ()) -> DriftResult:
        report = check_quality(
            x,
            self.reference,
            window=self.w,
            margin=self.margin,
            missing=missing,
            history=self.history,
        )
        joined = x if self.history is None else np.concatenate([self.history, x])
        self.history = joined[-(self.keep - 1) :] if self.keep > 1 else None
        return quality_result(report, self.max_rate, self.name)


def quality_result(report: QualityReport, max_rate: float, name: str = "quality") -> DriftResult:
    """A :class:`QualityReport` as a :class:`DriftResult` (statistic = worst rate)."""
    feats, firsts = [], []
    for f in report.features:
        bad = f.missing or f.worst_rate > max_rate or f.stuck_windows > 0
        score = 1.0 if f.stuck_windows else f.worst_rate
        feats.append(FeatureDrift(f.feature, score, None, max_rate, bad))
        if f.first_stuck_row is not None:
            firsts.append(f.first_stuck_row)
        if f.missing:
            firsts.append(0)
        elif f.worst_rate > max_rate and f.first_bad_row is not None:
            firsts.append(f.first_bad_row)
    alarm = min(firsts) if firsts else None
    return DriftResult(
        name,
        max(fd.statistic for fd in feats),
        max_rate,
        None,
        any(fd.is_drift for fd in feats),
        tuple(feats),
        report.rows,
        alarm,
        extra={"quality": report},
    )


@register_detector("health")
class HealthDetector(QualityDetector):
    """``quality`` without the range check: NaN/inf rate, missing features, stuck sensors.

    The live default pairs it with ``bocpd``, which finds level and spread changes as
    regimes (and does not cry wolf at each value of a trend past the reference's range,
    as a range check does: docs/BENCHMARKS.md, real-data section).
    """

    threshold_meaning = "largest tolerated share of NaN or infinite values"

    def __init__(
        self, max_rate: float = QualityDetector.default_threshold, window: int | None = None
    ):
        super().__init__(max_rate, window, margin=math.inf)
