"""The slow-drift arm of ``bocpd``: a mean CUSUM that sees a sustained ramp early.

``bocpd`` calls drift once the most probable regime is one the reference does not hold;
a slow ramp becomes such a regime late, because a regime's mean must move ``SHIFT``
reference standard deviations and the long-run statistics follow the ramp. The arm
accumulates the small steps instead: two one-sided CUSUMs per feature (mean up, mean
down) on the rows' normal scores (``u = z - mean``, in reference standard deviations), with
an allowance and a threshold ``h`` for an expected ``ert`` rows between false alarms of the
whole arm (Siegmund's approximation of a CUSUM's average run length, split over the ``2 F``
statistics).

Level: after every (re)start the arm first learns ``min_rows`` rows. A feature whose learned
mean lies within ``REF_SE`` standard errors of the reference's is watched against the
reference's mean (precise: allowance ``k + REF_SE / sqrt(n)`` for ``n`` reference rows,
+ 0.06 at 5,000 rows); one that starts elsewhere (a known regime such as the night, whose
level is not the whole reference's) is watched against its learned level, with allowance
``k + REF_SE / sqrt(min_rows)``: only a large further move counts.

CUSUM run lengths hold only for serially independent rows: on a smooth sensor stream
(a trend, a random walk, a slow daily swing) the same sums climb within tens of rows.
The arm therefore watches its own evidence: the lag-1 autocorrelation of each feature's
scores since it (re)started, about their running mean; a feature signals only while that
autocorrelation is at most ``max_rho``. A level shift also raises it (the rows before and
after it differ), so such a change is left to ``bocpd`` itself, which dates it; the arm
restarts at every change ``bocpd`` is confident of. See docs/BENCHMARKS.md for what it buys
on the scenario streams.
"""

from __future__ import annotations

import math

import numpy as np

SIEGMUND_OFFSET = 1.166  # Siegmund's correction for a CUSUM's overshoot (unit variance)
REF_SE = 4.0  # standard errors of a baseline mean added to the allowance
CLIP = 3.0  # standardised residuals are clipped to +-CLIP before they enter the sums
SPREAD_FLOOR = 0.25  # learned standard deviation floor (reference sds): a constant start


def cusum_threshold(k: float, arl: float) -> float:
    """The CUSUM threshold ``h`` whose average run length on N(0, 1) rows is ``arl``.

    Siegmund's approximation ``ARL(h) = (exp(2 k b) - 2 k b - 1) / (2 k^2)`` with
    ``b = h + 1.166``, solved by bisection (it grows monotonically in ``h``).

    Raises
    ------
    ValueError
        For ``k <= 0`` or ``arl <= 1``.
    """
    if k <= 0 or arl <= 1:
        raise ValueError(f"cusum_threshold needs k > 0 and arl > 1, got k={k}, arl={arl}")
    lo, hi = 0.0, 1.0
    while _arl(k, hi) < arl:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _arl(k, mid) < arl else (lo, mid)
    return hi


def _arl(k: float, h: float) -> float:
    b = 2.0 * k * (h + SIEGMUND_OFFSET)
    return (math.exp(b) - b - 1.0) / (2.0 * k * k)


