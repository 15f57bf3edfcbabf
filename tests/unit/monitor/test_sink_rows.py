"""The job's other sinks read the hub's rows too (issue 11): no Event per metric point.

:class:`~engage.monitor.exporter.MonitorSink`, :class:`~engage.monitor.store_sink.StoreSink`
and :class:`~engage.cli.progress.RunDisplay` each get ``emit_rows(batch)``, which must do
exactly what ``emit(from_rows(batch))`` does: both paths run on the same batches and what
they leave (Prometheus samples, store writes, the console's text and bars) is compared
exactly, in order.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from rich.console import Console

from engage import events as reporting
from engage.cli.progress import RunDisplay
from engage.events import Event, FanOut
from engage.monitor.exporter import MonitorSink
from engage.monitor.store_sink import StoreSink

P = reporting.POINTS


def _batches() -> list[list]:
    """Poll-sized batches mixing every entry a hub or a driver Reporter holds, with the names
    the monitor, the store and the display read (times near now: the stall window is 60 s)."""
    t = int(time.time() * 1000) - 5_000
    r0, r1, job = {"rank": "0"}, {"rank": "1"}, {}
    client = {"rank": "0", "client": "c3"}
    step = ("step_seconds", "data_wait_seconds", "host_to_device_seconds", "compute_seconds")
    first = [
        ("lifecycle", "stage", None, None, t, job, {"stage": "train", "detail": ""}),
        Event("lifecycle", "train_start", None, None, t + 1, r0, {"world_size": 2}),
        ("lifecycle", "train_start", None, None, t + 2, r1, {"world_size": 2}),
        (P, step, (0.02, 0.005, 0.001, 0.014), 1, t + 3, r0, None),
        (P, step, (0.03, 0.01, 0.002, 0.018), 1, t + 4, r1, None),
        (P, ("samples", "worker_cpu_seconds", "loss"), (32.0, 1.5, 0.7), 1, t + 5, r0, None),
        (P, ("allreduce_seconds", "allreduce_blocked_seconds"), (0.004, 0.001), 1, t + 6, r0, None),
        (P, ("allreduce_buckets", "allreduce_overlap"), (3.0, 0.75), 1, t + 6, r0, None),
        (
            P,
            ("worker_resident_memory_bytes", "gpu_utilization_ratio"),
            (1e9, 0.5),
            1,
            t + 7,
            r0,
            None,
        ),
        (P, ("gpu_memory_used_bytes",), (2e9,), 1, t + 7, r0, None),
        (P, ("step_seconds",), (0.5,), 1, t + 8, job, None),  # no rank: not a worker's step
        (P, ("train_loss", "val_loss", "test_loss"), (0.5, 0.6, 0.7), 1, t + 9, job, None),
        (P, ("val_accuracy", "test_f1", "other"), (0.8, 0.7, 1.0), None, t + 10, job, None),
        (P, ("samples_per_second", "epoch"), (1234.0, 1.0), None, t + 11, job, None),
        (P, ("loss",), (8.0,), 2, t + 12, client, None),
        ("progress", "step", None, None, t + 13, r0, {"epoch": 1, "step": 5, "steps": 10}),
        Event("progress", "step", None, None, t + 14, r0, {"epoch": 1, "step": 10, "steps": 10}),
        ("metric", "lr", 0.01, 2, t + 15, r0, {}),  # an Event pushed as a row
        ("metric", "epoch", None, 3, t + 16, job, {}),  # no value: ignored
        Event("metric", "val_accuracy", 0.85, 2, t + 17, job),
        ("progress", "epoch", None, None, t + 18, job, _epoch(1)),
        (P, ("epoch", "epoch"), (2.0, 1.0), None, t + 19, job, None),  # one name twice
        ("lifecycle", "training_health", None, None, t + 20, job, {"message": "loss is nan"}),
        Event("lifecycle", "checkpoint_skipped", None, None, t + 21, job, {"message": "disk"}),
    ]
    second = [
        (P, ("epoch",), (1.0,), None, t + 30, job, None),  # the same epoch: no new write
        ("metric", "epoch", 1.0, None, t + 31, job, {}),
        (P, ("train_loss", "grad"), (math.nan, math.inf), 3, t + 32, job, None),
        ("lifecycle", "training_health", None, None, t + 33, job, {"message": "loss is nan"}),
        Event("lifecycle", "restart", None, None, t + 34, job, {"attempt": 2, "epoch": 1}),
        ("lifecycle", "train_start", None, None, t + 35, r0, {"world_size": 3}),
        Event("lifecycle", "stage", None, None, t + 36, job, {"stage": "evaluate", "detail": "x"}),
        ("progress", "trial", None, None, t + 37, job, {"total": 4, "done": 1, "best": 0.5}),
        Event("progress", "trial", None, None, t + 38, job, {"total": 4, "done": 2, "metric": "m"}),
        ("lifecycle", "alert", None, None, t + 39, job, _alert("firing")),
        (P, ("worker_cpu_seconds", "samples"), (2.5, 16.0), 2, t + 40, r0, None),
        (P, step, (0.01, -0.001, 0.0, 0.009), 2, t + 41, r0, None),  # a negative wait
        Event("lifecycle", "alert", None, None, t + 42, job, _alert("resolved")),
        (P, ("epoch", "test_accuracy"), (2.0, 0.9), None, t + 43, job, None),
    ]
    only_points = [
        (P, step, (0.02, 0.004, 0.001, 0.015), k, t + 50 + k, r0, None) for k in range(3, 9)
    ]
    lifecycle_only = [("lifecycle", "stage", None, None, t + 60, job, {"stage": "register"})]
    return [first, second, only_points, [], lifecycle_only]


def _epoch(epoch: int) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "epochs": 2,
        "train_loss": 0.5,
        "val_accuracy": 0.8,
        "samples_per_second": 1234.0,
    }


def _alert(state: str) -> dict[str, Any]:
    return {"rule": "DataBound", "state": state, "severity": "warning", "summary": "stalls"}


def _samples(sink: MonitorSink) -> dict[str, float]:
    """Every sample but the families' creation times (those differ between registries)."""
    snap = sink.metrics.snapshot()
    return {k: v for k, v in snap.items() if "_created{" not in k}


