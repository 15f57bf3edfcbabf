"""The pipeline runner: data -> train -> evaluate -> register, tracked in one MLflow run.

Order matters for bad input: the data is loaded and checked before a Ray session starts
or an MLflow run exists, so a bad spec or bad data creates nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engage.runtime.reporting import Event, EventSink, FanOut, Reporter
from engage.spec import LoadedSpec
from engage.tracking.registry import GateDecision, Registration


class Observer(EventSink, Protocol):
    """What the runner tells a display: stage boundaries and every event."""

    def stage(self, name: str, detail: str = "") -> None: ...


class NullObserver:
    def stage(self, name: str, detail: str = "") -> None:
        pass

    def emit(self, events: Sequence[Event]) -> None:
        pass


@dataclass(frozen=True)
class RunOptions:
    address: str | None = None
    tracking_uri: str | None = None
    home: Path = field(default_factory=lambda: Path(".engage").resolve())
    num_cpus: int | None = None
    verbose: bool = False


@dataclass(frozen=True)
class PipelineResult:
    run_id: str
    experiment_id: str
    experiment: str
    tracking_uri: str
    metrics: dict[str, float]
    decision: GateDecision | None
    registration: Registration | None
    model_uri: str
    stage_seconds: dict[str, float]
    cluster: dict[str, float]


class _MetricSink:
    """Forwards metric events to the MLflow run (the durable spool replaces this later)."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def emit(self, events: Sequence[Event]) -> None:
        self._run.log_metric_events(events)


class _Timer:
    def __init__(self, observer: Observer) -> None:
        self.seconds: dict[str, float] = {}
        self._observer = observer

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        self._observer.stage(name, detail)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def run_pipeline(
    loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
) -> PipelineResult:
    """Run every stage of ``loaded``; raises EngageError subclasses on bad input."""
    from engage.runtime import _stages

    observer = observer or NullObserver()
    timer = _Timer(observer)
    with timer.stage("data"):
        data = _stages.prepare_data(loaded)
    with timer.stage("tracking", "opening the MLflow run"):
        run, experiment_id = _stages.open_run(loaded, data, options)
    status = "FAILED"
    try:
        reporter = Reporter(FanOut([_MetricSink(run), observer]), {"stage": "driver"})
        with timer.stage(
            "ray", "starting Ray" if not options.address else f"joining {options.address}"
        ):
            session = _stages.enter_ray(options)
        try:
            with timer.stage("train"):
                outcome = _stages.train(loaded, data, run, observer, options, session.info)
            with timer.stage("evaluate"):
                model, metrics = _stages.evaluate(loaded, data, outcome, reporter)
        finally:
            session.close()
        with timer.stage("register"):
            model_uri, decision, registration = _stages.log_and_register(
                loaded, data, run, model, metrics
            )
        reporter.metrics({f"stage_{k}_seconds": v for k, v in timer.seconds.items()})
        reporter.flush()
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        run.end(status)
    return PipelineResult(
        run.run_id,
        experiment_id,
        loaded.spec.experiment_name,
        run.ref.tracking_uri,
        metrics,
        decision,
        registration,
        model_uri,
        dict(timer.seconds),
        session.info.resources,
    )


def new_run_name(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
