"""Serving metrics: events of the report path become Prometheus families."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from engage.events import Event
from engage.monitor.serving import ServingMetrics


def test_request_events_become_latency_and_status_counts():
    registry = CollectorRegistry()
    metrics = ServingMetrics(registry, "app", "run1", "r1")

    metrics.observe(
        [
            Event("metric", "request_seconds", 0.01, labels={"route": "/predict", "status": "200"}),
            Event(
                "metric", "request_seconds", 0.002, labels={"route": "/predict", "status": "422"}
            ),
            Event("metric", "predictions", 3.0, labels={"version": "2", "class": "1"}),
            Event("metric", "batch_size", 4.0),
        ]
    )
    text = generate_latest(registry).decode()

    assert (
        'engage_requests_total{job="app",replica="r1",route="/predict",run_id="run1",status="422"} 1.0'
        in text
    )
    assert (
        'engage_request_seconds_count{job="app",replica="r1",route="/predict",run_id="run1"} 2.0'
        in text
    )
    assert 'class="1"' in text
    assert "engage_predictions_total" in text
    assert "engage_batch_size_count" in text
