"""Built-in sequential detectors (pure numpy/scipy, no alibi-detect): CUSUM.

``cusum`` watches every feature with four one-sided CUSUMs on standardised values z:
mean up (``z - k``), mean down (``-z - k``), variance up (``z**2 - c_up``) and variance
down (``c_down - z**2``), where ``k`` is half the mean shift to detect (in reference
standard deviations) and ``c`` the log-likelihood-ratio constants for a standard deviation
``scale`` times (or divided by) the reference's. Standardising is a normal-score
transform through the reference's empirical CDF, re-centred on the reference, so skewed
and rounded sensors (power, CO2) behave like N(0, 1) under no drift.

Thresholds from a target ERT (expected rows between false alarms), by simulation on the
reference: ``n_sims`` streams of ``sim_length`` rows are bootstrapped from the reference
(i.i.d., or moving blocks of ``block`` rows when the live stream is autocorrelated); for
each of the S statistics the run length is taken as exponential, so
``P(max over L rows <= h) = exp(-L / ARL(h))`` turns the simulated maxima into ARL(h) on
the observed range; ``log ARL`` is fitted linear in ``h`` (CUSUM run lengths grow
exponentially with ``h``) and solved for ``ERT * S``. False-alarm rates add across
statistics, so the detector as a whole has an ERT of about ``ert``. After an alarm every
statistic restarts from zero.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, register_detector
from engage.drift.reference import Reference

STATS = ("mean_up", "mean_down", "var_up", "var_down")


class NormalScore:
    """Raw values -> z through each feature's reference ECDF (mid-ranks), re-centred."""

    def __init__(self, rows: np.ndarray) -> None:
        self.sorted = np.sort(rows, axis=0)
        z = self._raw(rows)
        self.mean, self.std = z.mean(axis=0), z.std(axis=0)
        self.std[self.std == 0] = 1.0

    def _raw(self, x: np.ndarray) -> np.ndarray:
        n = len(self.sorted)
        u = np.empty(x.shape)
        for j in range(x.shape[1]):
            col = self.sorted[:, j]
            lo = np.searchsorted(col, x[:, j], "left")
            hi = np.searchsorted(col, x[:, j], "right")
            u[:, j] = (lo + hi) / 2.0
        return ndtri(np.clip(u, 0.5, n - 0.5) / n)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (self._raw(x) - self.mean) / self.std


def increments(z: np.ndarray, k: float, scale: float) -> np.ndarray:
    """The four CUSUM increments of z ``(..., n, F)`` as ``(..., n, F * 4)``."""
    s2 = scale**2
    c_up = 2 * math.log(scale) / (1 - 1 / s2)
    c_down = 2 * math.log(scale) / (s2 - 1)
    z2 = z * z
    parts = (z - k, -z - k, z2 - c_up, c_down - z2)
    return np.concatenate(parts, axis=-1)