def test_monitor_sink_rows_leave_the_same_metrics_as_events() -> None:
    by_events = MonitorSink("job-a", "r1", home=None)  # type: ignore[arg-type]
    by_rows = MonitorSink("job-a", "r1", home=None)  # type: ignore[arg-type]
    for batch in _batches():
        by_events.emit(reporting.from_rows(batch))
        by_rows.emit_rows(batch)
        assert _samples(by_rows) == _samples(by_events)
    samples = _samples(by_rows)
    # The batches reached every family the monitor exports (the comparison is not vacuous).
    assert samples['engage_steps_total{job="job-a",rank="0",run_id="r1"}'] == 8.0
    assert samples['engage_epoch{job="job-a",run_id="r1"}'] == 2.0
    assert samples['engage_restarts_total{job="job-a",run_id="r1"}'] == 1.0
    assert samples['engage_alerts_firing{alertname="DataBound",job="job-a",run_id="r1"}'] == 0.0
    assert math.isnan(samples['engage_loss{job="job-a",run_id="r1",split="train"}'])
    assert 'engage_comm_blocked_ratio{job="job-a",run_id="r1"}' in samples


class _Store:
    """An event store that records every call the sink makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, rows: list) -> None:
        """Record one write of events."""
        self.calls.append(("record", rows))

    def note_progress(self, run_id: str, stage: str | None, epoch: int | None) -> None:
        """Record one note of the job's stage and epoch."""
        self.calls.append(("note_progress", run_id, stage, epoch))


def test_store_sink_rows_make_the_same_writes_as_events() -> None:
    by_events = StoreSink(_Store(), "job-a", "r1")  # type: ignore[arg-type]
    by_rows = StoreSink(_Store(), "job-a", "r1")  # type: ignore[arg-type]
    for batch in _batches():
        by_events.emit(reporting.from_rows(batch))
        by_rows.emit_rows(batch)
        assert by_rows.store.calls == by_events.store.calls
        assert by_rows._epoch == by_events._epoch
    calls = by_rows.store.calls
    assert [c[2:] for c in calls if c[0] == "note_progress"] == [
        ("train", 1),  # the row's last "epoch" is 1.0, after 2.0
        ("evaluate", 2),
        ("register", None),
    ]
    stored = [r.name for c in calls if c[0] == "record" for r in c[1]]
    assert stored.count("training_health") == 1  # the repeat within 30 s is dropped
    assert "alert" in stored
    assert "restart" in stored


def _display() -> RunDisplay:
    console = Console(record=True, force_terminal=False, width=200, color_system=None)
    display = RunDisplay(console, "classification", epochs=2)
    display.stage("train")
    return display


def _shown(display: RunDisplay) -> tuple:
    bars = [(t.description, t.total, t.completed, t.fields) for t in display.progress.tasks]
    return display.console.export_text(clear=False), bars


def test_run_display_rows_show_the_same_as_events() -> None:
    by_events, by_rows = _display(), _display()
    for batch in _batches():
        by_events.emit(reporting.from_rows(batch))
        by_rows.emit_rows(batch)
        assert _shown(by_rows) == _shown(by_events)
    text, bars = _shown(by_rows)
    assert "training_health: loss is nan" in text
    assert "alert DataBound firing" in text
    assert [b[0] for b in bars] == ["train: training", "epochs", "trials"]


def test_fanout_builds_no_event_for_a_points_row_when_every_sink_reads_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the monitor, the store and the display reading rows, a FanOut of them hands
    the batch on as it came: no metric Event is built, by the FanOut or by a sink."""

    def no_points(*args: object) -> list:
        raise AssertionError("an Event was built per metric point")

    monkeypatch.setattr(reporting, "_metric_events", no_points)
    monitor = MonitorSink("job-a", "r1", home=None)  # type: ignore[arg-type]
    store = StoreSink(_Store(), "job-a", "r1")  # type: ignore[arg-type]
    display = _display()
    given: list = []

    class _Spy:
        def emit_rows(self, batch: list) -> None:
            given.append(batch)

        def emit(self, events: list) -> None:  # pragma: no cover - the failure path
            raise AssertionError("a sink without rows was given Events")

    batch = _batches()[2] + _batches()[0]
    FanOut([monitor, store, display, _Spy()]).send(batch)
    assert given == [batch]
    assert _samples(monitor)['engage_steps_total{job="job-a",rank="0",run_id="r1"}'] == 7.0
