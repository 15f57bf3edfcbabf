"""The Prometheus metric families of a federated job, fed by the events its server reports.

``engage_fl_client_score{client}`` is the latest anomaly score of each client (1 and above
means flagged), ``engage_fl_rejected_updates_total{reason,client}`` counts updates the
verifier refused, ``engage_fl_quarantined{client}`` is 1 for a quarantined client,
``engage_fl_round`` is the last completed round and ``engage_fl_global_metric{metric}`` the
global model's validation metrics after it. The alert rules on them live in
:mod:`engage.monitor.rules` with the others.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from engage.events import Event

JOB = ("job", "run_id")
FEDERATED_STAGE = "federated"  # the ``stage`` label of the server's reporter


class FederatedMetrics:
    """An EventSink keeping the federated families on an explicit registry."""

    def __init__(self, registry: CollectorRegistry, job: str, run_id: str) -> None:
        self.labels = {"job": job, "run_id": run_id}
        r = registry
        self.client_score = Gauge(
            "engage_fl_client_score",
            "Latest anomaly score of a client's update (>= 1: flagged).",
            (*JOB, "client"),
            registry=r,
        )
        self.rejected = Counter(
            "engage_fl_rejected_updates",
            "Updates the server rejected before aggregation, by reason.",
            (*JOB, "reason", "client"),
            registry=r,
        )
        self.round = Gauge("engage_fl_round", "Last completed federated round.", JOB, registry=r)
        self.global_metric = Gauge(
            "engage_fl_global_metric",
            "Validation metric of the global model after the last round.",
            (*JOB, "metric"),
            registry=r,
        )
        self.quarantined = Gauge(
            "engage_fl_quarantined",
            "1 while a client is quarantined.",
            (*JOB, "client"),
            registry=r,
        )
        self._lock = threading.Lock()

    def emit(self, events: Sequence[Event]) -> None:
        """Update the federated gauges and counters from ``events``: client scores, rounds, the
        global model's validation metrics, rejected updates and quarantines; others are ignored.
        """
        with self._lock:
            for e in events:
                self._one(e)

    def _one(self, e: Event) -> None:
        client = e.labels.get("client")
        if e.kind == "metric" and e.value is not None:
            if e.name == "fl_client_score" and client is not None:
                self.client_score.labels(**self.labels, client=client).set(e.value)
            elif e.name == "fl_round":
                self.round.labels(**self.labels).set(e.value)
            elif e.name.startswith("val_") and e.labels.get("stage") == FEDERATED_STAGE:
                self.global_metric.labels(**self.labels, metric=e.name).set(e.value)
        elif e.kind == "lifecycle" and e.name == "fl_update_rejected":
            reason = str(e.data.get("reason", "unknown"))
            self.rejected.labels(**self.labels, reason=reason, client=client or "unknown").inc()
        elif e.kind == "lifecycle" and e.name == "fl_quarantined" and client is not None:
            self.quarantined.labels(**self.labels, client=client).set(1.0)