class RampArm:
    """Mean-up and mean-down CUSUMs per feature, gated on serial independence.

    Parameters
    ----------
    k : float
        Allowance, in reference standard deviations (half the mean shift detected fastest).
    ert : float
        Expected rows between false alarms of the arm (all features) on independent rows.
    min_rows : int
        Rows learned after every (re)start before the statistics run (module docstring).
    max_rho : float
        Largest lag-1 autocorrelation of the crossing feature's scores that still lets
        it signal (module docstring).

    Raises
    ------
    ValueError
        For ``k <= 0``, ``ert <= 1``, ``min_rows < 3`` or ``max_rho`` outside ``[0, 1)``.
    """

    def __init__(
        self, k: float = 0.1, ert: float = 10_000.0, min_rows: int = 50, max_rho: float = 0.3
    ) -> None:
        if k <= 0 or ert <= 1 or min_rows < 3 or not 0.0 <= max_rho < 1.0:
            raise ValueError("ramp arm needs k > 0, ert > 1, min_rows >= 3 and 0 <= max_rho < 1")
        self.k, self.ert, self.min_rows, self.max_rho = k, ert, min_rows, max_rho

    def fit(self, z: np.ndarray) -> RampArm:
        """Learn the reference regime from its normal scores ``z`` ``(n, F)``."""
        with np.errstate(invalid="ignore"):
            self.mean = np.nan_to_num(np.nanmean(z, axis=0))
            sd = np.nan_to_num(np.nanstd(z, axis=0))
        self.sd = np.where(sd > 0, sd, 1.0)
        rows = max(int(np.isfinite(z).all(axis=1).sum()), 1)
        arl = self.ert * 2 * z.shape[1]
        # (allowance, threshold) against the reference's mean and against a learned level
        self.against_reference = self._design(self.k + REF_SE / math.sqrt(rows), arl)
        self.against_learned = self._design(self.k + REF_SE / math.sqrt(self.min_rows), arl)
        self.reset(0)
        return self

    @staticmethod
    def _design(allowance: float, arl: float) -> tuple[float, float]:
        return allowance, cusum_threshold(allowance, arl)

    def reset(self, t: int) -> None:
        """Restart at stream row ``t`` (the next row consumed): the next ``min_rows`` rows
        are learned (module docstring), then every statistic starts from zero."""
        f = len(self.mean)
        self.up, self.down = np.zeros(f), np.zeros(f)
        self.up_from, self.down_from = np.full(f, t), np.full(f, t)
        self.sums = np.zeros((4, f))  # rows, sum, sum of squares, sum of lag-1 products
        self.last = np.full(f, np.nan)
        self.level, self.spread = np.zeros(f), np.ones(f)
        self.allowance, self.h = np.zeros(f), np.full(f, np.inf)

    def _settle(self, learned: np.ndarray) -> None:
        """Features ``learned`` just finished learning: their level is the reference's when
        the learned mean is within ``REF_SE`` standard errors of it, else the learned one
        (with the learned spread: scores off the reference's centre are not unit-variance)."""
        n = np.maximum(self.sums[0], 1.0)
        mean = self.sums[1] / n
        sd = np.sqrt(np.maximum(self.sums[2] / n - mean * mean, 0.0))
        known = np.abs(mean) <= REF_SE / math.sqrt(self.min_rows)
        for design, pick in ((self.against_reference, known), (self.against_learned, ~known)):
            sel = learned & pick
            self.allowance[sel], self.h[sel] = design
        self.level = np.where(learned & ~known, mean, self.level)
        self.spread = np.where(learned & ~known, np.maximum(sd, SPREAD_FLOOR), self.spread)

    def step(self, z: np.ndarray, t: int) -> tuple[np.ndarray, int] | None:
        """Consume the normal scores ``z`` ``(F,)`` of stream row ``t``; on a signal, the
        features that crossed ``(F,)`` (bool) and the row where their drift began (where
        the earliest crossing statistic last left zero); else None."""
        u = (z - self.mean) / self.sd
        ok = np.isfinite(u)
        u = np.where(ok, u, 0.0)
        pair = ok & np.isfinite(self.last)
        self.sums += np.array([ok, u, u * u, np.where(pair, u * self.last, 0.0)])
        self.last = np.where(ok, u, np.nan)
        watching = np.isfinite(self.h)
        self._settle(~watching & (self.sums[0] >= self.min_rows))
        # Winsorised: one row far past the reference's range (linear tail scores) is an
        # outlier for the quality checks, not a slow drift.
        d = np.clip(np.where(watching & ok, (u - self.level) / self.spread, 0.0), -CLIP, CLIP)
        self.up = np.where(watching, np.maximum(0.0, self.up + d - self.allowance), 0.0)
        self.down = np.where(watching, np.maximum(0.0, self.down - d - self.allowance), 0.0)
        self.up_from = np.where(self.up == 0.0, t + 1, self.up_from)
        self.down_from = np.where(self.down == 0.0, t + 1, self.down_from)
        crossed = (np.maximum(self.up, self.down) > self.h) & (self.rho() <= self.max_rho)
        if not crossed.any():
            return None
        starts = np.where(self.up > self.h, self.up_from, self.down_from)
        return crossed, int(starts[crossed].min())

    def rho(self) -> np.ndarray:
        """Lag-1 autocorrelation per feature of the scores since the last restart."""
        n, s, ss, lag = self.sums
        n = np.maximum(n, 1.0)
        mean = s / n
        var = ss / n - mean * mean
        cov = lag / np.maximum(n - 1.0, 1.0) - mean * mean
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(var > 1e-12, cov / var, 0.0)
        return np.clip(r, 0.0, 1.0)
