"""The serving hooks wire the sinks once; the drift watcher reports through them only.

Serving hands samples to the watcher and nothing else: its alerts reach the event store
and its gauges reach /metrics because the hooks put both sinks on the watcher's report
path, not because the watcher writes to either.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from engage.drift.samples import Sample
from engage.drift.scenarios import FEATURES, make_stream, population
from engage.drift.watch import DRIFT_RULE
from engage.monitor.store import EventStore
from engage.serve.hooks import HookSettings, ServingHooks
from engage.spec.models import DriftWatchSpec

SPEC = DriftWatchSpec(detectors=["cusum"], check_every=50, min_samples=50, ert=100_000.0)


def _settings(tmp_path, drift: DriftWatchSpec | None) -> HookSettings:
    return HookSettings(
        "app", str(tmp_path), None, "run-1", 1.0, 1000, (), 30.0, tracking_uri=None, drift=drift
    )


def _shifted(n: int) -> list[Sample]:
    x = make_stream("no_drift", seed=60, n=n).x.copy()
    x[:, FEATURES.index("temperature")] += 2 * population().reference.std[0]
    return [
        Sample(f"r{i}", row[None, :].astype(np.float32), [0.2, 0.8], "home", "m", "1", float(i))
        for i, row in enumerate(x)
    ]


def test_the_watchers_alert_reaches_the_store_and_metrics_through_the_hooks(tmp_path):
    hooks = ServingHooks(_settings(tmp_path, SPEC), "r1")
    try:
        watcher = hooks.drift_watcher
        watcher._load = lambda model, version: population().reference  # no MLflow here

        watcher.consume(_shifted(200))

        value = hooks.registry.get_sample_value
        labels = {"job": "app", "run_id": "run-1", "replica": "r1", "version": "1"}
        assert value("engage_drift_detected", {**labels, "detector": "cusum"}) == 1.0
    finally:
        hooks.close()
    (alert,) = EventStore.open(tmp_path).open_alerts()
    assert (alert.rule, alert.job, alert.run_id) == (DRIFT_RULE, "serve-app", "run-1")
    assert alert.labels == {"model": "m", "version": "1"}


def test_without_live_drift_checks_there_is_no_watcher_and_no_store(tmp_path):
    hooks = ServingHooks(_settings(tmp_path, None), "r1")
    try:
        assert hooks.drift_watcher is None
    finally:
        hooks.close()
    assert not (tmp_path / "events.db").exists()


def test_the_watcher_does_not_import_serving():
    code = (
        "import sys, engage.drift.watch; "
        "print(sorted(m for m in sys.modules if m.startswith('engage.serve')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[]"
