"""The monitor service: scrapes, liveness into the store, hooks, its own /metrics."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.events import Event
from engage.monitor import MonitorSink, register_target
from engage.monitor.live import Scrape, Target
from engage.monitor.service import MonitorService, is_loopback
from engage.monitor.store import EventStore

from .test_live import closed_port, training_events


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / ".engage"


@pytest.fixture
def store(home: Path) -> EventStore:
    return EventStore.open(home, f"sqlite:///{home / 'events.db'}")


@pytest.fixture
def job(home: Path) -> Iterator[MonitorSink]:
    sink = MonitorSink("job-a", "r1", home)
    sink.start()
    sink.emit(training_events())
    yield sink
    sink.stop()


class AlertOnFirstScrape:
    """A hook like the alert-rule evaluator: it sees scrapes and returns an alert event."""

    def __init__(self) -> None:
        self.seen: list[Scrape] = []

    def on_scrape(self, scrape: Scrape) -> None:
        self.seen.append(scrape)

    def after_cycle(self, now: float) -> list[Event]:
        data = {"rule": "Stalled", "state": "firing", "severity": "critical", "summary": "s"}
        return [Event("lifecycle", "alert", labels={"job": "job-a", "run_id": "r1"}, data=data)]


def _value(service: MonitorService, name: str, **labels: str) -> float | None:
    return service.registry.get_sample_value(name, labels)


def test_a_cycle_marks_each_endpoint_up_or_down(home: Path, store: EventStore, job) -> None:
    register_target(home, "job-b", "r2", f"127.0.0.1:{closed_port()}", {})
    service = MonitorService(home, store, lost_after_s=3600, timeout_s=1.0)

    service.cycle()

    assert _value(service, "engage_up", job="job-a", run_id="r1") == 1
    assert _value(service, "engage_up", job="job-b", run_id="r2") == 0
    assert _value(service, "engage_monitor_scrape_errors_total", job="job-b", run_id="r2") == 1
    assert _value(service, "engage_monitor_jobs", state="up") == 1


def test_a_job_whose_endpoint_stays_down_becomes_lost(home: Path, store: EventStore) -> None:
    register_target(home, "job-b", "r2", f"127.0.0.1:{closed_port()}", {})
    store.job_started("r2", "job-b")
    service = MonitorService(home, store, lost_after_s=0.0, timeout_s=1.0)

    service.cycle()
    service.cycle()  # the next cycle no longer watches its stale discovery file

    assert store.job("r2").state == "lost"
    assert [e.name for e in store.events(run_id="r2")] == ["lost"]
    assert _value(service, "engage_up", job="job-b", run_id="r2") is None


def test_hooks_see_every_scrape_and_their_alerts_are_stored(home: Path, store, job) -> None:
    hook = AlertOnFirstScrape()
    service = MonitorService(home, store, hooks=[hook])

    service.cycle()

    assert [s.ok for s in hook.seen] == [True]
    assert "engage_epoch" in hook.seen[0].text
    assert [(a.rule, a.run_id) for a in store.open_alerts()] == [("Stalled", "r1")]


def test_the_service_serves_its_metrics(home: Path, store: EventStore, job) -> None:
    service = MonitorService(home, store)
    endpoint = service.serve("127.0.0.1", 0)
    try:
        service.cycle()
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            text = response.read().decode()
    finally:
        service.close()

    assert 'engage_up{job="job-a",run_id="r1"} 1.0' in text
    assert "engage_monitor_jobs" in text


def test_only_loopback_hosts_count_as_local() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback(socket.gethostname() + ".example")


def test_the_alert_rules_hook_turns_scraped_series_into_stored_alerts(
    home: Path, store: EventStore, job
) -> None:
    rules = pytest.importorskip("engage.monitor.rules")
    from engage.monitor.live import scrape
    from engage.monitor.service import AlertRulesHook

    job.emit([Event("metric", "train_loss", float("nan"))])
    got = scrape(Target("job-a", "r1", job.endpoint.url))
    hook = AlertRulesHook()
    service = MonitorService(home, store, hooks=[hook])

    for t in range(1000, 1300, 10):  # five minutes of scrapes of a job whose loss is NaN
        hook.on_scrape(Scrape(got.target, float(t), got.text))
        service._after_cycle(float(t))

    fired = store.open_alerts("r1")
    assert fired
    assert {a.rule for a in fired} <= set(rules.rule_names())
    assert all(a.job == "job-a" and a.summary for a in fired)
