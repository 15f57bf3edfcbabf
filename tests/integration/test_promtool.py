"""Prometheus' own checker on what engage ships: the scrape config, the generated rules, their
unit tests (the scenarios engage's evaluator also passes), and a job's real exposition."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from engage.cli.monitor_rules import rules_command
from engage.events import Event
from engage.monitor.exporter import MonitorSink
from engage.monitor.metrics import JobMetrics
from engage.monitor.rules import RULES

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("promtool") is None,
        reason="promtool not installed; `make test` installs it (Debian package prometheus)",
    ),
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool(*args: str, stdin: str | None = None, cwd: Path = DEPLOY) -> str:
    done = subprocess.run(
        ["promtool", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def test_the_scrape_config_is_valid_and_loads_the_rules() -> None:
    out = _promtool("check", "config", "prometheus.yml")

    assert f"SUCCESS: {len(RULES)} rules found" in out


def test_the_rule_file_is_valid() -> None:
    _promtool("check", "rules", "rules.yml")


def test_prometheus_fires_the_rules_as_the_scenarios_expect() -> None:
    _promtool("test", "rules", "rules_test.yml")


def test_rules_rendered_by_the_command_anywhere_pass_their_tests(tmp_path: Path) -> None:
    rules, tests = tmp_path / "rules" / "engage.yml", tmp_path / "tests" / "engage_test.yml"

    rules_command(rules, tests)

    _promtool("test", "rules", str(tests), cwd=tmp_path)


def _realistic_job() -> str:
    """A two-worker job a few steps into training, as its /metrics page shows it."""
    registry = CollectorRegistry(auto_describe=True)
    metrics = JobMetrics(registry, "quickstart", "0123abcd")
    metrics.set_stall_threshold(120.0)
    metrics.set_stage("train")
    events = [Event("lifecycle", "train_start", labels={"rank": "0"}, data={"world_size": 2})]
    for rank in ("0", "1"):
        worker = {"rank": rank}
        for _ in range(5):
            events += [
                Event("metric", "data_wait_seconds", 0.012, labels=worker),
                Event("metric", "host_to_device_seconds", 0.001, labels=worker),
                Event("metric", "compute_seconds", 0.041, labels=worker),
                Event("metric", "step_seconds", 0.054, labels=worker),
                Event("metric", "samples", 64.0, labels=worker),
            ]
        events += [
            Event("metric", "worker_cpu_seconds", 3.2, labels=worker),
            Event("metric", "worker_resident_memory_bytes", 5.1e8, labels=worker),
        ]
    for name, value in [("train_loss", 0.71), ("val_loss", 0.8), ("val_accuracy", 0.62)]:
        events.append(Event("metric", name, value))
    events += [Event("metric", "samples_per_second", 1210.0), Event("metric", "epoch", 1.0)]
    events.append(Event("lifecycle", "alert", data={"rule": "EngageDataBound", "state": "firing"}))
    metrics.observe(events)
    metrics.set_spool(3, 1.5)
    return generate_latest(registry).decode()


def test_a_jobs_exposition_passes_promtools_metric_lint() -> None:
    text = _realistic_job()

    _promtool("check", "metrics", stdin=text)

    assert 'engage_stall_threshold_seconds{job="quickstart",run_id="0123abcd"} 120.0' in text


# -- a real Prometheus on the shipped config (the `prometheus` fixture is in conftest.py) ----
def _alerts(url: str) -> list[dict]:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=2) as response:
            return json.load(response)["data"]["alerts"]
    except OSError:
        return []  # not listening yet


def test_prometheus_finds_a_job_through_discovery_and_evaluates_its_rules(
    prometheus: str, tmp_path: Path
) -> None:
    sink = MonitorSink("quickstart", "0123abcd", tmp_path / ".engage")  # next to the config
    sink.metrics.set_stage("train")
    sink.emit([Event("metric", "train_loss", math.nan)])
    sink.start()
    try:
        deadline, alerts = time.monotonic() + 45, []
        while not alerts and time.monotonic() < deadline:
            time.sleep(0.5)
            alerts = [a for a in _alerts(prometheus) if a["labels"]["alertname"] == "EngageLossNaN"]
    finally:
        sink.stop()

    assert alerts, "EngageLossNaN never became active in Prometheus within 45 s"
    assert alerts[0]["labels"] == {
        "alertname": "EngageLossNaN",
        "job": "quickstart",  # the run's own label, kept by honor_labels
        "run_id": "0123abcd",
        "severity": "critical",
    }
