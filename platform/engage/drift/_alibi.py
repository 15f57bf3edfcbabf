"""alibi-detect detectors behind engage's interface. The ONLY module that imports alibi_detect.

alibi-detect is under the Business Source License: keeping it to this one module lets a
user who cannot accept that licence run engage without it (``cusum`` and ``quality`` are
built in). Importing this module only registers the detectors; alibi-detect itself (about
10 s to import) is imported when one of them is fitted, so listing the names costs nothing.

Batch: ``ks`` and ``cvm`` (one test per feature, Bonferroni or Benjamini-Hochberg FDR
correction computed here so per-feature verdicts match the overall one) and ``mmd``
(multivariate, pytorch backend, permutation p-value). Online: ``mmd_online``,
``lsdd_online`` and ``cvm_online``, configured by ERT and window size; configuring
simulates streams and takes seconds to a minute: do it once per model version.
Multivariate tests see features standardised by the reference mean and std.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, register_detector
from engage.drift.reference import Reference


def corrected(p: np.ndarray, method: str) -> np.ndarray:
    """Adjusted p-values: ``bonferroni`` (p * m) or ``fdr`` (Benjamini-Hochberg)."""
    p = np.asarray(p, dtype=np.float64)
    m = len(p)
    if method == "bonferroni":
        return np.minimum(p * m, 1.0)
    if method != "fdr":
        raise ValueError(f"correction must be 'bonferroni' or 'fdr', got {method!r}")
    order = np.argsort(p)
    adj = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """alibi draws its bootstraps from the global numpy and torch generators: seed them
    for the configuration only, and put both back afterwards."""
    import torch

    state = np.random.get_state()
    with torch.random.fork_rng():
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            np.random.set_state(state)


def _sample(rows: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    if len(rows) <= n:
        return rows
    return rows[np.sort(np.random.default_rng(seed).choice(len(rows), n, replace=False))]


class _FeatureTest(DriftDetector):
    """KS or CVM per feature with multiple-testing correction."""

    default_threshold = 0.05
    threshold_meaning = "family-wise (bonferroni) or false-discovery (fdr) level"

    def __init__(
        self, p_val: float = default_threshold, correction: str = "bonferroni", n_ref: int = 2000
    ) -> None:
        super().__init__()
        corrected(np.ones(1), correction)  # validates the name now
        self.p_val, self.correction, self.n_ref = p_val, correction, n_ref

    def _fit(self, reference: Reference) -> None:
        ref = _sample(reference.rows, self.n_ref).astype(np.float32)
        self.cd = self._make(ref)

    def _check(self, x: np.ndarray) -> DriftResult:
        data = self.cd.predict(x.astype(np.float32))["data"]
        raw = np.asarray(data["p_val"], dtype=np.float64)
        dist = np.asarray(data["distance"], dtype=np.float64)
        adj = corrected(raw, self.correction) if np.isfinite(raw).all() else raw
        feats = tuple(
            FeatureDrift(f, float(dist[j]), float(adj[j]), self.p_val, bool(adj[j] < self.p_val))
            for j, f in enumerate(self.reference.features)
        )
        worst = int(np.argmin(adj)) if np.isfinite(adj).all() else 0
        return DriftResult(
            self.name,
            float(dist[worst]),
            self.p_val,
            float(adj.min()) if np.isfinite(adj).all() else float("nan"),
            any(f.is_drift for f in feats),
            feats,
            len(x),
            extra={"correction": self.correction},
        )


@register_detector("ks")
class KSDetector(_FeatureTest):
    """Two-sample Kolmogorov-Smirnov test per feature (alibi-detect KSDrift)."""

    def _make(self, ref: np.ndarray):
        from alibi_detect.cd import KSDrift

        return KSDrift(ref, p_val=self.p_val, correction=self.correction)


@register_detector("cvm")
class CVMDetector(_FeatureTest):
    """Two-sample Cramér-von Mises test per feature (alibi-detect CVMDrift)."""

    def _make(self, ref: np.ndarray):
        from alibi_detect.cd import CVMDrift

        return CVMDrift(ref, p_val=self.p_val, correction=self.correction)


@register_detector("mmd")
class MMDDetector(DriftDetector):
    """Multivariate maximum mean discrepancy, permutation p-value (MMDDrift, pytorch)."""

    default_threshold = 0.05
    threshold_meaning = "p-value level of the permutation test"

    def __init__(
        self, p_val: float = default_threshold, n_permutations: int = 100, n_ref: int = 1000
    ) -> None:
        super().__init__()
        self.p_val, self.n_permutations, self.n_ref = p_val, n_permutations, n_ref

    def _fit(self, reference: Reference) -> None:
        from alibi_detect.cd import MMDDrift

        self.mean, self.std = reference.mean, reference.std
        ref = self._z(_sample(reference.rows, self.n_ref))
        self.cd = MMDDrift(
            ref,
            backend="pytorch",
            p_val=self.p_val,
            n_permutations=self.n_permutations,
            device="cpu",
        )

    def _z(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)

    def _check(self, x: np.ndarray) -> DriftResult:
        data = self.cd.predict(self._z(x))["data"]
        return DriftResult(
            self.name,
            float(data["distance"]),
            self.p_val,
            float(data["p_val"]),
            bool(data["is_drift"]),
            (),
            len(x),
            extra={"distance_threshold": float(data["distance_threshold"])},
        )


class _Online(DriftDetector):
    """An alibi online detector fed row by row; it restarts after each alarm.

    It alarms when its statistic exceeds ``threshold_scale`` times alibi's threshold for
    the ERT (1.0: alibi's own verdict). alibi's bootstrap thresholds can miss the ERT they
    are configured for; a scale measured on held-out no-drift rows corrects that.
    """

    kind = "online"
    default_threshold = 10_000.0
    threshold_meaning = "ERT: expected rows between false alarms"

    def __init__(
        self,
        ert: float = default_threshold,
        window_size: int = 20,
        n_bootstraps: int | None = None,
        n_ref: int = 500,
        seed: int = 0,
        threshold_scale: float = 1.0,
    ) -> None:
        super().__init__()
        if threshold_scale <= 0:
            raise ValueError(f"threshold_scale must be positive, got {threshold_scale}")
        self.ert, self.window_size, self.n_ref, self.seed = ert, window_size, n_ref, seed
        self.threshold_scale = threshold_scale
        # alibi warns below 10 * ERT bootstraps; capped so configuring stays in seconds.
        self.n_bootstraps = n_bootstraps or int(min(max(10 * ert, 1000), 20_000))

    def _fit(self, reference: Reference) -> None:
        self.mean, self.std = reference.mean, reference.std
        with _seeded(self.seed):
            self.cd = self._make(self._z(_sample(reference.rows, self.n_ref, self.seed)))

    def _z(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)

    def reset(self) -> None:
        if hasattr(self, "cd"):
            self.cd.reset_state()

    def _check(self, x: np.ndarray) -> DriftResult:
        alarms, peak, threshold = [], -np.inf, np.nan
        for i, row in enumerate(self._z(x)):
            data = self.cd.predict(row, return_test_stat=True)["data"]
            ratio, thr = self.ratio(data)
            if np.isfinite(ratio):
                peak, threshold = max(peak, ratio / self.threshold_scale), thr
            scaled = self.threshold_scale != 1.0
            if ratio > self.threshold_scale if scaled else data["is_drift"]:
                alarms.append(i)
                self.cd.reset_state()
        # Before the first window fills there is no statistic: report 0, not NaN.
        return DriftResult(
            self.name,
            float(peak) if np.isfinite(peak) else 0.0,
            1.0,
            None,
            bool(alarms),
            (),
            len(x),
            alarms[0] if alarms else None,
            extra={"alarms": alarms, "ert": self.ert, "raw_threshold": float(threshold)},
        )

    def ratio(self, data: dict) -> tuple[float, float]:
        """(statistic / alibi's threshold, that threshold) of one ``predict``; NaN before
        the statistic exists. Alarms are ratios above ``threshold_scale``."""
        stat, thr = self._score(data)
        if not (np.isfinite(stat) and np.isfinite(thr)):
            return float("nan"), thr
        return (stat / thr if thr > 0 else stat), thr

    def _score(self, data: dict) -> tuple[float, float]:
        return float(data["test_stat"]), float(data["threshold"])


class _TorchOnline(_Online):
    """An alibi online detector on the pytorch backend, named by ``alibi_class``."""

    alibi_class: str

    def _make(self, ref: np.ndarray):
        import alibi_detect.cd

        return getattr(alibi_detect.cd, self.alibi_class)(
            ref,
            ert=self.ert,
            window_size=self.window_size,
            backend="pytorch",
            n_bootstraps=self.n_bootstraps,
            device="cpu",
            verbose=False,
        )


@register_detector("mmd_online")
class MMDOnlineDetector(_TorchOnline):
    """Online MMD over a sliding window (MMDDriftOnline, pytorch), configured by ERT."""

    alibi_class = "MMDDriftOnline"


@register_detector("lsdd_online")
class LSDDOnlineDetector(_TorchOnline):
    """Online least-squares density difference (LSDDDriftOnline, pytorch), by ERT."""

    alibi_class = "LSDDDriftOnline"


@register_detector("cvm_online")
class CVMOnlineDetector(_Online):
    """Online Cramér-von Mises per feature (CVMDriftOnline), configured by ERT."""

    def _make(self, ref: np.ndarray):
        from alibi_detect.cd import CVMDriftOnline

        return CVMDriftOnline(
            ref,
            ert=self.ert,
            window_sizes=[self.window_size],
            n_bootstraps=self.n_bootstraps,
            verbose=False,
        )

    def _score(self, data: dict) -> tuple[float, float]:
        stat, thr = np.asarray(data["test_stat"]), np.asarray(data["threshold"])
        if stat.size == 0 or thr.size == 0:
            return float("nan"), float("nan")
        return float(np.max(stat / thr.reshape(-1, 1))), 1.0
