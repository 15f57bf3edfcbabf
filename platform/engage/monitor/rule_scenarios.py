"""The alert scenarios, defined once: input series over time and the alerts expected.

:mod:`engage.monitor.promexport` renders them into deploy/prometheus/rules_test.yml for
``promtool test rules`` (Prometheus evaluating each rule's PromQL), and
tests/unit/monitor/test_evaluator.py feeds the same scenarios to engage's
:class:`~engage.monitor.evaluator.AlertEvaluator` (each rule's Python check). Both must
see the same alerts, with the same values, at the same times: that is what keeps the two
halves of each rule one rule.

Samples are one per ``INTERVAL_S`` from t=0 (``None``: no sample); rules are evaluated
at the same interval. An :class:`Expect` lists every alert of its rule firing at ``at``
(pending ones are not firing); an empty list says the rule must not fire then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from engage.monitor.rules import PREDICTION_SHIFT_DETECTOR as _PROXY
from engage.monitor.series import Labels, labels_of

INTERVAL_S = 60.0
NAN = math.nan


@dataclass(frozen=True)
class Series:
    """One input series: a metric name, its labels and one value per interval (None: no sample)."""

    name: str
    labels: Mapping[str, str]
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class Expect:
    """The alerts of ``rule`` expected to be firing ``at`` seconds from the start (none: silent)."""

    at: float  # seconds from the start
    rule: str
    alerts: tuple[tuple[Labels, float], ...] = ()  # (labels, value) of every firing alert


@dataclass(frozen=True)
class Scenario:
    """A named alert scenario: input series, the expected alerts and the evaluation interval."""

    name: str
    series: tuple[Series, ...]
    expect: tuple[Expect, ...]
    interval_s: float = field(default=INTERVAL_S)


def _run(job: str, run_id: str = "r1") -> Labels:
    return labels_of({"job": job, "run_id": run_id})


def _s(name: str, job: str, values: list, run_id: str = "r1", **labels: str) -> Series:
    return Series(name, {"job": job, "run_id": run_id, **labels}, tuple(values))


def _training(job: str, n: int, until: int | None = None) -> Series:
    """engage_stage{stage="train"}: 1 for the first ``until`` samples (all by default)."""
    until = n if until is None else until
    return _s("engage_stage", job, [1.0] * until + [0.0] * (n - until), stage="train")


def _m(minutes: float) -> float:
    return minutes * 60.0


ALL_RULES = (
    "EngageJobStalled",
    "EngageDataBound",
    "EngageCommBound",
    "EngageLossNaN",
    "EngageLossDiverging",
    "EngageThroughputDrop",
    "EngageTrackingLagGrowing",
    "EngageFederatedClientFlagged",
    "EngageFederatedClientQuarantined",
    "EngageFederatedGlobalMetricDrop",
    "EngageDriftDetected",
    "EngagePredictionShift",
    "EngageDriftCheckFailed",
    "EngageTrainingRestarted",
)


def _client(job: str, client: str, run_id: str = "r1") -> Labels:
    return labels_of({"job": job, "run_id": run_id, "client": client})


def _quiet(at_minutes: float, *rules: str) -> tuple[Expect, ...]:
    return tuple(Expect(_m(at_minutes), rule) for rule in rules or ALL_RULES)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "healthy jobs raise nothing",
        (
            _training("steady", 16),
            _s("engage_stall_threshold_seconds", "steady", [120.0] * 16),
            _s("engage_last_step_timestamp_seconds", "steady", [_m(i) - 3 for i in range(16)]),
            _s("engage_data_stall_ratio", "steady", [0.1, 0.12, 0.08, 0.29] * 4),
            _s("engage_comm_blocked_ratio", "steady", [0.2, 0.35, 0.5, 0.1] * 4),
            _s("engage_loss", "steady", [1.0 / (1 + i) for i in range(16)], split="train"),
            _s("engage_loss", "steady", [0.9, 1.5, 2.5, 4.0] * 4, split="val"),
            _s("engage_samples_per_second", "steady", [100, 96, 104, 60, 99, 102, 97, 100] * 2),
            _s("engage_tracking_spool_lag_seconds", "steady", [2.0, 0.5, 59.0, 1.0] * 4),
            _s("engage_tracking_spool_depth", "steady", [float(i) for i in range(16)]),
        ),
        _quiet(5) + _quiet(10) + _quiet(15),
    ),
    Scenario(
        "a stalled job fires once past its own threshold, a finished one does not",
        (
            _training("hung", 8),
            _s("engage_stall_threshold_seconds", "hung", [120.0] * 8),
            _s("engage_last_step_timestamp_seconds", "hung", [0.0, 60.0] + [120.0] * 6),
            _training("patient", 8),
            _s("engage_stall_threshold_seconds", "patient", [600.0] * 8),
            _s("engage_last_step_timestamp_seconds", "patient", [0.0, 60.0] + [120.0] * 6),
            _training("done", 8, until=2),
            _s("engage_stall_threshold_seconds", "done", [120.0] * 8),
            _s("engage_last_step_timestamp_seconds", "done", [0.0, 60.0] + [120.0] * 6),
        ),
        (
            Expect(_m(4), "EngageJobStalled"),  # 120 s since the last step: not more than 120
            Expect(_m(5), "EngageJobStalled"),  # 180 s: pending for 30 s
            Expect(_m(6), "EngageJobStalled", ((_run("hung"), 240.0),)),
            Expect(_m(7), "EngageJobStalled", ((_run("hung"), 300.0),)),
        ),
    ),
    Scenario(
        "a data-bound job fires while training, resolves after",
        (
            _training("etl", 8, until=6),
            _s("engage_data_stall_ratio", "etl", [0.1, 0.2, 0.45, 0.45, 0.5, 0.45, 0.45, 0.45]),
        ),
        (
            Expect(_m(2), "EngageDataBound"),
            Expect(_m(3), "EngageDataBound", ((_run("etl"), 0.45),)),
            Expect(_m(4), "EngageDataBound", ((_run("etl"), 0.5),)),
            Expect(_m(6), "EngageDataBound"),
        ),
    ),
    Scenario(
        "a comm-bound job fires after five minutes, bursts and a finished job do not",
        (
            _training("ring", 10),
            _s("engage_comm_blocked_ratio", "ring", [0.2] + [0.6] * 6 + [0.7, 0.6, 0.6]),
            _training("bursty", 10),
            _s("engage_comm_blocked_ratio", "bursty", [0.2] + [0.9] * 4 + [0.3] + [0.9] * 4),
            _training("finished", 10, until=4),
            _s("engage_comm_blocked_ratio", "finished", [0.9] * 10),
        ),
        (
            Expect(_m(5), "EngageCommBound"),  # above 0.5 since 1 min: pending for 4 min
            Expect(_m(6), "EngageCommBound", ((_run("ring"), 0.6),)),
            Expect(_m(7), "EngageCommBound", ((_run("ring"), 0.7),)),
            Expect(_m(9), "EngageCommBound", ((_run("ring"), 0.6),)),
        ),
    ),
    Scenario(
        "a NaN train loss fires, a NaN validation loss does not",
        (
            _s("engage_loss", "nan", [1.0, 0.9, 0.8, NAN, NAN, NAN], split="train"),
            _s("engage_loss", "valnan", [1.0, 0.9, 0.8, 0.7, 0.6, 0.5], split="train"),
            _s("engage_loss", "valnan", [1.0, NAN, NAN, NAN, NAN, NAN], split="val"),
        ),
        (
            Expect(_m(3), "EngageLossNaN"),
            Expect(_m(4), "EngageLossNaN", ((_run("nan"), 1.0),)),
            Expect(_m(5), "EngageLossNaN", ((_run("nan"), 1.0),)),
            *_quiet(5, "EngageLossDiverging"),
        ),
    ),
    Scenario(
        "a diverging loss fires, a one-sample spike does not, a forgotten minimum resolves",
        (
            _s(
                "engage_loss",
                "wild",
                [1.0, 0.8, 0.6, 0.5, 0.5, 1.2, 1.3] + [1.4] * 10,
                split="train",
            ),
            _s("engage_loss", "spiky", [1.0, 0.5, 0.5, 1.5] + [0.5] * 13, split="train"),
        ),
        (
            Expect(_m(3), "EngageLossDiverging"),
            Expect(_m(4), "EngageLossDiverging"),
            Expect(_m(5), "EngageLossDiverging"),
            Expect(_m(6), "EngageLossDiverging", ((_run("wild"), 1.3),)),
            Expect(_m(14), "EngageLossDiverging", ((_run("wild"), 1.4),)),
            Expect(_m(16), "EngageLossDiverging"),  # 10 min on, the 0.5 minimum is gone
        ),
    ),
    Scenario(
        "a throughput drop fires, a gentle decline does not, the drop becomes the new normal",
        (
            _training("slow", 17),
            _s("engage_samples_per_second", "slow", [100.0] * 5 + [40.0] * 12),
            _training("gentle", 17),
            _s("engage_samples_per_second", "gentle", [100 - 3 * i for i in range(17)]),
        ),
        (
            Expect(_m(6), "EngageThroughputDrop"),
            Expect(_m(7), "EngageThroughputDrop", ((_run("slow"), 0.4),)),
            Expect(_m(14), "EngageThroughputDrop", ((_run("slow"), 0.4),)),
            Expect(_m(15), "EngageThroughputDrop"),  # the 100 at 4 min left the 10 min window
        ),
    ),
    Scenario(
        "a growing tracking lag fires, a draining or a steady spool does not",
        (
            _s("engage_tracking_spool_lag_seconds", "offline", [30.0 * i for i in range(8)]),
            _s("engage_tracking_spool_depth", "offline", [10.0 * i for i in range(8)]),
            _s("engage_tracking_spool_lag_seconds", "draining", [300.0] * 8),
            _s("engage_tracking_spool_depth", "draining", [100.0 - 10 * i for i in range(8)]),
            _s("engage_tracking_spool_lag_seconds", "steady", [300.0] * 8),
            _s("engage_tracking_spool_depth", "steady", [50.0] * 8),
        ),
        (
            Expect(_m(4), "EngageTrackingLagGrowing"),
            Expect(_m(5), "EngageTrackingLagGrowing", ((_run("offline"), 150.0),)),
            Expect(_m(7), "EngageTrackingLagGrowing", ((_run("offline"), 210.0),)),
        ),
    ),
    Scenario(
        "federated: a flagged client fires, a borderline one does not; quarantine fires",
        (
            _s("engage_fl_client_score", "fl", [0.2, 0.3, 1.5, 2.0, 2.0, 0.4, 0.4], client="c1"),
            _s("engage_fl_client_score", "fl", [0.2, 0.9, 0.5, 0.99, 0.3, 0.2, 0.2], client="c2"),
            _s("engage_fl_quarantined", "fl", [None, None, None, 1.0, 1.0, 1.0, 1.0], client="c1"),
        ),
        (
            Expect(_m(1), "EngageFederatedClientFlagged"),
            Expect(_m(2), "EngageFederatedClientFlagged"),  # pending for 30 s
            Expect(_m(3), "EngageFederatedClientFlagged", ((_client("fl", "c1"), 2.0),)),
            Expect(_m(5), "EngageFederatedClientFlagged"),
            Expect(_m(3), "EngageFederatedClientQuarantined"),
            Expect(_m(4), "EngageFederatedClientQuarantined", ((_client("fl", "c1"), 1.0),)),
        ),
    ),
    Scenario(
        "federated: the global accuracy falling fires, a small wobble or a loss rise does not",
        (
            _s(
                "engage_fl_global_metric",
                "poisoned",
                [0.5, 0.75, 1.0, 0.875, 0.75, 0.75, 0.75],
                metric="val_accuracy",
            ),
            _s(
                "engage_fl_global_metric",
                "poisoned",
                [0.5, 0.25, 0.125, 0.5, 1.0, 1.0, 1.0],
                metric="val_loss",
            ),
            _s(
                "engage_fl_global_metric",
                "wobbly",
                [0.75, 0.8125, 0.78125, 0.8125, 0.78125, 0.8125, 0.78125],
                metric="val_accuracy",
            ),
        ),
        (
            Expect(_m(2), "EngageFederatedGlobalMetricDrop"),
            Expect(_m(3), "EngageFederatedGlobalMetricDrop"),  # pending
            Expect(_m(4), "EngageFederatedGlobalMetricDrop", ((_run("poisoned"), 0.25),)),
            Expect(_m(6), "EngageFederatedGlobalMetricDrop", ((_run("poisoned"), 0.25),)),
        ),
    ),
    Scenario(
        "drift: a drifting detector fires and resolves, a clean one does not, a failed one "
        "fires CheckFailed and never counts as no drift",
        (
            _s("engage_drift_detected", "serve-a", [0, 0, 1, 1, 1, 1, 0, 0], detector="cusum"),
            _s("engage_drift_detected", "serve-a", [0] * 8, detector="quality"),
            _s("engage_drift_detected", "serve-b", [0] * 8, detector="cusum"),
            _s("engage_drift_detected", "serve-c", [0, NAN, NAN, NAN, 0, 0, 0, 0], detector="ks"),
            _s("engage_drift_detected", "serve-c", [0] * 8, detector="quality"),
        ),
        (
            Expect(_m(2), "EngageDriftDetected"),  # pending for 1 min
            Expect(_m(3), "EngageDriftDetected", ((_run("serve-a"), 1.0),)),
            Expect(_m(5), "EngageDriftDetected", ((_run("serve-a"), 1.0),)),
            Expect(_m(6), "EngageDriftDetected"),
            Expect(_m(1), "EngageDriftCheckFailed"),
            Expect(_m(2), "EngageDriftCheckFailed", ((_run("serve-c"), 1.0),)),
            Expect(_m(3), "EngageDriftCheckFailed", ((_run("serve-c"), 1.0),)),
            Expect(_m(4), "EngageDriftCheckFailed"),
        ),
    ),
    Scenario(
        "prediction shift: the label-free proxy fires its own alert, never EngageDriftDetected, "
        "and a failed proxy is a failed check",
        (
            _s("engage_drift_detected", "serve-p", [0, 0, 1, 1, 1, 1, 0, 0], detector=_PROXY),
            _s("engage_drift_detected", "serve-p", [0] * 8, detector="cusum"),
            _s("engage_drift_detected", "serve-q", [0] * 8, detector=_PROXY),
            _s("engage_drift_detected", "serve-q", [0, 0, 0, 0, 1, 1, 1, 1], detector="cusum"),
            _s("engage_drift_detected", "serve-r", [0, NAN, NAN, 0, 0, 0, 0, 0], detector=_PROXY),
        ),
        (
            Expect(_m(2), "EngagePredictionShift"),  # pending for 1 min
            Expect(_m(3), "EngagePredictionShift", ((_run("serve-p"), 1.0),)),
            Expect(_m(5), "EngagePredictionShift", ((_run("serve-p"), 1.0),)),
            Expect(_m(6), "EngagePredictionShift"),
            Expect(_m(3), "EngageDriftDetected"),  # the proxy alone is not input drift
            Expect(_m(6), "EngageDriftDetected", ((_run("serve-q"), 1.0),)),
            Expect(_m(2), "EngageDriftCheckFailed", ((_run("serve-r"), 1.0),)),
            Expect(_m(3), "EngageDriftCheckFailed"),
        ),
    ),
    Scenario(
        "a training restart fires and stays while the run lasts; a run never restarted is quiet",
        (
            _training("flaky", 8),
            _s("engage_restarts_total", "flaky", [None, None, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]),
            _training("solid", 8),
            _s("engage_last_step_timestamp_seconds", "solid", [_m(i) for i in range(8)]),
        ),
        (
            Expect(_m(1), "EngageTrainingRestarted"),
            Expect(_m(2), "EngageTrainingRestarted"),  # pending for 15 s
            Expect(_m(3), "EngageTrainingRestarted", ((_run("flaky"), 1.0),)),
            Expect(_m(6), "EngageTrainingRestarted", ((_run("flaky"), 2.0),)),
        ),
    ),
)
