"""Batch comparison for time series: a KS test on effective sample sizes, with an effect size.

Rows of a sensor table are autocorrelated: a plain two-sample KS test on thousands of them
treats every row as independent evidence and finds a "significant" difference between any
two slices of the same process. ``ks_ess`` keeps the KS distance ``D`` (the largest gap
between the two empirical CDFs) but takes its p-value at the *effective* sample sizes
``n / tau`` (``tau``: each sample's integrated autocorrelation time, see
:func:`effective_size`), and it asks for an effect:

a feature drifts when its corrected p-value is below ``p_val`` **and** ``D >= min_effect``.

``min_effect`` defaults to 0.25: a quarter of one sample lies beyond where the other
sample's CDF would put it (a mean shift of about 0.65 standard deviations between two
normals). Smaller gaps between slices of one process (daily cycles sampled unevenly) are
reported, not alarmed. The p-values are Bonferroni-corrected over the features.
"""

from __future__ import annotations

import numpy as np

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, register_detector
from engage.drift.reference import Reference


def effective_size(values: np.ndarray, max_lag: int = 1000) -> float:
    """Effective sample size ``n / tau`` with ``tau = 1 + 2 * sum(rho_k)`` (integrated
    autocorrelation time), the sum stopped at the first lag pair with a negative sum
    (Geyer's initial positive sequence), so a daily cycle is not counted as dependence
    that never ends. NaNs are dropped; a constant series counts every row."""
    v = values[np.isfinite(values)]
    n = len(v)
    if n < 4 or np.ptp(v) == 0:
        return float(n)
    d = v - v.mean()
    size = 1 << int(np.ceil(np.log2(2 * n)))
    spec = np.fft.rfft(d, size)
    acf = np.fft.irfft(spec * np.conj(spec), size)[: min(n // 2, max_lag)]
    rho = acf / acf[0]
    pairs = rho[1:-1:2] + rho[2::2] if len(rho) > 2 else np.empty(0)
    stop = np.flatnonzero(pairs < 0)
    upto = int(stop[0]) if len(stop) else len(pairs)
    tau = max(1.0, 1.0 + 2.0 * float(pairs[:upto].sum()))
    return n / tau


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample KS distance: largest absolute gap between the empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    gap = np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)
    return float(np.abs(gap).max())


def ks_ess_pvalue(d: float, n_a: float, n_b: float) -> float:
    """P-value of KS distance ``d`` at effective sizes ``n_a`` and ``n_b`` (asymptotic)."""
    from scipy.stats import kstwo  # here: scipy.stats costs every engage command ~1 CPU-s

    n = max(1.0, n_a * n_b / (n_a + n_b))
    return float(kstwo.sf(d, max(1, round(n))))


@register_detector("ks_ess")
class EffectiveSizeKS(DriftDetector):
    """Per-feature KS at effective sample sizes, with a KS-distance effect threshold.

    Parameters
    ----------
    p_val : float
        Level of each test after the Bonferroni correction over features.
    min_effect : float
        Smallest KS distance that counts as drift (module docstring).
    """

    kind = "batch"
    default_threshold = 0.05
    threshold_meaning = "p-value level (effective sample sizes, Bonferroni) and KS distance"

    def __init__(self, p_val: float = default_threshold, min_effect: float = 0.25, **_: object):
        super().__init__()
        if not 0.0 < p_val < 1.0 or not 0.0 < min_effect <= 1.0:
            raise ValueError("ks_ess needs 0 < p_val < 1 and 0 < min_effect <= 1")
        self.p_val, self.min_effect = p_val, min_effect

    def _fit(self, reference: Reference) -> None:
        rows = np.asarray(reference.rows, dtype=np.float64)
        self.ref_cols = [rows[:, j][np.isfinite(rows[:, j])] for j in range(rows.shape[1])]
        self.ref_ess = [effective_size(c) for c in self.ref_cols]

    def _check(self, x: np.ndarray) -> DriftResult:
        names, level = self.reference.features, self.p_val / max(1, len(self.reference.features))
        feats, smallest = [], 1.0
        for j, name in enumerate(names):
            cur = x[:, j][np.isfinite(x[:, j])]
            d = ks_distance(self.ref_cols[j], cur)
            p = min(1.0, ks_ess_pvalue(d, self.ref_ess[j], effective_size(cur)) * len(names))
            smallest = min(smallest, p)
            drift = p < self.p_val and d >= self.min_effect
            feats.append(FeatureDrift(name, d, p, self.min_effect, drift))
        return DriftResult(
            self.name,
            max(f.statistic for f in feats),
            self.min_effect,
            smallest,
            any(f.is_drift for f in feats),
            tuple(feats),
            len(x),
            extra={"level": level, "min_effect": self.min_effect},
        )
