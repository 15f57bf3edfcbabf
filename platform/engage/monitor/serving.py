"""Prometheus metrics of a serving replica, on an explicit registry, fed by reported events.

The serving app reports every request through the one report path (``Reporter``); this
sink turns the events into the families below. Labels: ``job`` (the Serve app), ``run_id``
(the deployment's monitoring run), ``replica``, and per family ``route``, ``status``,
``version``, ``class``, ``detector``, ``feature``, ``outcome``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from engage.events import Event

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
VALUE_BUCKETS = (-100.0, -10.0, -1.0, -0.1, 0.0, 0.1, 1.0, 10.0, 100.0)

REPLICA = ("job", "run_id", "replica")


class ServingMetrics:
    """Every metric family of one serving replica, and the mapping from events to them."""

    def __init__(self, registry: CollectorRegistry, job: str, run_id: str, replica: str) -> None:
        self.registry = registry
        self.labels = {"job": job, "run_id": run_id, "replica": replica}
        r = registry
        self.request_seconds = Histogram(
            "engage_request_seconds",
            "Time from a request's arrival to its answer, per route.",
            (*REPLICA, "route"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "engage_requests_total",
            "Requests answered, by route and HTTP status.",
            (*REPLICA, "route", "status"),
            registry=r,
        )
        self.predictions = Counter(
            "engage_predictions_total",
            "Predicted windows by class (classification) and model version.",
            (*REPLICA, "version", "class"),
            registry=r,
        )
        self.prediction_value = Histogram(
            "engage_prediction_value",
            "Predicted values (regression), by model version.",
            (*REPLICA, "version"),
            buckets=VALUE_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "engage_batch_size",
            "Requests combined into one model call.",
            REPLICA,
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.samples_dropped = Counter(
            "engage_drift_samples_dropped_total",
            "Drift samples dropped because the replica's sample queue was full.",
            REPLICA,
            registry=r,
        )
        self.model_version = Gauge(
            "engage_served_model_version",
            "1 for each model version this replica routes to, with its traffic share as value.",
            (*REPLICA, "version"),
            registry=r,
        )
        self._drift_families(r)
        self._lock = threading.Lock()

    def _drift_families(self, r: CollectorRegistry) -> None:
        """Live drift checks (engage.drift.watch): one series per detector and feature."""
        by_feature = (*REPLICA, "version", "detector", "feature")
        self.drift_statistic = Gauge(
            "engage_drift_statistic",
            "Latest drift statistic per detector and input feature (compare with the threshold).",
            by_feature,
            registry=r,
        )
        self.drift_threshold = Gauge(
            "engage_drift_threshold",
            "The value engage_drift_statistic is compared with, per detector and feature.",
            by_feature,
            registry=r,
        )
        self.drift_detected = Gauge(
            "engage_drift_detected",
            "1 when a detector's latest check found drift, 0 when not, NaN when it failed "
            "(no verdict is never 'no drift').",
            (*REPLICA, "version", "detector"),
            registry=r,
        )
        self.drift_checks = Counter(
            "engage_drift_checks_total",
            "Drift checks of sampled requests, by detector and outcome (ok, drift, error).",
            (*REPLICA, "version", "detector", "outcome"),
            registry=r,
        )

    def observe(self, events: Sequence[Event]) -> None:
        """Update the serving metrics from the metric events in ``events``; others are ignored."""
        with self._lock:
            for e in events:
                if e.kind == "metric" and e.value is not None:
                    self._metric(e)

    def _metric(self, e: Event) -> None:
        labels, extra = self.labels, e.labels
        if e.name == "request_seconds":
            route, status = extra.get("route", ""), extra.get("status", "")
            self.request_seconds.labels(**labels, route=route).observe(e.value)
            self.requests.labels(**labels, route=route, status=status).inc()
        elif e.name == "predictions":
            version, cls = extra.get("version", ""), extra.get("class", "")
            self.predictions.labels(**labels, version=version, **{"class": cls}).inc(e.value)
        elif e.name == "prediction_value":
            self.prediction_value.labels(**labels, version=extra.get("version", "")).observe(
                e.value
            )
        elif e.name == "batch_size":
            self.batch_size.labels(**labels).observe(e.value)
        elif e.name == "samples_dropped":
            self.samples_dropped.labels(**labels).inc(e.value)
        elif e.name == "traffic_share":
            self.model_version.labels(**labels, version=extra.get("version", "")).set(e.value)
        elif e.name.startswith("drift_"):
            self._drift(e.name, e.value, {**labels, "version": extra.get("version", "")}, extra)

    def _drift(self, name: str, value: float, labels: dict, extra) -> None:
        detector = extra.get("detector", "")
        if name in ("drift_statistic", "drift_threshold"):
            family = self.drift_statistic if name == "drift_statistic" else self.drift_threshold
            family.labels(**labels, detector=detector, feature=extra.get("feature", "")).set(value)
        elif name == "drift_detected":
            self.drift_detected.labels(**labels, detector=detector).set(value)
        elif name == "drift_checks":
            outcome = extra.get("outcome", "")
            self.drift_checks.labels(**labels, detector=detector, outcome=outcome).inc(value)
