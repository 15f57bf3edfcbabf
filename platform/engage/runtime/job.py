"""The job template: one skeleton every job kind runs in, with hooks for its stages.

:meth:`Job.run` is a template method (as Flower's ``Strategy`` or Ray Train's trainers):
it opens the tracking spool and its drainer, runs the kind's data stage before anything
exists (bad input creates nothing), opens the MLflow run through the spool, enters Ray
(unless the kind declares ``needs_cluster = False``), starts the live monitor, wires the
job's sinks in one named order (:class:`~engage.runtime.context.JobSinks`), times every
stage, reports the stage timings and training health, ends the run ``FINISHED``,
``FAILED`` or ``KILLED`` on success, failure and interrupt alike, and drains. A kind
only supplies its stages:

=====================  =============================================================
hook                   what the kind does there
=====================  =============================================================
``prepare``            load and check its data (stage ``data``), before any run
``preflight``          check the machine (a deploy's port) before any run (optional)
``opened``             tag or announce the freshly opened run (optional)
``extra_sinks``        sinks of its own, after the observer (optional)
``train``              its training inside the Ray session (stage ``train``)
``evaluate``           its test metrics inside the Ray session (stage ``evaluate``)
``register``           log and register the model once Ray is left (optional)
``deploy``             serve the registered model after the run ended (optional)
=====================  =============================================================

The result is shown (:class:`ResultObserver`) as soon as the run ended and its model
is registered, before the deploy: a failed deploy is a
:class:`~engage.errors.DeployError` that keeps the run's result.

Which kind runs a spec is decided in :mod:`engage.runtime.kinds`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from engage.errors import DeployError, EngageError
from engage.events import Event, EventSink, FanOut, Reporter
from engage.runtime.context import D, JobContext, JobSinks, NullObserver, Observer, StageTimer
from engage.runtime.deploy import Deployment
from engage.runtime.options import RunOptions
from engage.runtime.session import preflight, resolve_address
from engage.runtime.stages import Logged, RaySession, enter_ray, open_run, start_monitor
from engage.spec import LoadedSpec
from engage.spec.models import DeploySpec
from engage.tracking.registry import GateDecision, Registration
from engage.tracking.sinks import HealthSink, MetricSink

if TYPE_CHECKING:
    from engage.monitor import JobMonitor, StoreSink
    from engage.tracking import Drainer, PipelineRun, Spool

_FINAL_DRAIN_S = 5.0  # how long a failed or interrupted run waits to get its end to MLflow

T = TypeVar("T")  # what a kind's train stage returns


@dataclass(frozen=True)
class PipelineResult:
    """What a finished job hands back, whatever its kind (the CLI prints it)."""

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
    deployment: Deployment | None = None  # what the deploy stage started, if it ran


@runtime_checkable
class ResultObserver(Protocol):
    """An observer that is also shown the job's result (the CLI's display prints it).

    :meth:`concluded` is called once the run ended and its model is registered, before
    any deployment starts: a deploy that fails later cannot hide the run's results.
    """

    def concluded(self, result: PipelineResult) -> None:
        """The run ended and MLflow has it: show ``result`` (its ``deployment`` is None)."""


class Job(ABC, Generic[D, T]):
    """The template every job kind extends; :meth:`run` calls the hooks in order.

    A job object runs once. Subclasses set ``name`` (the kind's registry name), may set
    ``labels`` (the driver reporter's labels) and override the hooks; state a later hook
    needs (a model, a simulation) lives on ``self``.

    Parameters
    ----------
    loaded:
        The validated spec.
    options:
        Where and how to run it.
    observer:
        The display told about stages and events (None: nothing is shown).
    """

    name: ClassVar[str]
    labels: ClassVar[Mapping[str, str]] = MappingProxyType({"stage": "driver"})
    #: Whether the kind's stages use Ray; a kind that trains in this process sets False,
    #: and the template then enters no Ray session (no stage ``ray``, no cluster start).
    needs_cluster: ClassVar[bool] = True
    #: Whether the kind trains from a streamed training split (``data.streaming``); the
    #: others need every training window in memory and refuse a stream before any work.
    trains_from_stream: ClassVar[bool] = False

    def __init__(
        self, loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
    ) -> None:
        self.loaded = loaded
        self.options = options
        self.observer: Observer = observer or NullObserver()
        self._left_ray = False  # set once the Ray session is closed (:meth:`_in_ray`)

    # -- hooks ---------------------------------------------------------------------------

    def data_detail(self) -> str:
        """What the data stage does, for the display ("" for the default text)."""
        return ""

    def prepares_on_cluster(self) -> bool:
        """Whether the data stage runs on the cluster (as a Ray task): the template then
        enters Ray before it (stage ``ray`` before ``data``); default: False."""
        return False

    @abstractmethod
    def prepare(self) -> D:
        """Load and check the data; runs before any run, Ray session or file exists.

        Raises
        ------
        EngageError
            Bad spec or bad data (nothing has been created yet).
        """

    def preflight(self) -> None:
        """Check what the kind needs of the machine before the run or Ray exists
        (a deploy's port); default: nothing.

        Raises
        ------
        EngageError
            A check failed (nothing has been created yet).
        """

    def opened(self, ctx: JobContext[D]) -> None:
        """The run is open and the sinks are wired: tag it, announce what was set up."""

    def extra_sinks(self, ctx: JobContext[D]) -> Sequence[EventSink]:
        """Sinks of this kind, after the observer (called once the monitor is up)."""
        return ()

    def train_detail(self) -> str:
        """What the train stage does, for the display ("" for the default text)."""
        return ""

    @abstractmethod
    def train(self, ctx: JobContext[D]) -> T:
        """Train inside the Ray session (``ctx.session``); events go to ``ctx.bus``."""

    @abstractmethod
    def evaluate(self, ctx: JobContext[D], trained: T) -> dict[str, float]:
        """Test metrics of what :meth:`train` returned, inside the Ray session."""

    def register(self, ctx: JobContext[D], metrics: dict[str, float]) -> Logged:
        """Log and register the model once Ray is left, timing its own stages
        (``export``, ``register``); default: no model."""
        return Logged()

    def serve_after(self) -> DeploySpec | None:
        """The deploy section :meth:`deploy` will serve with, or None when the kind does not
        serve. Without ``--address`` the job then trains on engage's managed serving head,
        so training and serving share one Ray cluster; default: None."""
        return None

    def deploy(self, ctx: JobContext[D], registration: Registration) -> Deployment | None:
        """Serve the registered model after the run ended (timed as stage ``deploy``
        inside the hook); default: no deployment."""
        return None

    # -- the template --------------------------------------------------------------------

    def run(self) -> PipelineResult:
        """Run every stage of the job and return its result.

        Raises
        ------
        EngageError
            A subclass for bad input (before anything is created) or a failed stage;
            the run is then ended ``FAILED``.
        KeyboardInterrupt
            After ending the run ``KILLED``.
        """
        with job_tracking(self.options, self.observer) as (spool, drainer, bus):
            timer = StageTimer(self.observer)
            session, data = self._data_stage(timer)
            ctx = JobContext(self.loaded, self.options, spool, drainer, bus, timer, data)
            ctx.session = session
            try:
                ctx.run = open_run(self.loaded, data, spool, self.options)
                ctx.sinks = JobSinks(
                    MetricSink(ctx.run), HealthSink(ctx.run, bus.send), self.observer
                )
                ctx.wire()
                ctx.reporter = Reporter(bus, self.labels)
                logged, metrics = self._tracked(ctx)
                result = self._conclude(ctx, logged, metrics)
            except BaseException:
                if ctx.session is not None:  # a serving head started for nothing
                    if not self._left_ray:  # entered before the data stage, not left yet
                        ctx.session.close()
                    ctx.session.release_head()
                raise
            if result.deployment is None and ctx.session is not None:
                ctx.session.release_head()
            return result

    def _data_stage(self, timer: StageTimer) -> tuple[RaySession | None, D]:
        """The data stage; first the Ray session when the kind prepares on the cluster.

        The address and the kind's own checks run before anything exists (a typo in the
        address leaves no FAILED run behind): after the data stage, or before Ray when the
        data stage runs on the cluster (:meth:`prepares_on_cluster`).
        """
        on_cluster = self.needs_cluster and self.prepares_on_cluster()
        if not on_cluster:
            with timer.stage("data", self.data_detail()):
                data = self.prepare()
        if self.needs_cluster:
            preflight(resolve_address(self.options.address))
        self.preflight()
        if not on_cluster:
            return None, data
        session = self._enter_ray(timer)
        try:
            with timer.stage("data", self.data_detail()):
                return session, self.prepare()
        except BaseException:
            session.close()
            session.release_head()
            raise

    def _enter_ray(self, timer: StageTimer) -> RaySession:
        """Join or start the cluster, timed as stage ``ray``."""
        address = self.options.address
        with timer.stage("ray", "starting Ray" if not address else f"joining {address}"):
            return enter_ray(self.options, self.serve_after())

    def _tracked(self, ctx: JobContext[D]) -> tuple[Logged, dict[str, float]]:
        """Every stage the run records, ended FINISHED, FAILED or KILLED."""
        status = "FAILED"
        try:
            self.opened(ctx)
            metrics = self._in_ray(ctx)
            logged = self.register(ctx, metrics)
            ctx.reporter.metrics({f"stage_{k}_seconds": v for k, v in ctx.timer.seconds.items()})
            ctx.reporter.flush()
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            end_run(ctx.run, status, ctx.monitor, ctx.store)
        return logged, metrics

    def _in_ray(self, ctx: JobContext[D]) -> dict[str, float]:
        """Enter Ray (when the kind :attr:`needs_cluster`), start the monitor, wire its
        sinks, train and evaluate, leave Ray."""
        address = self.options.address
        if self.needs_cluster:
            if ctx.session is None:  # else entered before the data stage (prepares_on_cluster)
                ctx.session = self._enter_ray(ctx.timer)
        elif given := resolve_address(address):  # --address or RAY_ADDRESS: say it is unused
            ctx.message("note", f"{self.name} jobs train in this process; {given} is not used")
        try:
            # The monitor starts once Ray is up: the drainer has had Ray's start-up to create
            # the MLflow run, so the job's series, discovery file, events and alerts carry the
            # MLflow run id the CLI prints, not the local id (a fresh home's MLflow database
            # alone takes seconds to create).
            ctx.monitor, ctx.store = start_monitor(
                self.loaded, ctx.run, ctx.spool, self.options, ctx.bus, ctx.drainer
            )
            ctx.sinks.monitor, ctx.sinks.store = ctx.monitor, ctx.store
            ctx.sinks.extra = tuple(self.extra_sinks(ctx))
            ctx.timer.observers += [x for x in (ctx.monitor, ctx.store) if x is not None]
            ctx.wire()
            with ctx.stage("train", self.train_detail()):
                trained = self.train(ctx)
            with ctx.stage("evaluate"):
                return self.evaluate(ctx, trained)
        finally:
            if ctx.session is not None:
                ctx.session.close()
                self._left_ray = True

    def _conclude(
        self, ctx: JobContext[D], logged: Logged, metrics: dict[str, float]
    ) -> PipelineResult:
        """Wait for MLflow, show the result, deploy when the kind does, and return the result.

        The result is shown (:class:`ResultObserver`) before the deploy starts, so a run
        whose serving fails still tells the user its id, metrics and registered version.
        """
        run, timeout = ctx.run, self.options.drain_timeout_s
        with ctx.stage("tracking", "waiting for MLflow to have every point"):
            ctx.drainer.flush(run.local_id, timeout_s=timeout)
        self._report_stage(ctx, "tracking")
        registration = run.registration(logged.register_seq) if logged.register_seq else None
        result = self._result(ctx, logged, metrics, registration)
        if isinstance(self.observer, ResultObserver):
            self.observer.concluded(result)
        if registration is None:
            return result
        deployment = self._deploy(ctx, registration, result)
        if deployment is None:
            return result
        self._report_stage(ctx, "deploy")
        return replace(result, deployment=deployment, stage_seconds=dict(ctx.timer.seconds))

    def _deploy(
        self, ctx: JobContext[D], registration: Registration, result: PipelineResult
    ) -> Deployment | None:
        """The kind's deploy hook; its failure is a DeployError that keeps the run's result."""
        try:
            return self.deploy(ctx, registration)
        except EngageError as exc:
            model = f"{registration.name}/{registration.version}"
            raise DeployError(
                f"{exc.message}\nthe run {result.run_id} FINISHED and model "
                f"{registration.name} version {registration.version} is registered: both are "
                "kept, only serving failed",
                hint=(f"{exc.hint}; then " if exc.hint else "")
                + f"serve it with `engage deploy {model} --port N` (N: a free port)",
                run_result=result,
            ) from None

    def _result(
        self,
        ctx: JobContext[D],
        logged: Logged,
        metrics: dict[str, float],
        registration: Registration | None,
    ) -> PipelineResult:
        """What the job produced once the run ended and MLflow has it (no deployment yet)."""
        run, ids = ctx.run, ctx.run.ids()
        return PipelineResult(
            ids.run_id or ids.local_id,
            ids.local_id,
            ids.experiment_id,
            self.loaded.spec.experiment_name,
            run.tracking_uri,
            metrics,
            logged.decision,
            registration,
            run.model_uri(logged.model_seq) if logged.model_seq is not None else None,
            dict(ctx.timer.seconds),
            ctx.session.info.resources if ctx.session is not None else {},
            ctx.spool.pending_count(run.local_id),
            tuple(ctx.sinks.health.warnings),
            ctx.monitor.url if ctx.monitor is not None else None,
        )

    @staticmethod
    def _report_stage(ctx: JobContext[D], name: str) -> None:
        """Report a stage timed after the run ended, and give MLflow a moment to have it."""
        ctx.reporter.metric(f"stage_{name}_seconds", ctx.timer.seconds[name])
        ctx.reporter.flush()
        ctx.drainer.flush(ctx.run.local_id, timeout_s=min(5.0, ctx.options.drain_timeout_s))


@contextmanager
def job_tracking(
    options: RunOptions, observer: Observer
) -> Iterator[tuple[Spool, Drainer, FanOut]]:
    """The spool, its drainer and the job's event bus, for the length of a job.

    The spool opens first, so a read-only or full disk fails the job before any work.
    """
    from engage.tracking import Drainer, Spool

    spool = Spool(options.home / "spool.db")
    bus = FanOut([observer])  # the job template wires the rest (JobSinks)
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


def end_run(
    run: PipelineRun, status: str, monitor: JobMonitor | None, store: StoreSink | None
) -> None:
    """Spool the run's end status and close its live monitor and event-store record."""
    run.end(status)
    if monitor is not None:
        monitor.stop()
    if store is not None:
        store.finish(status)
