"""Drift and change detection: reference capture, detectors, quality checks, policy, watcher.

Capture a :class:`Reference` at training time (:func:`capture_reference`,
:func:`log_reference`); fit detectors on it once per model version
(``make_detector(name, **options).fit(reference)``); ``check(rows)`` returns a
:class:`DriftResult`; a :class:`DriftPolicy` turns results into a :class:`DriftDecision`
and an :class:`AlertLatch` gives an alert its hysteresis. The live watcher of a serving
replica is :mod:`engage.drift.watch` (imported on demand: it is not needed to check a table).

Detectors register themselves with :func:`register_detector` when their module is imported;
the list below is the one place that imports them. A new detector is one module with one
decorated class, imported here and added to ``DETECTOR_MODULES``. alibi-detect itself is imported only when
one of its detectors is fitted.
"""

from engage.drift import _alibi, bocpd, dependence, quality, sequential
from engage.drift.base import (
    DETECTORS,
    DriftDetector,
    DriftResult,
    FeatureDrift,
    Regime,
    detector_names,
    make_detector,
    register_detector,
)
from engage.drift.performance import LabelJoin, prediction_shift, rolling_metric
from engage.drift.policy import AlertLatch, DriftDecision, DriftPolicy
from engage.drift.quality import QualityReport, check_quality
from engage.drift.reference import Reference, capture_reference, log_reference
from engage.drift.samples import Sample, SampleConsumer
from engage.drift.sequential import CusumDetector, ErrorCusum

# The detector modules: importing one registers its detectors (one decorator per class).
# A new detector module is imported at the top and listed here.
DETECTOR_MODULES = (bocpd, dependence, quality, sequential, _alibi)

__all__ = [
    "DETECTORS",
    "AlertLatch",
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
    "Regime",
    "Sample",
    "SampleConsumer",
    "capture_reference",
    "check_quality",
    "detector_names",
    "log_reference",
    "make_detector",
    "prediction_shift",
    "register_detector",
    "rolling_metric",
]
