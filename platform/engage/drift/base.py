"""The drift extension point: one abstract detector, typed results, a registry by name.

A detector is fitted once on a :class:`~engage.drift.reference.Reference` (per
model version, off the request path) and then checks batches of rows. It returns a
:class:`DriftResult` and never alerts: :mod:`engage.drift.policy` decides. A
detector that raises, or whose p-value is NaN, yields ``DriftResult(error=...)``, which
the policy turns into an error decision, never into "no drift" (alibi-detect #221).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import numpy as np

from engage.drift.reference import Reference
from engage.registry import Registry

Kind = Literal["batch", "online"]


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's share of a result (a ``None`` field means "not computed by this test")."""

    feature: str
    statistic: float
    p_value: float | None = None
    threshold: float | None = None
    is_drift: bool = False


@dataclass(frozen=True)
class Regime:
    """Where a change-point detector believes the stream is after a check.

    A detector that keeps regimes signals each change once (``alarm_index`` and
    ``extra["alarms"]`` of the check where it found it) and from then on reports the regime
    it is in, until the stream returns to the reference or the detector is reset.

    Attributes
    ----------
    changed : bool
        False: the stream is in the reference regime (never left it, or returned).
    since : int or None
        Stream row (counted from ``fit`` or ``reset``) at which the current changed regime
        began: the estimated change point, not the row of the alarm. None when unchanged.
    features : tuple of str
        Features whose current regime differs from the reference.
    """

    changed: bool = False
    since: int | None = None
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriftResult:
    """What one check found; a result with ``error`` set found nothing either way.

    Attributes
    ----------
    detector : str
        Registered name of the detector.
    statistic : float
        The test statistic (for per-feature tests, the most extreme feature's).
    threshold : float
        The value the statistic is compared with (a p-value level for batch tests).
    p_value : float or None
        The (corrected) p-value when the test has one; online tests have a score only.
    is_drift : bool
        The detector's own verdict at its threshold; the policy may still ignore it. For a
        detector that keeps regimes: True while the stream is in a changed regime.
    features : tuple of FeatureDrift
        Per-feature breakdown (empty for multivariate tests).
    n : int
        Rows checked.
    alarm_index : int or None
        For online detectors: index (within the checked rows) of the first alarm.
    error : str or None
        Why no verdict exists (exception, NaN p-value); ``is_drift`` is then False.
    seconds : float
        Wall time of the check.
    extra : dict
        Detector-specific details (``alarms``: rows of this check where changes were
        signalled, for online detectors).
    regime : Regime or None
        The regime after this check, for detectors that keep one; None for the others.
    """

    detector: str
    statistic: float
    threshold: float
    p_value: float | None = None
    is_drift: bool = False
    features: tuple[FeatureDrift, ...] = ()
    n: int = 0
    alarm_index: int | None = None
    error: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    regime: Regime | None = None

    @property
    def drifted_features(self) -> tuple[str, ...]:
        """The features whose share of the result says drift."""
        return tuple(f.feature for f in self.features if f.is_drift)

    @classmethod
    def failed(cls, detector: str, error: str, n: int = 0) -> DriftResult:
        """A result without a verdict: ``error`` says why (never read as "no drift")."""
        return cls(detector, math.nan, math.nan, error=error, n=n)


class DriftDetector(ABC):
    """Fit on a reference once, then ``check`` rows ``(n, features)`` of raw values.

    Subclasses set ``name``, ``kind``, ``default_threshold`` and ``threshold_meaning`` and
    implement :meth:`_fit` and :meth:`_check`; :meth:`check` (the template) validates the
    input, times the call and turns exceptions and NaN p-values into error results. Online
    detectors keep state across calls: rows are consumed in order and ``alarm_index``
    says where the first alarm fell; :meth:`reset` starts a new stream.
    """

    name: ClassVar[str]
    kind: ClassVar[Kind] = "batch"
    default_threshold: ClassVar[float]
    threshold_meaning: ClassVar[str]

    def __init__(self) -> None:
        self.reference: Reference | None = None

    def fit(self, reference: Reference) -> DriftDetector:
        """Configure on the reference (may be slow: do it once per model version)."""
        self.reference = reference
        self._fit(reference)
        return self

    def check(self, x: np.ndarray) -> DriftResult:
        """Test the rows ``x`` (shape ``(n, features)``, raw units); never raises."""
        if self.reference is None:
            return DriftResult.failed(self.name, "detector used before fit(reference)")
        start = time.perf_counter()
        try:
            rows = self.reference.as_rows(x)
            result = self._check(rows)
        except Exception as exc:
            return DriftResult.failed(self.name, f"{type(exc).__name__}: {exc}", n=len(x))
        result = replace(result, seconds=time.perf_counter() - start)
        return _nan_is_an_error(result)

    def reset(self) -> None:  # noqa: B027 - batch detectors hold no stream state
        """Forget the stream seen so far (online detectors)."""

    @abstractmethod
    def _fit(self, reference: Reference) -> None: ...

    @abstractmethod
    def _check(self, x: np.ndarray) -> DriftResult: ...


def _nan_is_an_error(result: DriftResult) -> DriftResult:
    if result.error is not None:
        return replace(result, is_drift=False)
    nan_features = [f.feature for f in result.features if _nan(f.p_value) or _nan(f.statistic)]
    if _nan(result.p_value) or _nan(result.statistic) or nan_features:
        where = f" (features: {', '.join(nan_features)})" if nan_features else ""
        return replace(result, is_drift=False, error=f"NaN p-value or statistic{where}")
    return result


def _nan(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


DETECTORS: Registry[type[DriftDetector]] = Registry("drift detector", KeyError)
"""Every detector class by name. Detector modules register themselves with
:func:`register_detector`; ``engage/drift/__init__.py`` imports them in one explicit list,
so this module never imports a detector."""


def register_detector(name: str) -> Callable[[type[DriftDetector]], type[DriftDetector]]:
    """Class decorator: register a detector class under ``name`` and set its ``name``.

    Raises
    ------
    ValueError
        If ``name`` is already registered to another class.
    """

    def add(cls: type[DriftDetector]) -> type[DriftDetector]:
        DETECTORS.add(cls, name)
        cls.name = name
        return cls

    return add


def detector_names() -> list[str]:
    """Every detector name :func:`make_detector` accepts, sorted."""
    return DETECTORS.names()


def make_detector(name: str, **options: Any) -> DriftDetector:
    """A new, unfitted detector by registered name.

    Raises
    ------
    KeyError
        For an unknown name; the message lists the registered ones.
    """
    return DETECTORS.get(name)(**options)
