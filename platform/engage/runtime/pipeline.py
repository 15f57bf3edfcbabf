"""The pipeline runner: data -> train -> evaluate -> register, tracked in one MLflow run.

Order matters for bad input: the data is loaded and checked before a Ray session starts
or an MLflow run exists, so a bad spec or bad data creates nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engage.events import Event, EventSink, FanOut, Reporter
from engage.runtime.session import preflight, resolve_address
from engage.spec import LoadedSpec
from engage.tracking.registry import GateDecision, Registration

_FINAL_DRAIN_S = 5.0  # how long a failed or interrupted run waits to get its end to MLflow


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
    drain_timeout_s: float = 60.0  # how long the end of a run waits for MLflow


@dataclass(frozen=True)
class PipelineResult:
    run_id: str  # the MLflow run id; engage's local id while MLflow has not got the run
    local_id: str
    experiment_id: str | None
    experiment: str
    tracking_uri: str
    metrics: dict[str, float]
    decision: GateDecision | None
    registration: Registration | None
    model_uri: str | None
    stage_seconds: dict[str, float]
    cluster: dict[str, float]
    pending: int  # spool entries of this run not yet in MLflow (0 when all landed)
    health: tuple[str, ...] = ()  # training-health warnings (non-finite metrics)
    metrics_url: str | None = None  # the job's Prometheus endpoint while it ran
    deployment: Any = None  # the deploy stage's result (engage.runtime._stages.Deployment)


class _MetricSink:
    """Spools metric events of the run (the drainer sends them to MLflow).

    Per-worker series (step timings, resources) go to MLflow from rank 0 only; the monitor
    keeps every rank.
    """

    def __init__(self, run: Any) -> None:
        self._run = run

    def emit(self, events: Sequence[Event]) -> None:
        self._run.log_metric_events([e for e in events if e.labels.get("rank", "0") == "0"])


class _HealthSink:
    """Raises non-finite metrics as training-health events, and marks them and alerts on
    the run as tags (so both reach MLflow through the spool)."""

    def __init__(self, run: Any, publish: Callable[[list[Event]], None]) -> None:
        self._run = run
        self._publish = publish
        self.warnings: list[str] = []

    def emit(self, events: Sequence[Event]) -> None:
        for e in events:
            if e.kind == "metric" and not e.is_finite:
                message = f"{e.name} is {e.value} at step {e.step}"
                self.warnings.append(message)
                self._run.set_tags({f"engage.health.{e.name}": message})
                self._publish([Event("lifecycle", "training_health", data={"message": message})])
            elif e.kind == "lifecycle" and e.name == "alert":
                state = e.data.get("state", "firing")
                self._run.set_tags(
                    {f"engage.alert.{e.data['rule']}": f"{state}: {e.data.get('summary', '')}"}
                )


class _Timer:
    def __init__(self, *observers: Any) -> None:
        self.seconds: dict[str, float] = {}
        self.observers = list(observers)

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        for observer in self.observers:
            observer.stage(name, detail)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


def run_pipeline(
    loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
) -> PipelineResult:
    """Run every stage of ``loaded``; raises EngageError subclasses on bad input.

    The spool opens first, so a read-only or full disk fails the job before any work.
    """
    if loaded.spec.federated is not None:  # federated rounds instead of Ray Train
        from engage.federated.runner import run_federated

        return run_federated(loaded, options, observer)
    observer = observer or NullObserver()
    with job_tracking(options, observer) as (spool, drainer, bus):
        return _run(loaded, options, observer, bus, spool, drainer)


@contextmanager
def job_tracking(options: RunOptions, observer: Observer) -> Iterator[tuple[Any, Any, FanOut]]:
    """The spool, its drainer and the job's event bus, for the length of a job.

    The spool opens first, so a read-only or full disk fails the job before any work.
    """
    from engage.tracking import Drainer, Spool

    spool = Spool(options.home / "spool.db")
    bus = FanOut([observer])  # every sink of this job; the stages add theirs
    drainer = Drainer(
        spool.path,
        warn=lambda m: bus.send([Event("lifecycle", "tracking", data={"message": m})]),
    )
    finished = False
    try:
        drainer.start()
        yield spool, drainer, bus
        finished = True
    finally:
        # After a failure or Ctrl-C the run's FAILED/KILLED end is only in the spool: without
        # a last drain MLflow shows the run RUNNING until the next engage process drains.
        # Bounded, so an unreachable server cannot hold up the exit; the spool keeps the rest.
        drainer.stop(
            final_drain_s=0.0 if finished else min(_FINAL_DRAIN_S, options.drain_timeout_s)
        )
        spool.close()


def _run(
    loaded: LoadedSpec,
    options: RunOptions,
    observer: Observer,
    bus: FanOut,
    spool: Any,
    drainer: Any,
) -> PipelineResult:
    from engage.runtime import _stages

    timer = _Timer(observer)
    with timer.stage("data"):
        data = _stages.prepare_data(loaded)
    preflight(resolve_address(options.address))  # before the run exists: no FAILED runs for a typo
    run = _stages.open_run(loaded, data, spool, options)
    health = _HealthSink(run, bus.send)
    bus.sinks[:0] = [_MetricSink(run), health]
    sinks = bus.sinks
    monitor = store = None
    status = "FAILED"
    try:
        reporter = Reporter(bus, {"stage": "driver"})
        label = "starting Ray" if not options.address else f"joining {options.address}"
        with timer.stage("ray", label):
            session = _stages.enter_ray(options)
        try:
            # The monitor starts once Ray is up: the drainer has had Ray's start-up to create
            # the MLflow run, so the job's series, discovery file, events and alerts carry the
            # MLflow run id the CLI prints, not the local id (a fresh home's MLflow database
            # alone takes seconds to create).
            monitor, store = _stages.start_monitor(loaded, run, spool, options, bus)
            live = [x for x in (monitor, store) if x is not None]
            timer.observers += live
            bus.sinks[2:2] = live
            with timer.stage("train"):
                outcome = _stages.train(loaded, data, run, sinks, options, session.info)
            with timer.stage("evaluate"):
                model, metrics = _stages.evaluate(loaded, data, outcome, reporter)
        finally:
            session.close()
        if loaded.spec.export.formats:
            with timer.stage("export"):
                _stages.export_model(loaded, data, run, model)
        with timer.stage("register"):
            logged = _stages.log_and_register(loaded, data, run, model, metrics)
        reporter.metrics({f"stage_{k}_seconds": v for k, v in timer.seconds.items()})
        reporter.flush()
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        end_run(run, status, monitor, store)
    with timer.stage("tracking", "waiting for MLflow to have every point"):
        drainer.flush(run.local_id, timeout_s=options.drain_timeout_s)
    reporter.metric("stage_tracking_seconds", timer.seconds["tracking"])
    reporter.flush()
    drainer.flush(run.local_id, timeout_s=min(5.0, options.drain_timeout_s))
    ids = run.ids()
    registration = run.registration(logged.register_seq) if logged.register_seq else None
    deployment = None
    if loaded.spec.deploy.after_training and registration is not None:
        with timer.stage("deploy", f"serving {registration.name} version {registration.version}"):
            deployment = _stages.deploy(loaded, data, registration, options)
        reporter.metric("stage_deploy_seconds", timer.seconds["deploy"])
        reporter.flush()
        drainer.flush(run.local_id, timeout_s=min(5.0, options.drain_timeout_s))
    return PipelineResult(
        ids.run_id or ids.local_id,
        ids.local_id,
        ids.experiment_id,
        loaded.spec.experiment_name,
        run.tracking_uri,
        metrics,
        logged.decision,
        registration,
        run.model_uri(logged.model_seq),
        dict(timer.seconds),
        session.info.resources,
        spool.pending_count(run.local_id),
        tuple(health.warnings),
        monitor.url if monitor is not None else None,
        deployment,
    )


def end_run(run: Any, status: str, monitor: Any, store: Any) -> None:
    """Spool the run's end status and close its live monitor and event-store record."""
    run.end(status)
    if monitor is not None:
        monitor.stop()
    if store is not None:
        store.finish(status)


def new_run_name(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
