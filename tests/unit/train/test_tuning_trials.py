"""The driver's trial book and the trial's in-process training, without Ray."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from engage.cli.progress import RunDisplay
from engage.events import Event, Reporter
from engage.spec import parse_spec
from engage.train.tuning.trial import TRIAL_LABEL, train_trial, trial_data
from engage.train.tuning.trials import TrialBook


class FakeRun:
    """A PipelineRun stand-in that keeps what it is told."""

    def __init__(self, name: str = "parent") -> None:
        self.name, self.local_id, self.run_id = name, f"local-{name}", f"mlflow-{name}"
        self.children: list[FakeRun] = []
        self.params: dict = {}
        self.tags: dict = {}
        self.metrics: list[Event] = []
        self.status: str | None = None

    def child(self, name: str, tags: dict, where: Path) -> FakeRun:
        run = FakeRun(name)
        run.tags.update(tags)
        self.children.append(run)
        return run

    def log_params(self, params: dict) -> None:
        self.params.update(params)

    def set_tags(self, tags: dict) -> None:
        self.tags.update(tags)

    def log_metric_events(self, events) -> None:
        self.metrics.extend(e for e in events if e.kind == "metric")

    def end(self, status: str) -> None:
        self.status = status

    def wait_for_run_id(self, timeout_s: float) -> str:
        return self.run_id


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, events) -> None:
        self.events.extend(events)

    def send(self, events, wait: bool = False) -> None:
        self.events.extend(events)


def _book(mode: str = "min", total: int = 3) -> tuple[TrialBook, FakeRun, Collect, Collect]:
    parent, bus, monitor = FakeRun(), Collect(), Collect()
    book = TrialBook(
        parent,
        "tuned",
        "val_loss",
        mode,
        total,
        lambda config: int(config.get("train.epochs", 4)),
        bus.send,
        monitor=monitor,
    )
    return book, parent, bus, monitor


def _metric(trial: str, name: str, value: float, step: int = 1) -> Event:
    return Event("metric", name, value, step, labels={TRIAL_LABEL: trial, "rank": "0"})


def test_each_trial_is_a_child_run_with_its_values_and_its_own_series() -> None:
    book, parent, _, monitor = _book()

    book.started("t1", {"train.learning_rate": 0.01})
    book.started("t2", {"train.learning_rate": 0.001})
    book.emit([_metric("t1", "val_loss", 0.5), _metric("t2", "val_loss", 0.7)])

    first, second = parent.children
    assert first.name == "trial-0001"
    assert first.params == {"train.learning_rate": 0.01}
    assert first.tags["engage.overrides"] == "train.learning_rate=0.01"
    assert [e.value for e in first.metrics] == [0.5]
    assert [e.value for e in second.metrics] == [0.7]
    assert len(monitor.events) == 2  # the job's monitor sees every trial
    assert parent.metrics == []  # the job's own run keeps none of the trials' series


def test_events_that_come_before_tunes_start_call_wait_for_it() -> None:
    book, parent, _, _ = _book()

    book.emit([_metric("t1", "val_loss", 0.4)])
    book.started("t1", {})

    assert [e.value for e in parent.children[0].metrics] == [0.4]


def test_an_asha_stop_is_told_from_a_full_run_by_the_epochs_reached() -> None:
    book, parent, bus, _ = _book()
    book.started("full", {})
    book.started("cut", {})
    book.started("broke", {})

    book.ended("full", "FINISHED", {"training_iteration": 4, "val_loss": 0.3})
    book.ended("cut", "FINISHED", {"training_iteration": 1, "val_loss": 0.9})
    book.ended("broke", "FAILED", {"training_iteration": 2}, error="TrainingError: NaN")

    full, cut, broke = parent.children
    assert (full.status, full.tags["engage.tune.stopped_early"]) == ("FINISHED", "false")
    assert (cut.status, cut.tags["engage.tune.stopped_early"]) == ("FINISHED", "true")
    assert broke.status == "FAILED"
    assert broke.tags["engage.tune.error"] == "TrainingError: NaN"
    lines = [e.data["message"] for e in bus.events if e.kind == "lifecycle"]
    assert "trial 2/3 stopped early by ASHA after 1 epochs: val_loss 0.9000" in lines
    assert "trial 3/3 failed after 2 epochs: TrainingError: NaN" in lines
    ticks = [e.data for e in bus.events if e.kind == "progress" and e.name == "trial"]
    assert ticks[-1] == {"done": 3, "total": 3, "metric": "val_loss", "best": 0.3}
    assert book.summary() == {
        "tune_trials": 3.0,
        "tune_trials_stopped_early": 1.0,
        "tune_trials_failed": 1.0,
        "tune_trial_epochs": 7.0,
        "tune_best_val_loss": 0.3,
    }


@pytest.mark.parametrize(("mode", "winner"), [("min", 2), ("max", 1)])
def test_the_best_trial_follows_the_mode_and_skips_failed_and_nan(mode: str, winner: int) -> None:
    book, _, _, _ = _book(mode, total=4)
    for trial, value, status in [
        ("a", 0.8, "FINISHED"),
        ("b", 0.2, "FINISHED"),
        ("c", float("nan"), "FINISHED"),
        ("d", 0.01, "FAILED"),
    ]:
        book.started(trial, {})
        book.ended(trial, status, {"training_iteration": 4, "val_loss": value})

    best = book.best()

    assert best is not None
    assert best.number == winner


def test_closing_the_book_ends_running_trials_and_an_end_is_told_once() -> None:
    book, parent, _, _ = _book()
    book.started("a", {})
    book.ended("a", "FINISHED", {"training_iteration": 4, "val_loss": 0.5})
    book.started("b", {})

    book.close("KILLED")
    book.ended("a", "FAILED", None)

    assert [c.status for c in parent.children] == ["FINISHED", "KILLED"]
    assert book.rows()[1]["error"] == "the search ended before this trial"


SPEC = """\
name: trial
data:
  source: {type: synthetic, households: 2, days: 2, seed: 1}
  features: [temperature, co2, motion]
  target: occupied
  task: classification
  window: 10
  stride: 10
