"""The evaluator: the scenarios promtool runs, replayed through engage's own rule checks.

The contract half of each test is the same data as deploy/prometheus/rules_test.yml (see
engage/monitor/rule_scenarios.py): what Prometheus fires there, engage must fire here, at
the same evaluation times, for the same runs, with the same values and annotations.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from engage.events import Event
from engage.monitor.evaluator import AlertEvaluator, AlertTransition, alert_event
from engage.monitor.job import JobMonitor
from engage.monitor.rule_scenarios import SCENARIOS, Scenario
from engage.monitor.rules import RULES, AlertRule, get_rule
from engage.monitor.series import SeriesBuffer, Vector, labels_of

RUN = labels_of({"job": "j", "run_id": "r"})


def _replay(scenario: Scenario) -> dict[float, list[AlertTransition]]:
    """Evaluate every rule at every interval, as promtool does; firing alerts per time."""
    buffer = SeriesBuffer()
    for series in scenario.series:
        for i, value in enumerate(series.values):
            if value is not None:
                buffer.add(series.name, series.labels, i * scenario.interval_s, value)
    evaluator = AlertEvaluator(RULES, buffer)
    end = max(e.at for e in scenario.expect)
    firing, t = {}, 0.0
    while t <= end:
        evaluator.evaluate(t)
        firing[t] = evaluator.firing()
        t += scenario.interval_s
    return firing


def _shown(rule: AlertRule, labels, value: float) -> tuple:
    """What promtool compares: labels and both annotations (which carry the value)."""
    return (
        labels,
        rule.render(rule.summary, labels, value),
        rule.render(rule.description, labels, value),
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_engage_fires_what_prometheus_fires_in_every_scenario(scenario: Scenario) -> None:
    firing = _replay(scenario)

    for expect in scenario.expect:
        rule = get_rule(expect.rule)
        got = [t for t in firing[expect.at] if t.rule.name == rule.name]
        assert sorted(_shown(rule, t.labels, t.value) for t in got) == sorted(
            _shown(rule, labels, value) for labels, value in expect.alerts
        ), f"{rule.name} at {expect.at:g} s"
        for t in got:
            (expected,) = [v for labels, v in expect.alerts if labels == t.labels]
            assert t.value == pytest.approx(expected, nan_ok=True)


# -- the state machine, on a rule whose check returns what the test says -------------------------
def _rule(for_seconds: float, results: dict[float, Vector]) -> AlertRule:
    return AlertRule(
        name="EngageTest",
        severity="warning",
        summary='value {{ $value | printf "%.1f" }} in {{ $labels.job }}',
        description="A test rule.",
        expr="vector(1)",
        for_seconds=for_seconds,
        check=lambda view, now: results.get(now, {}),
        series=(),
    )


def _states(evaluator: AlertEvaluator, times: list[float]) -> list[list[tuple[str, float]]]:
    return [[(t.state, t.since) for t in evaluator.evaluate(now)] for now in times]


def test_an_alert_goes_pending_then_fires_after_its_for_then_resolves() -> None:
    rule = _rule(60.0, {0.0: {RUN: 1.0}, 30.0: {RUN: 2.0}, 60.0: {RUN: 3.0}})
    evaluator = AlertEvaluator([rule], SeriesBuffer())

    states = _states(evaluator, [0.0, 30.0, 60.0, 90.0])

    assert states == [[("pending", 0.0)], [], [("firing", 60.0)], [("resolved", 90.0)]]


def test_a_condition_that_clears_before_its_for_never_fires() -> None:
    rule = _rule(60.0, {0.0: {RUN: 1.0}, 30.0: {RUN: 1.0}})
    evaluator = AlertEvaluator([rule], SeriesBuffer())

    states = _states(evaluator, [0.0, 30.0, 45.0, 60.0])

    assert states == [[("pending", 0.0)], [], [("inactive", 45.0)], []]
    assert evaluator.firing() == evaluator.pending() == []


def test_each_label_set_is_its_own_alert_and_firing_lists_the_current_ones() -> None:
    other = labels_of({"job": "k", "run_id": "r"})
    rule = _rule(30.0, {0.0: {RUN: 1.0}, 30.0: {RUN: 2.0, other: 5.0}})
    evaluator = AlertEvaluator([rule], SeriesBuffer())

    evaluator.evaluate(0.0)
    evaluator.evaluate(30.0)

    (firing,) = evaluator.firing()
    (pending,) = evaluator.pending()
    assert (firing.labels, firing.value, firing.since, firing.active_at) == (RUN, 2.0, 30.0, 0.0)
    assert firing.summary == "value 2.0 in j"
    assert (pending.labels, pending.value) == (other, 5.0)


def test_an_alert_event_carries_what_the_store_and_dashboard_need() -> None:
    rule = _rule(30.0, {})
    transition = AlertTransition(rule, RUN, "firing", math.inf, 12.5, 0.0)

    event = alert_event(transition)

    assert (event.kind, event.name, event.timestamp_ms) == ("lifecycle", "alert", 12_500)
    assert dict(event.labels) == {"job": "j", "run_id": "r"}
    assert event.data == {
        "rule": "EngageTest",
        "state": "firing",
        "severity": "warning",
        "summary": "value +Inf in j",
        "value": None,  # JSON cannot hold an infinity
        "labels": {},
        "since": 12.5,
    }


# -- wired into the job's monitor ----------------------------------------------------------------
def _monitor(tmp_path: Path) -> tuple[JobMonitor, list[Event]]:
    spec = SimpleNamespace(host="127.0.0.1", port=0, stall_seconds=120.0, evaluate_every_seconds=5)
    spool = SimpleNamespace(stats=lambda: SimpleNamespace(depth=0, lag_seconds=0.0))
    monitor = JobMonitor("quickstart", "abc", tmp_path, spec, spool)
    published: list[Event] = []
    monitor.publish = published.extend
    return monitor, published


def _alerts_firing(monitor: JobMonitor) -> float | None:
    return monitor.sink.registry.get_sample_value(
        "engage_alerts_firing",
        {"job": "quickstart", "run_id": "abc", "alertname": "EngageJobStalled"},
    )


def test_the_job_monitor_publishes_a_stall_and_its_resolution(tmp_path: Path) -> None:
    monitor, published = _monitor(tmp_path)
    monitor.stage("train")
    step = Event("metric", "step_seconds", 0.1, timestamp_ms=1_000_000, labels={"rank": "0"})
    monitor.emit([step])

    for now in (1000.0, 1125.0, 1150.0, 1155.0):  # stalled from 1125 s, for 30 s
        monitor.evaluate(now)
    fired, firing_gauge = list(published), _alerts_firing(monitor)
    monitor.stage("evaluate")
    monitor.evaluate(1160.0)

    assert [(e.data["rule"], e.data["state"], e.data["value"]) for e in published] == [
        ("EngageJobStalled", "firing", 155.0),
        ("EngageJobStalled", "resolved", 155.0),
    ]
    assert len(fired) == 1
    assert fired[0].data["summary"].startswith("No training step for 155 s")
    assert (firing_gauge, _alerts_firing(monitor)) == (1.0, 0.0)


def test_the_job_monitor_exports_its_stall_threshold_and_publishes_nothing_when_healthy(
    tmp_path: Path,
) -> None:
    monitor, published = _monitor(tmp_path)

    monitor.evaluate(1000.0)

    assert published == []
    threshold = monitor.sink.registry.get_sample_value(
        "engage_stall_threshold_seconds", {"job": "quickstart", "run_id": "abc"}
    )
    assert threshold == 120.0