def cusum_path(inc: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``S_t = max(0, S_{t-1} + inc_t)`` along axis -2 in closed form (Lindley)."""
    c = np.cumsum(inc, axis=-2)
    lowest = np.minimum.accumulate(c, axis=-2)
    return c + np.maximum(start[..., None, :], -lowest)


def calibrate(inc: np.ndarray, ert_each: float, length: int, floor: float = 1.0) -> np.ndarray:
    """Threshold per statistic for an ARL of ``ert_each`` from simulated increments.

    ``inc`` has shape ``(n_sims, length, S)``. See the module docstring for the method.
    """
    maxima = cusum_path(inc, np.zeros(inc.shape[::2])).max(axis=1)  # (n_sims, S)
    out = np.empty(inc.shape[-1])
    for s in range(inc.shape[-1]):
        m = np.sort(maxima[:, s])
        cdf = (np.arange(1, len(m) + 1) - 0.5) / len(m)
        keep = (cdf > 0.2) & (cdf < 0.97)
        h, arl = m[keep], -length / np.log(cdf[keep])
        if len(np.unique(h)) < 3:
            out[s] = max(m[-1], floor) * math.log(ert_each / length + math.e)
            continue
        slope, icpt = np.polyfit(h, np.log(arl), 1)
        target = (math.log(ert_each) - icpt) / max(slope, 1e-6)
        out[s] = max(target, m[-1] if ert_each > length * len(m) else 0.0, floor)
    return out


@register_detector("cusum")
class CusumDetector(DriftDetector):
    """Per-feature CUSUMs on mean and variance of normal scores; thresholds from an ERT.

    Parameters
    ----------
    ert : float
        Expected rows between false alarms on a stream like the reference.
    shift : float
        Mean shift to detect fastest, in reference standard deviations (``k = shift / 2``).
    scale : float
        Standard-deviation ratio to detect fastest (up and down).
    block : int or None
        Moving-block bootstrap block length for calibration (None: i.i.d. rows).
    n_sims, sim_length, seed : int
        Calibration simulation size and seed.
    threshold_scale : float
        Multiplies every calibrated threshold: an empirical correction when the false
        alarms measured on held-out no-drift rows differ from the ERT's (the benchmark
        uses it to compare detectors at one measured false-alarm rate).
    """

    kind = "online"
    default_threshold = 10_000.0
    threshold_meaning = "ERT: expected rows between false alarms"

    def __init__(
        self,
        ert: float = default_threshold,
        shift: float = 0.6,
        scale: float = 1.5,
        block: int | None = None,
        n_sims: int = 200,
        sim_length: int = 2000,
        seed: int = 0,
        threshold_scale: float = 1.0,
    ) -> None:
        super().__init__()
        if ert <= 1 or shift <= 0 or scale <= 1 or threshold_scale <= 0:
            raise ValueError("cusum needs ert > 1, shift > 0, scale > 1 and threshold_scale > 0")
        self.ert, self.k, self.scale, self.block = ert, shift / 2, scale, block
        self.n_sims, self.sim_length, self.seed = n_sims, sim_length, seed
        self.threshold_scale = threshold_scale

    def _fit(self, reference: Reference) -> None:
        rows = reference.rows.astype(np.float64)
        self.transform = NormalScore(rows)
        z = self.transform(rows)
        sims = _bootstrap(z, self.n_sims, self.sim_length, self.block, self.seed)
        inc = increments(sims, self.k, self.scale)
        self.h = calibrate(inc, self.ert * inc.shape[-1], self.sim_length)
        self.h = self.h * self.threshold_scale
        self.reset()

    def reset(self) -> None:
        if hasattr(self, "h"):
            self.state = np.zeros(len(self.h))

    def _check(self, x: np.ndarray) -> DriftResult:
        if not np.isfinite(x).all():
            raise ValueError("non-finite input values: run the quality check first")
        inc = increments(self.transform(x), self.k, self.scale)
        alarms, peak = [], np.zeros(len(self.h))
        at, state = 0, self.state
        while at < len(inc):
            path = cusum_path(inc[at:], state) / self.h  # (n, S), 1.0 = threshold
            over = np.flatnonzero((path >= 1.0).any(axis=1))
            if len(over) == 0:
                peak = np.maximum(peak, path.max(axis=0))
                state = path[-1] * self.h
                break
            hit = over[0]
            alarms.append(at + hit)
            peak = np.maximum(peak, path[hit])
            at, state = at + hit + 1, np.zeros_like(state)
        self.state = state
        return self._result(alarms, peak, len(x))

    def _result(self, alarms: list[int], peak: np.ndarray, n: int) -> DriftResult:
        names = self.reference.features
        per = peak.reshape(len(STATS), len(names))  # increments are concatenated by stat
        feats = tuple(
            FeatureDrift(f, float(per[:, j].max()), None, 1.0, bool(per[:, j].max() >= 1.0))
            for j, f in enumerate(names)
        )
        which = {f: STATS[int(per[:, j].argmax())] for j, f in enumerate(names)}
        return DriftResult(
            self.name,
            float(peak.max(initial=0.0)),
            1.0,
            None,
            bool(alarms),
            feats,
            n,
            alarms[0] if alarms else None,
            extra={"alarms": alarms, "statistic_kind": which, "ert": self.ert},
        )


def _bootstrap(z: np.ndarray, n_sims: int, length: int, block: int | None, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not block or block <= 1 or block >= len(z):
        return z[rng.integers(0, len(z), (n_sims, length))]
    n_blocks = -(-length // block)
    starts = rng.integers(0, len(z) - block + 1, (n_sims, n_blocks))
    idx = (starts[..., None] + np.arange(block)).reshape(n_sims, -1)[:, :length]
    return z[idx]


class ErrorCusum:
    """One-sided CUSUM on a stream of per-prediction errors (0/1 or absolute error).

    Calibrated like :class:`CusumDetector` by bootstrapping ``baseline`` (errors on the
    validation split at training time): alarms when the error rises by ``shift`` baseline
    standard deviations, with about ``ert`` labelled predictions between false alarms.
    """

    name = "error_cusum"

    def __init__(
        self, baseline: np.ndarray, ert: float = 10_000.0, shift: float = 0.5, seed: int = 0
    ) -> None:
        base = np.asarray(baseline, dtype=np.float64)
        self.mean, self.std = base.mean(), base.std() or 1.0
        self.k, self.ert = shift / 2, ert
        z = ((base - self.mean) / self.std)[:, None]
        sims = _bootstrap(z, 200, 2000, None, seed) - self.k
        self.h = float(calibrate(sims, ert, 2000)[0])
        self.state = np.zeros(1)

    def update(self, errors: np.ndarray) -> DriftResult:
        """Feed errors in order; ``alarm_index`` is the first alarm among them."""
        e = np.asarray(errors, dtype=np.float64)
        if not np.isfinite(e).all():
            return DriftResult.failed(self.name, "NaN or infinite prediction error", len(e))
        inc = ((e - self.mean) / self.std - self.k)[:, None]
        path = cusum_path(inc, self.state)[:, 0] / self.h
        over = np.flatnonzero(path >= 1.0)
        alarm = int(over[0]) if len(over) else None
        self.state = np.zeros(1) if alarm is not None else path[-1:] * self.h
        peak = float(path.max(initial=0.0))
        return DriftResult(self.name, peak, 1.0, None, alarm is not None, (), len(e), alarm)
