"""Bayesian online change-point detection (Adams & MacKay 2007), pure numpy.

The ``bocpd`` detector keeps a posterior over the *run length* (rows since the last
change) and, for every run length, a Normal-Gamma posterior of each feature's mean and
precision; the predictive of a row is Student-t, so heavy tails and an unknown variance
are absorbed instead of alarming. Features are mapped to normal scores through the
reference's empirical CDF (extended linearly past its extremes, in IQR units), so skewed
and multimodal sensors look Gaussian when nothing changed and one prior fits every sensor.

Model, per row (hazard ``H = 1 / expected_run``, constant):

- run length grows (``r -> r + 1``) with probability ``1 - H`` times the predictive of the
  row under that run's posterior, or restarts (``r -> 0``) with probability ``H`` times
  the predictive under the prior;
- run lengths are truncated at ``max_run``: the oldest slot is a "long run" bucket that
  keeps absorbing (bounded cost: ``O(max_run * features)`` per row);
- the stream starts in the *reference regime*: the bucket slot is seeded with the
  reference's statistics, weighted by its effective sample size (autocorrelation
  shrinks it), so a stream that starts shifted is a change at row 0.

Multivariate rule (``combine``): ``"joint"`` (default) shares one run length across the
features and multiplies their predictives (features independent within a regime), so a
change in any subset of sensors is one change; ``"any"`` runs one detector per feature
and alarms when any does (more false alarms as features grow, see docs/BENCHMARKS.md).

Defaults (``expected_run`` 100, ``threshold`` 0.9, ``window`` 10) are one setting for
every stream: the hazard is TCPD's default BOCPD one; the threshold was chosen on TCPD,
where 0.8-0.95 give mean F1 0.74-0.77 (docs/BENCHMARKS.md). Cost: ``O(max_run * F)`` per
row, a few hundred microseconds for 256 slots and 4 features.

Change point: the posterior probability that a change happened after the last confirmed
one and within the last ``window`` rows exceeds ``threshold``. The change is dated at the
most probable start among those run lengths; it becomes the new regime (later alarms must
start at least ``min_gap`` rows after it), so one lasting shift gives one alarm, dated
when it began (no re-alarm per row). ``extra["changes"]`` lists every change as ``(alarm_row, start_row)`` in
stream rows; ``extra["alarms"]`` holds the rows of the current check where drift began.

Change is not drift: a sensor stream changes regime every evening. At ``fit`` the detector
runs over the reference itself and keeps the regimes it finds there (mean and variance of
each segment, and of the whole reference). With ``combine="joint"`` one of them must match
every feature at once (a regime that looks like the night on one sensor and like the day
on another is not known). ``is_drift`` (and ``regime.changed``) is True only while the
current regime matches none of them (the features that miss the closest match are the
ones reported); it is signalled once, at the row where the most probable regime
(at least ``min_gap`` rows old and holding ``threshold`` of the posterior) is first found
unknown, and a return to a known regime clears it.

Slow drift (``ramp=True``, the default): a ramp becomes an unknown regime late, since a
regime must move ``SHIFT`` reference standard deviations and the long-run statistics follow
it. Beside the regime judgement the detector runs :class:`engage.drift.ramp.RampArm`: mean
CUSUMs on the rows' normal scores against the level the stream starts at (the reference's,
or a learned one), for an ERT of 10,000 rows on independent rows, that signal only while the
rows they have seen are close to serially independent (smooth real series, trends and daily
swings, keep them silent) and restart at every change whose posterior passes
``RAMP_CONFIDENT``. Its signal is drift too (dated where its statistic left zero, listed in
``changes``), held until the next confident change. It is armed only with a reference of at
least ``RAMP_REFERENCE`` rows: a CUSUM's run lengths hold only when its in-control mean is
known precisely, and with a few hundred reference rows the error of that mean alone brings
false alarms within a few thousand rows (Jones, Champ & Rigdon 2004); never with
``cycle`` (a cyclic reference's mean is no level the stream ever sits at).

Daily cycle (``cycle=True``, registered as ``bocpd_daily``): the known regimes also hold
the mean and variance of every stretch of ``SPANS`` consecutive reference rows (a quarter
span apart), so a reference that covers a day holds every time of day, a smooth cycle
included, which a segmentation cuts into a few pieces only; a live regime is compared with
the stretches of about its own length (half to twice), and variances within ``VAR_SE``
standard errors of the log ratio count as alike (short stretches have noisy variances). A
new day's normal cycle is then no drift, a level shift still is. The price: a regime seen
at *some* time of the reference is known at any time, so on streams whose rows are drawn
i.i.d. (the scenario benchmark) shifts that resemble some stretch (a cold, humid night)
are called late or not at all (docs/BENCHMARKS.md); hence not the default.
"""