model: {name: mlp, params: {hidden: 8, layers: 1}}
train: {epochs: 2, batch_size: 32, num_workers: 1}
"""


def test_a_trial_trains_in_this_process_and_reports_every_epoch() -> None:
    from engage.runtime.stages import prepare_data

    loaded = parse_spec(SPEC)
    data = prepare_data(loaded)
    sink, reported = Collect(), []

    last = train_trial(
        loaded, trial_data(data), Reporter(sink, {TRIAL_LABEL: "t1", "rank": "0"}), reported.append
    )

    assert [m["epoch"] for m in reported] == [1.0, 2.0]
    assert last == reported[-1]
    assert np.isfinite(last["val_loss"])
    epochs = [e for e in sink.events if e.kind == "metric" and e.name == "val_loss"]
    assert [e.labels[TRIAL_LABEL] for e in epochs] == ["t1", "t1"]


def test_a_trial_augments_every_epoch_with_its_draws_as_the_train_stage_does() -> None:
    from engage.monitor.resources import ResourceSampler
    from engage.runtime.stages import prepare_data
    from engage.train.loader_tune import cache_features
    from engage.train.loop import TrainJob, make_worker, train_epoch

    steps = "[{op: rolling, params: {size: 3}}, {op: jitter, params: {std: 0.8, seed: 3}}]"
    loaded = parse_spec(SPEC, overrides=[f"data.preprocess={steps}"])
    data = prepare_data(loaded)
    shared = trial_data(data)
    reported: list[dict] = []

    train_trial(loaded, shared, Reporter(Collect(), {}), reported.append)

    assert [s.op.name for s in shared.augment.steps] == ["jitter"]
    assert shared.arrays["train_x"].shape == data.model_inputs("train").shape  # rolling cached
    spec = loaded.spec

    def losses(job: TrainJob, arrays: dict) -> list[float]:
        w = make_worker(job, arrays, Reporter(Collect(), {}))
        sampler = ResourceSampler("cpu", every_s=3600.0)
        return [train_epoch(w, e, sampler)["train_loss"] for e in (1, 2)]

    job = TrainJob(spec.train, spec.model, spec.data.task, shared.shape, None, None, "")
    staged = cache_features(job, data, put=lambda arrays: arrays)  # what the train stage runs
    assert [m["train_loss"] for m in reported] == losses(staged, staged.data_ref)
    fixed = losses(job, {**shared.arrays, "train_x": data.model_inputs("train")})
    assert reported[0]["train_loss"] == fixed[0]  # epoch 1's draws are the data stage's
    assert reported[1]["train_loss"] != fixed[1]  # epoch 2 draws new noise


def test_the_run_display_draws_a_trials_bar_from_the_trial_ticks() -> None:
    console = Console(file=StringIO(), width=120, force_terminal=False)
    display = RunDisplay(console, "classification", 4)

    display.emit(
        [
            Event(
                "progress",
                "trial",
                data={"done": 2, "total": 8, "metric": "val_loss", "best": 0.25},
            )
        ]
    )

    task = display.progress.tasks[-1]
    assert (task.description, task.completed, task.total) == ("trials", 2, 8)
    assert task.fields["metrics"] == "best val_loss 0.2500"


def test_the_event_pump_never_drops_a_drain_that_is_slow_to_answer(monkeypatch) -> None:
    import ray

    from engage.events import EventPump, FanOut

    batches = iter([[_metric("t1", "val_loss", 0.5)], [_metric("t1", "val_loss", 0.4)]])
    calls = []

    class Hub:
        class drain:
            @staticmethod
            def remote():
                calls.append("drain")
                return next(batches)

    answers = iter([False, True, True])
    monkeypatch.setattr(ray, "wait", lambda refs, timeout: (refs if next(answers) else [], []))
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    sink = Collect()
    pump = EventPump(Hub(), FanOut([sink]))

    assert pump.poll() is False  # the hub has not answered: the call stays in flight
    assert pump.poll() is True
    assert pump.poll() is True

    assert calls == ["drain", "drain"]  # no second drain while the first was out
    assert [e.value for e in sink.events] == [0.5, 0.4]
