"""The tracking sinks every job kind uses: metrics into the spooled run, non-finite metrics as health events."""

from __future__ import annotations

import math
from collections.abc import Sequence

from engage.events import Event
from engage.tracking.sinks import HealthSink, MetricSink


class FakeRun:
    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.events: list[Event] = []
        self.texts: dict[str, str] = {}

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags.update(tags)

    def log_metric_events(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.texts[artifact_file] = text


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def stage(self, name: str, detail: str = "") -> None:
        pass

    def emit(self, events: Sequence[Event]) -> None:
        self.events.extend(events)


def test_nan_and_inf_metrics_become_health_events_and_run_tags() -> None:
    run, observer = FakeRun(), Recorder()
    sink = HealthSink(run, observer.emit)

    sink.emit(
        [
            Event("metric", "train_loss", math.nan, step=3),
            Event("metric", "val_loss", 0.5, step=3),
            Event("metric", "grad_norm", math.inf, step=4),
        ]
    )

    assert sink.warnings == ["train_loss is nan at step 3", "grad_norm is inf at step 4"]
    assert run.tags == {
        "engage.health.train_loss": "train_loss is nan at step 3",
        "engage.health.grad_norm": "grad_norm is inf at step 4",
    }
    assert [(e.kind, e.name) for e in observer.events] == [("lifecycle", "training_health")] * 2


def test_finite_metrics_raise_nothing() -> None:
    run, observer = FakeRun(), Recorder()
    sink = HealthSink(run, observer.emit)

    sink.emit([Event("metric", "loss", 0.1, step=1), Event("progress", "epoch")])

    assert sink.warnings == []
    assert run.tags == {}
    assert observer.events == []


def test_metric_sink_passes_every_event_to_the_run_unchanged() -> None:
    run = FakeRun()
    events = [Event("metric", "loss", math.nan, step=1), Event("progress", "step")]

    MetricSink(run).emit(events)

    assert run.events == events


def test_alerts_are_tagged_on_the_run_as_they_fire_and_resolve() -> None:
    run, observer = FakeRun(), Recorder()
    sink = HealthSink(run, observer.emit)

    sink.emit(
        [
            Event(
                "lifecycle",
                "alert",
                data={"rule": "EngageJobStalled", "state": "firing", "summary": "no step for 40 s"},
            )
        ]
    )
    firing = dict(run.tags)
    sink.emit(
        [
            Event(
                "lifecycle",
                "alert",
                data={
                    "rule": "EngageJobStalled",
                    "state": "resolved",
                    "summary": "no step for 40 s",
                },
            )
        ]
    )

    assert firing == {"engage.alert.EngageJobStalled": "firing: no step for 40 s"}
    assert run.tags == {"engage.alert.EngageJobStalled": "resolved: no step for 40 s"}
    assert observer.events == []


def test_metric_sink_keeps_per_rank_and_per_client_copies_out_of_the_run() -> None:
    """One sink for every job kind: rank 0 and the job's own series only."""
    run = FakeRun()
    own = Event("metric", "val_loss", 0.4, step=1, labels={"stage": "federated"})
    rank0 = Event("metric", "step_seconds", 0.1, step=1, labels={"rank": "0"})
    rank1 = Event("metric", "step_seconds", 0.1, step=1, labels={"rank": "1"})
    client = Event("metric", "fl_client_score", 0.9, step=1, labels={"client": "h1"})

    MetricSink(run).emit([own, rank0, rank1, client])

    assert run.events == [own, rank0]


def test_ray_data_statistics_become_a_text_artifact_of_the_run() -> None:
    run, observer = FakeRun(), Recorder()
    sink = HealthSink(run, observer.emit)
    stats = "Operator 1 ReadParquet: 8 tasks executed, 8 blocks produced"

    sink.emit(
        [
            Event(
                "lifecycle",
                "ray_data_stats",
                data={"text": stats, "artifact_file": "ray_data_stats.txt"},
            )
        ]
    )

    assert run.texts == {"ray_data_stats.txt": stats}
    assert run.tags == {}
    assert observer.events == []
