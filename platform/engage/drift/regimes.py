"""Regimes of a change-point detector: learned from rows, compared, and sized.

After a confirmed change, a detector that keeps regimes (``cusum``) learns the new regime
from the rows that follow the alarm and re-baselines on it, so a lasting shift is one
change, not an alarm every few rows. Regimes are compared in the reference's own units: the
mean and the log standard deviation of each feature's normal scores (standardised through
the reference; the reference regime is mean 0, log sd 0). Two regimes differ in a feature
when either moves past a bound: the larger of the detector's design size (half the mean
shift it is tuned to; half the log of its variance ratio) and 3.5 standard errors of an
estimate from the rows learned, so that a regime learned from a few rows does not differ
from its own noise. The *effect* of a feature is that movement in units of its bound: 1.0
is the smallest change called a new regime, and it grows with the size of the shift (it
saturates beyond the reference's range, where normal scores stop growing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

_SD_FLOOR = 0.05  # a constant feature (a stuck sensor) has log sd log(0.05), not -inf
_SE = 3.5  # standard errors of a learned estimate a move must pass (0.6 % false per regime)


@dataclass(frozen=True)
class Learned:
    """A regime as per-feature mean and log standard deviation of reference normal scores."""

    mean: np.ndarray
    log_sd: np.ndarray

    @classmethod
    def reference(cls, n_features: int) -> Learned:
        """The reference regime itself (scores are standardised on it)."""
        return cls(np.zeros(n_features), np.zeros(n_features))

    @classmethod
    def of(cls, z: np.ndarray) -> Learned:
        """The regime of rows ``z`` ``(n, F)``, already in reference normal scores."""
        return cls(z.mean(axis=0), np.log(np.maximum(z.std(axis=0), _SD_FLOOR)))


@dataclass(frozen=True)
class Bounds:
    """How far a regime must move, per feature, to be a different regime.

    Parameters
    ----------
    mean : float
        Bound on the mean's move, in reference standard deviations.
    log_sd : float
        Bound on the log standard deviation's move.
    """

    mean: float
    log_sd: float

    @classmethod
    def of(cls, k: float, scale: float, rows: int) -> Bounds:
        """Bounds of a detector tuned to mean shift ``2 k`` and sd ratio ``scale``, learning
        regimes from ``rows`` rows (see the module docstring)."""
        return cls(
            max(k, _SE / math.sqrt(rows)), max(math.log(scale) / 2, _SE / math.sqrt(2 * rows))
        )

    def effect(self, regime: Learned, baseline: Learned) -> tuple[np.ndarray, list[str]]:
        """Per feature: the move from ``baseline`` to ``regime`` in units of the bound, and
        its kind (``mean_up``, ``mean_down``, ``var_up``, ``var_down``), the larger part."""
        dm = regime.mean - baseline.mean
        ds = regime.log_sd - baseline.log_sd
        em, es = np.abs(dm) / self.mean, np.abs(ds) / self.log_sd
        kinds = [
            ("mean_up" if m > 0 else "mean_down") if a >= b else ("var_up" if s > 0 else "var_down")
            for m, s, a, b in zip(dm, ds, em, es, strict=True)
        ]
        return np.maximum(em, es), kinds


def heavily_tied(rows: np.ndarray, share: float = 0.2) -> np.ndarray:
    """Features ``(F,)`` where one value holds more than ``share`` of ``rows`` ``(n, F)``.

    Their normal scores through these rows cluster on a few values, so a "variance down"
    statistic on them would climb for ever: it is not watched in such a regime.
    """
    out = np.zeros(rows.shape[1], dtype=bool)
    for j in range(rows.shape[1]):
        _, counts = np.unique(rows[:, j], return_counts=True)
        out[j] = counts.max() > share * len(rows)
    return out


@dataclass
class Pending:
    """A change the CUSUM found, whose new regime is being learned.

    Attributes
    ----------
    start : int
        Estimated change point (stream row): where the crossing statistic last left zero.
    signalled : dict or None
        What the alarm signalled: feature -> the kinds of statistic that crossed (a change
        away from the reference regime is signalled at once); None for a change found
        inside a changed regime, signalled only once learned and confirmed.
    restart : int
        Stream row from which the CUSUMs last restarted while this regime is learned.
    rows : list of numpy.ndarray
        The raw rows learned so far.
    """

    start: int
    signalled: dict[str, set[str]] | None
    restart: int
    rows: list[np.ndarray] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Rows learned so far."""
        return sum(len(r) for r in self.rows)
