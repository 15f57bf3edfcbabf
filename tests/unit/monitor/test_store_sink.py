"""StoreSink: what one job's events leave in the event store."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage.events import Event
from engage.monitor.store import EventStore
from engage.monitor.store_sink import StoreSink


@pytest.fixture
def store(tmp_path: Path) -> EventStore:
    return EventStore(f"sqlite:///{tmp_path / 'events.db'}")


def _alert(state: str, ts_ms: int) -> Event:
    data = {"rule": "DataBound", "state": state, "severity": "warning", "summary": "stalls 60%"}
    return Event("lifecycle", "alert", timestamp_ms=ts_ms, data={**data, "value": 0.6})


def test_start_and_finish_record_the_job_and_its_end_state(store: EventStore) -> None:
    sink = StoreSink(store, "job-a", "r1")

    sink.start("http://127.0.0.1:9/metrics")
    running = store.running_jobs()
    sink.finish("FAILED")  # the runner passes MLflow's statuses

    assert [(j.run_id, j.metrics_url) for j in running] == [("r1", "http://127.0.0.1:9/metrics")]
    assert store.job("r1").state == "failed"


def test_lifecycle_events_are_stored_and_metrics_are_not(store: EventStore) -> None:
    sink = StoreSink(store, "job-a", "r1")
    sink.start()

    sink.stage("train", "2 workers")
    sink.emit(
        [
            Event("metric", "train_loss", 0.5, step=1),
            Event("metric", "epoch", 1.0),
            Event("progress", "epoch", data={"epoch": 1}),
            Event("lifecycle", "train_start", labels={"rank": "0"}, data={"world_size": 2}),
            Event("lifecycle", "train_start", labels={"rank": "1"}, data={"world_size": 2}),
            Event("lifecycle", "training_health", data={"message": "train_loss is nan at step 3"}),
        ]
    )

    stored = [(e.name, e.severity, e.message) for e in store.events()]
    assert stored == [
        ("stage", "info", "stage train: 2 workers"),
        ("train_start", "info", "training started with 2 workers"),
        ("training_health", "warning", "train_loss is nan at step 3"),
    ]
    job = store.job("r1")
    assert (job.stage, job.epoch) == ("train", 1)


def test_the_epoch_is_written_only_when_it_changes(store: EventStore, monkeypatch) -> None:
    sink = StoreSink(store, "job-a", "r1")
    sink.start()
    writes: list[dict] = []
    monkeypatch.setattr(store, "note_progress", lambda run_id, **kw: writes.append(kw))

    for epoch in (1, 1, 1, 2):
        sink.emit([Event("metric", "epoch", float(epoch)), Event("metric", "train_loss", 0.1)])

    assert writes == [{"stage": None, "epoch": 1}, {"stage": None, "epoch": 2}]


def test_a_repeated_tracking_warning_is_stored_once_per_window(store: EventStore) -> None:
    sink = StoreSink(store, "job-a", "r1")
    warning = Event("lifecycle", "tracking", data={"message": "MLflow unreachable, retrying"})

    for _ in range(5):
        sink.emit([warning])

    assert [e.name for e in store.events()] == ["tracking"]


def test_events_that_differ_only_in_labels_or_data_are_all_stored(store: EventStore) -> None:
    sink = StoreSink(store, "job-a", "r1")
    verdicts = [
        Event("lifecycle", "fl_verdict", labels={"client": c}, data={"round": r, "score": 0.1})
        for r in (1, 2)
        for c in ("c0", "c1", "c2")
    ]

    sink.emit(verdicts)
    sink.emit(verdicts[:1])  # the very same event again: a repeat inside the window

    stored = [e for e in store.events("r1") if e.name == "fl_verdict"]
    assert sorted((e.data["labels"]["client"], e.data["round"]) for e in stored) == [
        (c, r) for c in ("c0", "c1", "c2") for r in (1, 2)
    ]


def test_alert_events_open_and_resolve_alerts(store: EventStore) -> None:
    sink = StoreSink(store, "job-a", "r1")

    sink.emit([_alert("firing", 1_000)])
    open_alerts = store.open_alerts("r1")
    sink.emit([_alert("resolved", 9_000)])

    assert [(a.rule, a.severity, a.value, a.started_at) for a in open_alerts] == [
        ("DataBound", "warning", 0.6, 1.0)
    ]
    assert store.open_alerts() == []
    assert store.alerts()[0].resolved_at == 9.0
    assert next(e.message for e in store.events()) == "DataBound firing: stalls 60%"


def test_a_broken_store_never_fails_the_job_and_warns_once(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    warnings: list[str] = []
    sink = StoreSink(
        EventStore(f"sqlite:///{blocker / 'events.db'}"), "job-a", "r1", warnings.append
    )

    sink.start()
    sink.emit([Event("lifecycle", "stage", data={"stage": "train"})])
    sink.finish("finished")

    assert sink.errors == 3
    assert len(warnings) == 1
    assert "event store unavailable" in warnings[0]
