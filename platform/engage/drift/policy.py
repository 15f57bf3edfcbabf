"""Results to decisions to alerts: the only place where a drift result becomes an alert.

:class:`DriftPolicy` turns the results of one check (several detectors, same data) into a
:class:`DriftDecision`. A result with ``error`` set (an exception, a NaN p-value) becomes an
``error`` decision, never "no drift" (alibi-detect #221). A result of a detector that keeps
regimes (``result.regime``) drifts while its regime is changed, and dates the change.

:class:`AlertLatch` is the hysteresis of one alert, written once for every alert the live
watcher raises (input drift, prediction shift, failed checks): it fires on the first
alerting decision (and again when the set of features grows), and resolves after
``clear_after`` clean decisions in a row, or at the first clean one when every detector
keeps regimes (their "no drift" is a state: the stream is back in the reference regime),
or when the user renews the reference. Both are pure: testable without Ray or MLflow; the
caller turns a transition into an event on the one report path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engage.drift.base import DriftResult

Severity = Literal["none", "warning", "critical", "error"]
_RANK = {"none": 0, "warning": 1, "critical": 2, "error": 3}
CLEAR_AFTER_CHECKS = 3
"""Clean checks in a row that resolve an alert of detectors without regimes: online
detectors that restart after an alarm show a clean check in the middle of a drift."""


@dataclass(frozen=True)
class DriftDecision:
    """What to do about a set of results: alert or not, how bad, which features, why.

    Attributes
    ----------
    alert : bool
        Raise (or keep) an alert.
    severity : {"none", "warning", "critical", "error"}
        How bad; ``error``: no verdict (a detector failed).
    features : tuple of str
        The drifting features.
    reason : str
        One line for the alert summary.
    since : int or None
        Stream row where the earliest changed regime among the results began (detectors
        that keep regimes only); None when none says.
    settled : bool
        Every result came from a detector that keeps regimes, so "no drift" means the
        stream is in the reference regime now, not merely that no alarm fell in this check.
    """

    alert: bool
    severity: Severity
    features: tuple[str, ...]
    reason: str
    since: int | None = None
    settled: bool = False

    @property
    def is_error(self) -> bool:
        """True when the decision has no verdict (a detector failed)."""
        return self.severity == "error"


def drifting(result: DriftResult) -> bool:
    """Whether ``result`` says drift: its verdict, or a changed regime it is still in."""
    return result.is_drift or (result.regime is not None and result.regime.changed)


def drifting_features(result: DriftResult) -> tuple[str, ...]:
    """The features ``result`` calls drifting, its regime's included."""
    regime = result.regime.features if result.regime is not None else ()
    return tuple(sorted(set(result.drifted_features) | set(regime)))


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

    Raises
    ------
    ValueError
        If ``min_detectors`` is below 1.
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
        if not results:
            return DriftDecision(True, "error", (), "no detector ran: nothing was checked")
        settled = all(r.regime is not None for r in results)
        drifted = [r for r in results if drifting(r)]
        if len(drifted) < self.min_detectors:
            return DriftDecision(False, "none", (), _summary(results, drifted), settled=settled)
        features = tuple(sorted({f for r in drifted for f in drifting_features(r)}))
        quality = any(r.detector in self.quality_detectors for r in drifted)
        share = len(features) / n_features if n_features else 0.0
        severity: Severity = "critical" if quality or share >= self.critical_share else "warning"
        starts = [r.regime.since for r in drifted if r.regime is not None and r.regime.changed]
        since = min((s for s in starts if s is not None), default=None)
        reason = _summary(results, drifted)
        return DriftDecision(True, severity, features, reason, since, settled)


def _summary(results: Sequence[DriftResult], drifted: Sequence[DriftResult]) -> str:
    if not drifted:
        return f"no drift: {len(results)} detector(s) checked"
    parts = []
    for r in drifted:
        features = drifting_features(r)
        where = f" in {', '.join(features)}" if features else ""
        p = f", p={r.p_value:.3g}" if r.p_value is not None else ""
        parts.append(f"{r.detector}{where} (statistic {r.statistic:.3g}{p})")
    return "drift: " + "; ".join(parts)


def worst(decisions: Sequence[DriftDecision]) -> DriftDecision:
    """The most severe of several decisions (for a report over many windows)."""
    return max(decisions, key=lambda d: _RANK[d.severity])


@dataclass(frozen=True)
class Transition:
    """An alert changed state: it fired (or its features grew) or it resolved.

    Attributes
    ----------
    state : {"firing", "resolved"}
        The alert's new state.
    features : tuple of str
        The features of the alert (for a resolved one: those it had).
    since : float or None
        When the episode began, as the caller dated it at the first firing.
    clean : int
        Clean decisions in a row that resolved it (0 when it fired or was renewed).
    returned : bool
        Resolved because the detectors say the stream is back in the reference regime.
    """

    state: Literal["firing", "resolved"]
    features: tuple[str, ...]
    since: float | None = None
    clean: int = 0
    returned: bool = False


@dataclass
class AlertLatch:
    """The hysteresis of one alert (see the module docstring); one per alert and subject.

    Parameters
    ----------
    clear_after : int
        Clean decisions in a row that resolve an alert whose decisions are not settled.
    """

    clear_after: int = CLEAR_AFTER_CHECKS
    firing: bool = False
    features: tuple[str, ...] = ()
    since: float | None = None
    clean: int = 0

    def update(
        self,
        alert: bool,
        features: Sequence[str] = (),
        *,
        settled: bool = False,
        since: float | None = None,
    ) -> Transition | None:
        """Feed one verdict; returns the transition it causes, or None.

        Parameters
        ----------
        alert : bool
            The verdict of this check (a decision's ``alert``; never call it with an
            error decision: no verdict leaves the state as it was).
        features : sequence of str
            The features the verdict names; a firing alert re-fires when they grow.
        settled : bool
            A clean verdict is a state (resolve now), not a missing alarm.
        since : float or None
            When the episode began, kept from the first firing verdict.
        """
        if alert:
            self.clean = 0
            grown = tuple(sorted(set(self.features) | set(features)))
            if self.firing and grown == self.features:
                return None
            if not self.firing:
                self.since = since
            self.firing, self.features = True, grown
            return Transition("firing", grown, self.since)
        if not self.firing:
            return None
        self.clean += 1
        if not settled and self.clean < self.clear_after:
            return None
        return self._resolve(self.clean, returned=settled)

    def renew(self) -> Transition | None:
        """The user renewed the reference: a firing alert resolves now."""
        return self._resolve(0, returned=False) if self.firing else None

    def _resolve(self, clean: int, returned: bool) -> Transition:
        done = Transition("resolved", self.features, self.since, clean, returned)
        self.firing, self.features, self.since, self.clean = False, (), None, 0
        return done
