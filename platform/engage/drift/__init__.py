"""Drift and degradation detection: reference capture, detectors, quality checks, policy.

Capture a :class:`Reference` at training time (:func:`capture_reference`,
:func:`log_reference`); fit detectors on it once per model version
(``make_detector(name, **options).fit(reference)``); ``check(rows)`` returns a
:class:`DriftResult`; a :class:`DriftPolicy` turns results into a :class:`DriftDecision`.
alibi-detect is imported only by the alibi detectors' module, and only when one is asked for.
"""

from engage.drift.base import (
    DETECTORS,
    DriftDetector,
    DriftResult,
    FeatureDrift,
    detector_names,
    make_detector,
    register_detector,
)
from engage.drift.performance import LabelJoin, prediction_shift, rolling_metric
from engage.drift.policy import DriftDecision, DriftPolicy
from engage.drift.quality import QualityReport, check_quality
from engage.drift.reference import Reference, capture_reference, log_reference
from engage.drift.sequential import CusumDetector, ErrorCusum

__all__ = [
    "DETECTORS",
    "CusumDetector",
    "DriftDecision",
    "DriftDetector",
    "DriftPolicy",
    "DriftResult",
    "ErrorCusum",
    "FeatureDrift",
    "LabelJoin",
    "QualityReport",
    "Reference",
    "capture_reference",
    "check_quality",
    "detector_names",
    "log_reference",
    "make_detector",
    "prediction_shift",
    "register_detector",
    "rolling_metric",
]
