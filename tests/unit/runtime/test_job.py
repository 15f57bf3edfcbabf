"""The job template: stage order, sink order, and the run's end on success, failure, Ctrl-C.

The template's collaborators that need Ray, MLflow or a monitor are replaced by fakes, so
these tests check the skeleton alone, as a new job kind would meet it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from engage.events import Event, FanOut
from engage.runtime import job as job_module
from engage.runtime.context import JobContext, JobSinks
from engage.runtime.job import Job
from engage.runtime.options import RunOptions
from engage.runtime.stages import Logged
from engage.tracking.sinks import HealthSink, MetricSink


@dataclass
class FakeRun:
    local_id: str = "local-1"
    tracking_uri: str = "sqlite:///fake.db"
    status: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    points: list[Event] = field(default_factory=list)

    def end(self, status: str) -> None:
        self.status = status

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags.update(tags)

    def log_metric_events(self, events: Sequence[Event]) -> None:
        self.points.extend(e for e in events if e.kind == "metric")

    def ids(self) -> Any:
        return SimpleNamespace(run_id="mlflow-1", local_id=self.local_id, experiment_id="7")

    def registration(self, seq: int) -> Any:
        return SimpleNamespace(name="m", version=seq)

    def model_uri(self, seq: int) -> str:
        return f"runs:/mlflow-1/model-{seq}"


class Recorder:
    """An observer, a monitor and an event store at once: it logs what reaches it."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.stages: list[str] = []
        self.events: list[Event] = []
        self.url = "http://127.0.0.1:1/metrics"

    def stage(self, name: str, detail: str = "") -> None:
        self.stages.append(name)

    def emit(self, events: Sequence[Event]) -> None:
        self.log.append(self.name)
        self.events.extend(events)

    def stop(self) -> None:
        self.log.append(f"{self.name} stopped")

    def finish(self, status: str) -> None:
        self.log.append(f"{self.name} finished {status}")


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path) -> SimpleNamespace:
    """Fakes for the spool, drainer, run, Ray session and monitor the template opens."""
    log: list[str] = []
    w = SimpleNamespace(log=log, run=FakeRun(), closed=[], released=[], serve_after=[], bus=None)
    w.monitor, w.store = Recorder("monitor", log), Recorder("store", log)

    @contextmanager
    def tracking(options: RunOptions, observer: Any) -> Iterator[tuple[Any, Any, FanOut]]:
        w.bus = FanOut([observer])
        spool = SimpleNamespace(pending_count=lambda local_id: 0)
        drainer = SimpleNamespace(flush=lambda local_id, timeout_s: log.append("drained"))
        yield spool, drainer, w.bus

    def enter_ray(options: RunOptions, serve_after: Any = None) -> Any:
        log.append("ray")
        w.serve_after.append(serve_after)
        info = SimpleNamespace(resources={"CPU": 2.0})
        return SimpleNamespace(
            info=info,
            close=lambda: w.closed.append(True),
            release_head=lambda: w.released.append(True),
        )

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(job_module, "job_tracking", tracking)
    monkeypatch.setattr(job_module, "open_run", lambda loaded, data, spool, options: w.run)
    monkeypatch.setattr(job_module, "enter_ray", enter_ray)
    monkeypatch.setattr(job_module, "start_monitor", lambda *args: (w.monitor, w.store))
    w.options = RunOptions(home=tmp_path)
    w.loaded = SimpleNamespace(spec=SimpleNamespace(experiment_name="exp", name="demo"))
    return w


class DemoJob(Job[Any, str]):
    """A kind whose stages log their order; ``fail`` makes one stage raise."""

    name = "demo"

    def __init__(self, *args: Any, fail: str = "", error: BaseException | None = None) -> None:
        super().__init__(*args)
        self.fail, self.error = fail, error or RuntimeError("boom")
        self.extra = Recorder("extra", [])
        self.order: list[str] = []

    def _step(self, name: str) -> None:
        self.order.append(name)
        if self.fail == name:
            raise self.error

    def prepare(self) -> Any:
        self._step("prepare")
        return SimpleNamespace(frame=None, fingerprint=None)

    def opened(self, ctx: JobContext[Any]) -> None:
        self._step("opened")

    def extra_sinks(self, ctx: JobContext[Any]) -> list[Any]:
        return [self.extra]

    def train(self, ctx: JobContext[Any]) -> str:
        self._step("train")
        ctx.reporter.metric("loss", 0.5, step=1)
        ctx.reporter.flush()
        return "trained"

    def evaluate(self, ctx: JobContext[Any], trained: str) -> dict[str, float]:
        self._step("evaluate")
        return {"test_loss": 0.25, "trained": float(trained == "trained")}

    def register(self, ctx: JobContext[Any], metrics: dict[str, float]) -> Logged:
        self._step("register")
        return Logged(model_seq=3, register_seq=4)

    def serve_after(self) -> Any:
        return "deploy-section"

    def deploy(self, ctx: JobContext[Any], registration: Any) -> Any:
        self._step("deploy")
        if self.fail == "serve":
            return None
        with ctx.stage("deploy"):
            return "deployed"