from __future__ import annotations

import math
import warnings
from itertools import pairwise

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import gammaln, ndtri

from engage.drift.base import (
    DriftDetector,
    DriftResult,
    FeatureDrift,
    Regime,
    register_detector,
)
from engage.drift.ramp import RampArm
from engage.drift.reference import Reference

# State rows of the (5, slots, features) array: Normal-Gamma mean, pseudo-count, shape,
# rate, and c = gammaln(alpha + 1/2) - gammaln(alpha), kept by the recursion
# c(alpha + 1/2) = log(alpha) - c(alpha) so no gamma function is evaluated per row.
MU, KAPPA, ALPHA, BETA, C = range(5)
SHIFT = 0.5  # reference standard deviations: a regime mean this far off has moved
VAR_RATIO = 2.0  # a regime variance this many times off (either way) has moved
VAR_FLOOR = 1e-4  # standardised variance below which regimes count as constant alike
LEARN_ROWS = 3000  # reference rows the detector runs over to learn the known regimes
MIN_SEGMENT = 50  # rows a reference segment needs to count as a known regime (fewer: noise)
SPANS = (16, 32, 64, 128, 256)  # lengths (rows) of the reference stretches kept as known
VAR_SE = 2.0  # standard errors of the log variance ratio a known regime is allowed
RAMP_CONFIDENT = 0.9  # posterior of a dated change that restarts the slow-drift arm
RAMP_REFERENCE = 1000  # reference rows the slow-drift arm needs (its CUSUM's in-control mean)


def normal_gamma(mu: float, kappa: float, alpha: float, beta: float, f: int) -> np.ndarray:
    """A ``(5, features)`` Normal-Gamma state with the same prior on every feature."""
    c = gammaln(alpha + 0.5) - gammaln(alpha)
    return np.array([mu, kappa, alpha, beta, c], dtype=np.float64)[:, None].repeat(f, axis=1)


