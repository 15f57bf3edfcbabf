"""Results to decisions: the only place where a drift result becomes an alert (or not).

A result with ``error`` set (an exception, a NaN p-value) becomes an ``error`` decision,
never "no drift" (alibi-detect #221). The policy is pure: testable without Ray or MLflow;
the caller turns an alerting decision into an event on the one report path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engage.drift.base import DriftResult

Severity = Literal["none", "warning", "critical", "error"]
_RANK = {"none": 0, "warning": 1, "critical": 2, "error": 3}


@dataclass(frozen=True)
class DriftDecision:
    """What to do about a set of results: alert or not, how bad, which features, why."""

    alert: bool
    severity: Severity
    features: tuple[str, ...]
    reason: str

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


@dataclass(frozen=True)
class DriftPolicy:
    """Alert when at least ``min_detectors`` detectors report drift.

    Parameters
    ----------
    min_detectors : int
        Detectors that must agree before a drift alert (an error alerts on its own).
    critical_share : float
        Share of features drifting (or any quality failure) that makes it critical.
    quality_detectors : tuple of str
        Detectors whose findings are data-quality failures: always critical.
    """

    min_detectors: int = 1
    critical_share: float = 0.5
    quality_detectors: tuple[str, ...] = ("quality",)

    def __post_init__(self) -> None:
        if self.min_detectors < 1:
            raise ValueError(f"min_detectors must be at least 1, got {self.min_detectors}")

    def decide(self, results: Sequence[DriftResult], n_features: int = 0) -> DriftDecision:
        """One decision for the results of one check (several detectors, same data)."""
        errors = [r for r in results if r.error is not None]
        if errors:
            why = "; ".join(f"{r.detector}: {r.error}" for r in errors)
            return DriftDecision(True, "error", (), f"detector error, no verdict: {why}")
        drifting = [r for r in results if r.is_drift]
        if not results:
            return DriftDecision(True, "error", (), "no detector ran: nothing was checked")
        if len(drifting) < self.min_detectors:
            return DriftDecision(False, "none", (), _summary(results, drifting))
        features = tuple(sorted({f for r in drifting for f in r.drifted_features}))
        quality = any(r.detector in self.quality_detectors for r in drifting)
        share = len(features) / n_features if n_features else 0.0
        severity: Severity = "critical" if quality or share >= self.critical_share else "warning"
        return DriftDecision(True, severity, features, _summary(results, drifting))


def _summary(results: Sequence[DriftResult], drifting: Sequence[DriftResult]) -> str:
    if not drifting:
        return f"no drift: {len(results)} detector(s) checked"
    parts = []
    for r in drifting:
        where = f" in {', '.join(r.drifted_features)}" if r.drifted_features else ""
        p = f", p={r.p_value:.3g}" if r.p_value is not None else ""
        parts.append(f"{r.detector}{where} (statistic {r.statistic:.3g}{p})")
    return "drift: " + "; ".join(parts)


def worst(decisions: Sequence[DriftDecision]) -> DriftDecision:
    """The most severe of several decisions (for a report over many windows)."""
    return max(decisions, key=lambda d: _RANK[d.severity])