def test_a_job_runs_its_hooks_in_order_and_ends_finished(world) -> None:
    observer = Recorder("observer", world.log)
    job = DemoJob(world.loaded, world.options, observer)

    result = job.run()

    assert job.order == ["prepare", "opened", "train", "evaluate", "register", "deploy"]
    assert world.run.status == "FINISHED"
    assert world.closed == [True]
    assert observer.stages == ["data", "ray", "train", "evaluate", "tracking", "deploy"]
    assert result.run_id == "mlflow-1"
    assert result.metrics == {"test_loss": 0.25, "trained": 1.0}
    assert result.model_uri == "runs:/mlflow-1/model-3"
    assert result.registration.version == 4
    assert result.deployment == "deployed"
    assert result.cluster == {"CPU": 2.0}
    assert result.metrics_url == world.monitor.url
    assert set(result.stage_seconds) == {"data", "ray", "train", "evaluate", "tracking", "deploy"}


def test_the_sinks_are_wired_in_their_one_named_order(world) -> None:
    observer = Recorder("observer", world.log)
    job = DemoJob(world.loaded, world.options, observer)

    job.run()

    kinds = [type(s).__name__ for s in world.bus.sinks]
    names = [getattr(s, "name", None) for s in world.bus.sinks]
    assert kinds[:2] == ["MetricSink", "HealthSink"]
    assert names[2:] == ["monitor", "store", "observer", "extra"]
    assert [p.name for p in world.run.points][:1] == ["loss"]


def test_stage_timings_reach_the_run_through_the_metric_sink(world) -> None:
    job = DemoJob(world.loaded, world.options, None)

    job.run()

    names = {p.name for p in world.run.points}
    assert {"stage_data_seconds", "stage_train_seconds", "stage_tracking_seconds"} <= names
    assert "stage_deploy_seconds" in names


@pytest.mark.parametrize("stage", ["opened", "train", "evaluate", "register"])
def test_a_failing_stage_ends_the_run_failed_and_leaves_ray(world, stage: str) -> None:
    job = DemoJob(world.loaded, world.options, None, fail=stage)

    with pytest.raises(RuntimeError, match="boom"):
        job.run()

    assert world.run.status == "FAILED"
    assert "deploy" not in job.order
    if stage != "opened":
        assert world.closed == [True]
        assert world.log[-2:] == ["monitor stopped", "store finished FAILED"]


def test_an_interrupt_ends_the_run_killed(world) -> None:
    job = DemoJob(world.loaded, world.options, None, fail="train", error=KeyboardInterrupt())

    with pytest.raises(KeyboardInterrupt):
        job.run()

    assert world.run.status == "KILLED"
    assert world.closed == [True]
    assert world.log[-1] == "store finished KILLED"
    assert world.released == [True]  # a serving head started for this job is stopped


def test_a_serving_kind_enters_ray_with_its_deploy_section_and_keeps_the_head(world) -> None:
    DemoJob(world.loaded, world.options, None).run()

    assert world.serve_after == ["deploy-section"]  # train where it will serve
    assert world.released == []  # the deployment serves on it


@pytest.mark.parametrize("fail", ["train", "register", "serve"])
def test_a_job_that_serves_nothing_releases_the_serving_head(world, fail: str) -> None:
    job = DemoJob(world.loaded, world.options, None, fail=fail)

    with contextlib.suppress(RuntimeError):
        job.run()

    assert world.released == [True]


def test_bad_data_creates_no_run(world) -> None:
    job = DemoJob(world.loaded, world.options, None, fail="prepare")

    with pytest.raises(RuntimeError):
        job.run()

    assert world.run.status is None
    assert "ray" not in world.log


def test_job_sinks_leave_out_what_did_not_start() -> None:
    run = FakeRun()
    metric, health = MetricSink(run), HealthSink(run, lambda events: None)
    observer = Recorder("observer", [])

    sinks = JobSinks(metric, health, observer)

    assert sinks.ordered() == [metric, health, observer]


class ClusterDataJob(DemoJob):
    """A kind whose data stage runs on the cluster (the pipeline with ``data.resources``)."""

    def prepares_on_cluster(self) -> bool:
        return True

    def prepare(self) -> Any:
        self.order.append("ray entered" if "ray" in self.log else "no ray yet")
        return super().prepare()


def test_a_data_stage_on_the_cluster_enters_ray_first_and_leaves_it_once(world) -> None:
    # Arrange
    observer = Recorder("observer", world.log)
    job = ClusterDataJob(world.loaded, world.options, observer)
    job.log = world.log

    # Act
    job.run()

    # Assert: Ray is up before the data stage, entered once, left once; the stages all show.
    assert job.order[:2] == ["ray entered", "prepare"]
    assert world.log.count("ray") == 1
    assert observer.stages == ["ray", "data", "train", "evaluate", "tracking", "deploy"]
    assert world.closed == [True]
    assert world.run.status == "FINISHED"


@pytest.mark.parametrize("fail", ["prepare", "opened", "train"])
def test_a_failure_around_a_data_stage_on_the_cluster_leaves_ray_once(world, fail: str) -> None:
    job = ClusterDataJob(world.loaded, world.options, None, fail=fail)
    job.log = world.log

    with pytest.raises(RuntimeError, match="boom"):
        job.run()

    assert world.closed == [True]
    assert world.released == [True]
    assert world.run.status == (None if fail == "prepare" else "FAILED")  # no run for bad data