def log_predictive(s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Student-t log density of ``x`` ``(features,)`` under states ``s`` ``(5, ..., F)``."""
    scale2 = s[BETA] * (s[KAPPA] + 1.0) / (s[ALPHA] * s[KAPPA])
    nu = 2.0 * s[ALPHA]
    z2 = (x - s[MU]) ** 2 / scale2
    return s[C] - 0.5 * np.log(nu * scale2 * math.pi) - (s[ALPHA] + 0.5) * np.log1p(z2 / nu)


def update(s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """States ``s`` after observing one more row ``x`` (a new array)."""
    out = np.empty_like(s)
    k1 = s[KAPPA] + 1.0
    d = x - s[MU]
    out[MU] = s[MU] + d / k1
    out[KAPPA] = k1
    out[ALPHA] = s[ALPHA] + 0.5
    out[BETA] = s[BETA] + s[KAPPA] * d * d / (2.0 * k1)
    out[C] = np.log(s[ALPHA]) - s[C]
    return out


def _logsumexp(a: np.ndarray) -> np.ndarray:
    """log(sum(exp(a))) over axis 0, stable for -inf entries."""
    top = a.max(axis=0)
    return top + np.log(np.exp(a - top).sum(axis=0))


class NormalScore:
    """Raw values -> normal scores through each feature's reference ECDF (mid-ranks);
    beyond the reference's extremes the score goes on linearly, one unit per ``scale``,
    so values past everything seen in training still differ from each other."""

    def __init__(self, rows: np.ndarray, scale: np.ndarray) -> None:
        self.sorted = [np.sort(c[np.isfinite(c)]) for c in rows.T]
        self.scale = scale
        self.edges = [
            (ndtri(0.5 / len(c)), ndtri(1 - 0.5 / len(c))) if len(c) else (0.0, 0.0)
            for c in self.sorted
        ]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Normal scores of ``x`` ``(n, F)``; NaN stays NaN."""
        out = np.empty(x.shape)
        for j, col in enumerate(self.sorted):
            n, v = len(col), x[:, j]
            if not n:
                out[:, j] = v
                continue
            u = (np.searchsorted(col, v, "left") + np.searchsorted(col, v, "right")) / 2.0
            z = ndtri(np.clip(u, 0.5, n - 0.5) / n)
            lo, hi = self.edges[j]
            z = np.where(v > col[-1], hi + (v - col[-1]) / self.scale[j], z)
            z = np.where(v < col[0], lo - (col[0] - v) / self.scale[j], z)
            out[:, j] = np.where(np.isfinite(v), z, np.nan)
        return out


def effective_size(values: np.ndarray) -> float:
    """Effective sample size of a series under an AR(1) approximation: ``n (1-r)/(1+r)``.

    ``r`` is the lag-1 autocorrelation (clipped to ``[0, 0.99]``); NaNs are dropped.
    """
    v = values[np.isfinite(values)]
    if len(v) < 3 or np.ptp(v) == 0:
        return float(len(v))
    d = v - v.mean()
    r = float(np.clip(np.dot(d[:-1], d[1:]) / np.dot(d, d), 0.0, 0.99))
    return len(v) * (1.0 - r) / (1.0 + r)


def robust_scale(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column median and scale (IQR / 1.349, else std, else 1) of finite values."""
    centre, scale = np.zeros(rows.shape[1]), np.ones(rows.shape[1])
    for j in range(rows.shape[1]):
        v = rows[:, j][np.isfinite(rows[:, j])]
        if not len(v):
            continue
        q25, centre[j], q75 = np.quantile(v, [0.25, 0.5, 0.75])
        s = (q75 - q25) / 1.349 or float(v.std()) or abs(centre[j]) * 0.01
        scale[j] = s if s > 0 else 1.0
    return centre, scale


@register_detector("bocpd")
class BocpdDetector(DriftDetector):
    """Bayesian online change points; drift = a change confirmed in the checked rows.

    Parameters
    ----------
    expected_run : float
        Prior expected rows between changes (hazard ``1 / expected_run``).
    threshold : float
        Posterior probability of a recent change that raises an alarm.
    window : int
        How recent (rows) a change must be to count towards the alarm probability.
    max_run : int
        Run-length truncation (cost per row is proportional to it).
    min_gap : int
        Rows after a confirmed change in which no new change may start.
    combine : {"joint", "any"}
        Multivariate rule (module docstring).
    reference_weight : float
        Upper bound on the reference's pseudo-count in the seeded regime.
    transform : {"normal_score", "robust"}
        How raw values become the model's units: through the reference's empirical CDF
        to normal scores, extended linearly past the reference's extremes (skewed and
        multimodal sensors look Gaussian under no change), or median/IQR only.
    confirm : float or None
        Posterior mass of "a change since the last one" (any age) that also raises an
        alarm, so a change that became certain only after ``window`` rows is not missed.
        Off by default: on TCPD it adds false changes on trending series (mean F1 0.75 ->
        0.66 at 0.99, docs/BENCHMARKS.md).
    cycle : bool
        Also know every stretch of the reference as a regime (module docstring, "Daily
        cycle"): for a reference that covers the daily cycle, rows in time order.
    ramp : bool
        Run the slow-drift arm (module docstring, "Slow drift";
        :class:`engage.drift.ramp.RampArm`) beside the regime judgement.
    """

    kind = "online"
    default_threshold = 0.9
    threshold_meaning = "posterior probability of a change within the last `window` rows"

    def __init__(
        self,
        expected_run: float = 100.0,
        threshold: float = default_threshold,
        window: int = 10,
        max_run: int = 256,
        min_gap: int = 5,
        combine: str = "joint",
        reference_weight: float = 100.0,
        confirm: float | None = None,
        transform: str = "normal_score",
        cycle: bool = False,
        ramp: bool = True,
    ) -> None:
        super().__init__()
        if transform not in ("normal_score", "robust"):
            raise ValueError(
                f"bocpd transform must be 'normal_score' or 'robust', got {transform!r}"
            )
        self.transform = transform
        if combine not in ("joint", "any"):
            raise ValueError(f"bocpd combine must be 'joint' or 'any', got {combine!r}")
        if not 0.0 < threshold < 1.0 or expected_run <= 1.0 or max_run < window + 2:
            raise ValueError(
                "bocpd needs 0 < threshold < 1, expected_run > 1 and max_run >= window + 2"
            )
        self.expected_run, self.threshold, self.window = expected_run, threshold, window
        self.max_run, self.min_gap, self.combine = max_run, min_gap, combine
        self.reference_weight, self.confirm = reference_weight, confirm
        self.cycle = cycle
        self.arm = RampArm() if ramp else None

    def _fit(self, reference: Reference) -> None:
        rows = np.asarray(reference.rows, dtype=np.float64)
        self.centre, self.scale = robust_scale(rows)
        self.score = NormalScore(rows, self.scale) if self.transform == "normal_score" else None
        z = self._standardise(rows)
        f = z.shape[1]
        self.groups = 1 if self.combine == "joint" else f
        self.prior = normal_gamma(0.0, 1.0, 1.0, 1.0, f)
        self.seed = self._seed(z)
        self.known, self.sizes, fixed = self._known_regimes(z)
        self.spans = np.where(np.arange(len(self.sizes)) < fixed, 0, self.sizes)
        self.armed = self.arm is not None and not self.cycle and len(z) >= RAMP_REFERENCE
        if self.armed:
            self.arm.fit(z)
        self.reset()

    def _standardise(self, x: np.ndarray) -> np.ndarray:
        if self.score is not None:
            return self.score(x)
        return (x - self.centre) / self.scale

    def _known_regimes(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Mean and variance ``(2, K, F)`` of the regimes the reference itself holds, their
        rows ``(K,)``, and how many come first that are compared with a run of any length
        (the whole reference and its segments; then the stretches of ``SPANS`` rows).

        The detector is run over (at most ``LEARN_ROWS`` of) the reference rows, in their
        time order; each segment between its changes of at least ``MIN_SEGMENT`` rows is a
        regime the model was trained on (night and day, weekday and weekend). A live
        regime that matches one of them is a change, but not drift. The whole
        reference is always one of them; with ``cycle``, so is every stretch of ``SPANS`` rows.
        """
        self.reset()
        rows = z[:LEARN_ROWS]
        for row in rows:
            prob, start = self._step(row)
            fired = prob > self.threshold
            if fired.any():
                self.last_start = np.where(fired, start, self.last_start)
                self.changes.append((self.t - 1, int(start[fired].min())))
        bounds = sorted({0, len(rows), *(start for _, start in self.changes)})
        means, variances = [np.nanmean(z, axis=0)], [np.nanvar(z, axis=0)]
        sizes = [np.array([len(z)])]
        for lo, hi in pairwise(bounds):
            if hi - lo >= max(self.window, MIN_SEGMENT):
                means.append(np.nanmean(rows[lo:hi], axis=0))
                variances.append(np.nanvar(rows[lo:hi], axis=0))
                sizes.append(np.array([hi - lo]))
        fixed = len(means)
        for span in (n for n in SPANS if self.cycle and n <= len(z)):
            stretch = sliding_window_view(z, span, axis=0)[:: max(1, span // 4)]  # (K, F, n)
            with warnings.catch_warnings():  # a stretch of one sensor's NaNs: NaN, no match
                warnings.simplefilter("ignore", RuntimeWarning)
                means.extend(np.nanmean(stretch, axis=2))
                variances.extend(np.nanvar(stretch, axis=2))
            sizes.append(np.full(len(stretch), span))
        return np.array([means, variances]), np.concatenate(sizes).astype(float), fixed

    def _seed(self, z: np.ndarray) -> np.ndarray:
        """The reference regime as a Normal-Gamma posterior (effective-size weighted)."""
        s = self.prior.copy()
        for j in range(z.shape[1]):
            v = z[:, j][np.isfinite(z[:, j])]
            if not len(v):
                continue
            n = min(effective_size(v), self.reference_weight, float(len(v)))
            m, var, k = float(v.mean()), float(v.var()), s[KAPPA, j]
            s[BETA, j] += 0.5 * n * var + k * n * (m - s[MU, j]) ** 2 / (2 * (k + n))
            s[MU, j] = (k * s[MU, j] + n * m) / (k + n)
            s[KAPPA, j] = k + n
            s[ALPHA, j] += n / 2
            s[C, j] = gammaln(s[ALPHA, j] + 0.5) - gammaln(s[ALPHA, j])
        return s

    def reset(self) -> None:
        """Start a new stream in the reference regime."""
        r = self.max_run
        self.logp = np.full((r, self.groups), -np.inf)
        self.logp[-1] = 0.0
        self.state = np.repeat(self.seed[:, None, :], r, axis=1)  # (5, R, F)
        self.t = 0  # rows consumed
        self.last_start = np.full(self.groups, -self.min_gap - 1)
        self.changes: list[tuple[int, int]] = []
        self.drifted = Regime()
        self.ramped = Regime()  # the slow-drift arm's signal, held until a confident change
        if getattr(self, "armed", False):
            self.arm.reset(0)
        self._hazard = (-math.log(self.expected_run), math.log1p(-1.0 / self.expected_run))

    def _step(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Consume one standardised row; (recent-change probability, start) per group."""
        ok = np.isfinite(x)
        complete = bool(ok.all())
        xs = x if complete else np.where(ok, x, 0.0)
        lp = log_predictive(self.state, xs)  # (R, F)
        lp0 = log_predictive(self.prior, xs)  # (F,)
        if not complete:
            lp, lp0 = np.where(ok, lp, 0.0), np.where(ok, lp0, 0.0)
        if self.groups == 1:
            lp, lp0 = lp.sum(axis=1, keepdims=True), lp0.sum(keepdims=True)
        log_h, log_1h = self._hazard
        joint = self.logp + lp
        grown = np.empty_like(self.logp)
        grown[1:] = joint[:-1] + log_1h
        # The long-run bucket absorbs the run reaching it; it keeps the statistics of the
        # more probable of the two (otherwise a new regime would inherit the old one's).
        take_new = joint[-2] > joint[-1]
        grown[-1] = np.logaddexp(grown[-1], joint[-1] + log_1h)
        grown[0] = _logsumexp(self.logp) + lp0 + log_h
        self.logp = grown - _logsumexp(grown)
        new = update(self.state, xs)
        if not complete:
            new = np.where(ok, new, self.state)
        self.state[:, -1] = np.where(take_new, new[:, -2], new[:, -1])
        self.state[:, 1:-1] = new[:, :-2]
        self.state[:, 0] = self.prior
        self.t += 1
        return self._recent()

    def _recent(self) -> tuple[np.ndarray, np.ndarray]:
        """Per group: (alarm score, most probable start) of a change after the last one.

        The score is the posterior mass of runs shorter than ``window`` (a recent change);
        a change that took longer to become certain still counts once the mass of every
        run since the last change exceeds ``confirm`` (then the score is that mass
        rescaled onto ``threshold``'s side of 1).
        """
        t = self.t - 1  # index of the row just consumed
        since = t - self.last_start - self.min_gap
        prob, start = np.zeros(self.groups), np.zeros(self.groups, dtype=int)
        for g in range(self.groups):
            h_all = int(min(max(since[g], 0), self.max_run - 1))
            if h_all <= 0:
                continue
            p = np.exp(self.logp[:h_all, g])
            h = min(self.window, h_all)
            prob[g], start[g] = p[:h].sum(), t - int(np.argmax(p[:h]))
            total = p.sum()
            if self.confirm is not None and total > self.confirm and prob[g] <= self.threshold:
                prob[g], start[g] = max(total, self.threshold + 1e-9), t - int(np.argmax(p))
        return prob, start

    def _check(self, x: np.ndarray) -> DriftResult:
        z = self._standardise(x)
        alarms, peak = [], np.zeros(self.groups)
        for i, row in enumerate(z):
            prob, start = self._step(row)
            peak = np.maximum(peak, prob)
            fired = prob > self.threshold
            if fired.any():
                self.last_start = np.where(fired, start, self.last_start)
                self.changes.append((self.t - 1, int(start[fired].min())))
            if self.armed and (prob > max(self.threshold, RAMP_CONFIDENT)).any():
                self.arm.reset(self.t)  # a confident change: a new regime, judged afresh
                self.ramped = Regime()
            if not self.drifted.changed and self._young():
                # Drift: the most probable regime now is none the reference holds, however
                # slowly it became the most probable (no dated change needed).
                self.drifted = self._regime()
                if self.drifted.changed:
                    alarms.append(i)
            if not self.drifted.changed and self._ramp(row):
                self.drifted = self.ramped
                alarms.append(i)
        # A return to a known regime clears the drift; the arm's holds until a new change.
        self.drifted = self._regime()
        if not self.drifted.changed:
            self.drifted = self.ramped
        moved = set(self.drifted.features)
        feats = tuple(
            FeatureDrift(
                f, float(peak[0 if self.groups == 1 else j]), None, self.threshold, f in moved
            )
            for j, f in enumerate(self.reference.features)
        )
        return DriftResult(
            self.name,
            float(peak.max()),
            self.threshold,
            None,
            self.drifted.changed,
            feats,
            len(x),
            alarms[0] if alarms else None,
            extra={"alarms": alarms, "changes": list(self.changes), "rows_seen": self.t},
            regime=self.drifted,
        )

    def _ramp(self, z: np.ndarray) -> bool:
        """Feed one row's scores to the slow-drift arm (while it has not signalled); True
        when it signals now: the drift is dated where the arm's statistic left zero and
        listed among ``changes``."""
        if not self.armed or self.ramped.changed:
            return False
        hit = self.arm.step(z, self.t - 1)
        if hit is None:
            return False
        crossed, since = hit
        names = tuple(f for f, c in zip(self.reference.features, crossed, strict=True) if c)
        self.ramped = Regime(True, since, names)
        self.changes.append((self.t - 1, since))
        return True

    def _moments(self, s: np.ndarray, r: int) -> tuple[float, float]:
        """A run's mean and variance: those of its own rows for runs that began after the
        start (the posterior's, less the prior's pull towards its mean and rate, which
        would keep a constant sensor's variance away from 0, and its mean off, for long),
        the posterior's for the long-run bucket (seeded with the reference)."""
        p = self.prior[:, 0]
        n = float(s[KAPPA] - p[KAPPA])  # rows seen by the run (NaNs skipped)
        if 0 < r < self.max_run - 1 and n > 0:
            mean = (float(s[KAPPA] * s[MU]) - p[KAPPA] * p[MU]) / n
            pull = p[KAPPA] * n * (mean - p[MU]) ** 2 / (2.0 * (p[KAPPA] + n))
            return mean, max(0.0, 2.0 * (float(s[BETA]) - p[BETA] - pull) / n)
        return float(s[MU]), float(s[BETA] / s[ALPHA])

    def _young(self) -> bool:
        """Whether some group's most probable run is shorter than the long-run bucket
        (otherwise the regime is judged once at the end of the check, not per row)."""
        return bool((self.logp.argmax(axis=0) < self.max_run - 1).any())

    def _regime(self) -> Regime:
        """The most probable current regime, compared feature by feature with the regimes
        the reference holds (:meth:`_known_regimes`).

        A feature has left a known regime when its mean is more than ``SHIFT`` of that
        regime's standard deviations away and beyond 3 standard errors of the difference,
        or its variance is off by more than ``VAR_RATIO`` either way and beyond 2 standard
        errors of the log ratio (``sqrt(2 / rows)`` each side: short runs and stretches have
        noisy variances). A run younger than ``min_gap`` rows is not judged.
        ``since`` is where the most probable run began (the dated change near it, or
        where the current drift episode began).
        """
        judged = []  # (feature, start of its run, which known regimes it matches)
        for j, name in enumerate(self.reference.features):
            g = 0 if self.groups == 1 else j
            r = int(np.argmax(self.logp[:, g]))
            if (
                r < self.min_gap
                or np.exp(self.logp[: r + self.window + 1, g]).sum() < self.threshold
            ):
                continue  # too young, or not yet more probable than the longer runs
            judged.append((name, max(0, self.t - 1 - r), self._matches(j, r)))
        if not judged:
            return Regime()
        if self.groups == 1:  # one stretch (one time of day) must match every feature
            best = int(np.argmax(np.sum([m for _, _, m in judged], axis=0)))
            missed = [(name, start) for name, start, m in judged if not m[best]]
        else:
            missed = [(name, start) for name, start, m in judged if not m.any()]
        if not missed:
            return Regime()
        moved, starts = zip(*missed, strict=True)
        since = min(starts)
        dated = [start for _, start in self.changes if abs(start - since) <= self.window]
        if self.drifted.changed:
            since = self.drifted.since  # the episode began there; runs are truncated
        elif dated:
            since = dated[-1]  # the change as dated when it was found
        return Regime(True, since, tuple(moved))

    def _matches(self, j: int, r: int) -> np.ndarray:
        """Which known regimes feature ``j`` of the run of length ``r`` matches ``(K,)``."""
        k_mu, k_var = self.known[0][:, j], np.maximum(self.known[1][:, j], VAR_FLOOR)
        s = self.state[:, r, j]
        mean, var = self._moments(s, r)
        var = max(var, VAR_FLOOR)
        n = max(float(s[KAPPA] - self.prior[KAPPA, j]), 1.0)  # rows behind the estimate
        gap = np.abs(mean - k_mu)
        near = (gap <= SHIFT * np.sqrt(k_var)) | (gap <= 3 * np.sqrt(var / n + k_var / self.sizes))
        spread = (VAR_SE if self.cycle else 0.0) * np.sqrt(
            2 / max(n - 1, 1) + 2 / np.maximum(self.sizes - 1, 1)
        )
        alike = np.abs(np.log(var / k_var)) <= math.log(VAR_RATIO) + spread
        return near & alike & self._comparable(r)

    def _comparable(self, r: int) -> np.ndarray:
        """Which known regimes a run of ``r`` rows is compared with: segments and the whole
        reference always, stretches of half to twice its length, and the shortest ones for
        young runs (the long-run bucket is at least ``max_run`` rows long)."""
        if not self.cycle:
            return self.spans == 0
        n = 2 * self.max_run if r >= self.max_run - 1 else r
        return (self.spans == 0) | ((self.spans >= n / 2) & (self.spans <= max(2 * n, SPANS[0])))


@register_detector("bocpd_daily")
class DailyBocpdDetector(BocpdDetector):
    """``bocpd`` with ``cycle=True``: a live regime seen in any stretch of the reference (any
    time of the day it covers) is known, so a new day's normal cycle is no drift.

    Takes the options of :class:`BocpdDetector` (``cycle`` is fixed). Use it with a
    reference captured over at least one full cycle, in time order; on i.i.d. rows it calls
    shifts that resemble some time of day late (module docstring).
    """

    def __init__(self, **options) -> None:
        super().__init__(**{**options, "cycle": True})
