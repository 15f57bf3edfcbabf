"""What a job's stages share while it runs: its context, its sinks, its stage timer.

The job template (:mod:`engage.runtime.job`) builds one :class:`JobContext` per run and
hands it to every hook; :class:`JobSinks` is the one place the order of the job's event
sinks is written down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from engage.events import Event, EventSink, FanOut, Reporter
from engage.runtime.options import RunOptions
from engage.runtime.stages import RaySession, RunDataset
from engage.spec import LoadedSpec
from engage.tracking.sinks import HealthSink

if TYPE_CHECKING:
    from engage.monitor import JobMonitor, StoreSink
    from engage.tracking import Drainer, PipelineRun, Spool

D = TypeVar("D", bound=RunDataset)  # what a kind's data stage returns


class Observer(EventSink, Protocol):
    """What a job tells a display: stage boundaries and every event."""

    def stage(self, name: str, detail: str = "") -> None:
        """A stage named ``name`` starts (``detail``: what it does, for the display)."""


class NullObserver:
    """An :class:`Observer` that shows nothing (library calls without a display)."""

    def stage(self, name: str, detail: str = "") -> None:
        """Ignore a stage boundary."""

    def emit(self, events: Sequence[Event]) -> None:
        """Ignore events."""

    def emit_rows(self, batch: Sequence[Any]) -> None:
        """Ignore a batch as it comes (a :class:`~engage.events.RowSink`: no Event is
        built only to be ignored)."""


@dataclass
class JobSinks:
    """Every sink of a job's event bus, in the one order events reach them.

    The metric sink spools first, so a point is durable before anyone shows it; the
    health sink sees it next and publishes ``training_health`` events; then the live
    monitor and the event store (once Ray is up); then the observer (the display); then
    the kind's own sinks.
    """

    metric: EventSink
    health: HealthSink
    observer: Observer
    monitor: EventSink | None = None
    store: EventSink | None = None
    extra: tuple[EventSink, ...] = ()

    def ordered(self) -> list[EventSink]:
        """The sinks in delivery order, leaving out the ones not started."""
        live = [s for s in (self.monitor, self.store) if s is not None]
        return [self.metric, self.health, *live, self.observer, *self.extra]


class StageTimer:
    """Times named stages and tells every observer when one starts."""

    def __init__(self, *observers: Observer) -> None:
        self.seconds: dict[str, float] = {}
        self.observers: list[Any] = list(observers)

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        """Time the block as stage ``name`` (repeated stages add up)."""
        for observer in self.observers:
            observer.stage(name, detail)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@dataclass
class JobContext(Generic[D]):
    """What a job's stages share while it runs; the template fills it in as it goes.

    ``run``, ``reporter`` and ``sinks`` are set once the run is open, ``session`` and
    ``monitor`` once Ray is up (``monitor`` stays None when the spec turns it off).
    """

    loaded: LoadedSpec
    options: RunOptions
    spool: Spool
    drainer: Drainer
    bus: FanOut
    timer: StageTimer
    data: D
    run: PipelineRun = field(init=False)
    reporter: Reporter = field(init=False)
    sinks: JobSinks = field(init=False)
    session: RaySession | None = None
    monitor: JobMonitor | None = None
    store: StoreSink | None = None

    def stage(self, name: str, detail: str = "") -> Any:
        """Time a block as stage ``name`` (a context manager)."""
        return self.timer.stage(name, detail)

    def message(self, name: str, text: str) -> None:
        """Publish a lifecycle message ``name`` on the bus (the display prints it)."""
        self.bus.send([Event("lifecycle", name, data={"message": text})])

    def wire(self) -> None:
        """Point the bus at :attr:`sinks`, in their one order (the bus list is shared)."""
        self.bus.sinks[:] = self.sinks.ordered()
