"""A restarted training job replays an epoch: MLflow keeps one value per (series, step)."""

from __future__ import annotations

from collections.abc import Sequence

from engage.events import Event
from engage.tracking.sinks import HealthSink, MetricSink


class FakeRun:
    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.events: list[Event] = []

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags.update(tags)

    def log_metric_events(self, events: Sequence[Event]) -> None:
        self.events.extend(events)


def _epoch(epoch: int, loss: float) -> list[Event]:
    return [
        Event("metric", "train_loss", loss, step=epoch),
        Event("metric", "epoch", float(epoch), step=epoch),
    ]


def _history(run: FakeRun, name: str) -> list[tuple[int | None, float | None]]:
    return [(e.step, e.value) for e in run.events if e.name == name]


def test_a_replayed_epoch_adds_no_second_point() -> None:
    run = FakeRun()
    sink = MetricSink(run)

    sink.emit(_epoch(1, 0.9) + _epoch(2, 0.7))  # first attempt, killed during epoch 3
    sink.emit(_epoch(2, 0.7) + _epoch(3, 0.5))  # resumed from epoch 1's checkpoint

    assert _history(run, "train_loss") == [(1, 0.9), (2, 0.7), (3, 0.5)]
    assert _history(run, "epoch") == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert sink.replayed == 2


def test_replayed_steps_keep_the_first_value_per_series() -> None:
    run = FakeRun()
    sink = MetricSink(run)
    step = {"rank": "0"}

    sink.emit([Event("metric", "step_seconds", s / 10, step=s, labels=step) for s in (1, 2, 3)])
    sink.emit([Event("metric", "step_seconds", 9.0, step=s, labels=step) for s in (2, 3, 4)])

    assert _history(run, "step_seconds") == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 9.0)]


def test_points_without_a_step_and_other_series_pass() -> None:
    run = FakeRun()
    sink = MetricSink(run)

    sink.emit([Event("metric", "a", 1.0), Event("metric", "a", 2.0)])
    sink.emit([Event("metric", "b", 1.0, step=5), Event("metric", "c", 1.0, step=5)])
    sink.emit([Event("metric", "b", 2.0, step=5, labels={"split": "x"})])

    assert len(run.events) == 5
    assert sink.replayed == 0


def test_a_restart_tags_the_run_with_its_count_and_resumed_epoch() -> None:
    run = FakeRun()
    sink = HealthSink(run, lambda events: None)

    sink.emit([Event("lifecycle", "restart", data={"attempt": 2, "epoch": 3})])
    sink.emit(
        [
            Event(
                "lifecycle",
                "checkpoint_skipped",
                data={"checkpoint": "checkpoint_x", "reason": "checkpoint_x: no manifest.json"},
            )
        ]
    )

    assert run.tags == {
        "engage.restarts": "1",
        "engage.restart.1": "resumed at epoch 3",
        "engage.checkpoint_skipped.checkpoint_x": "checkpoint_x: no manifest.json",
    }
