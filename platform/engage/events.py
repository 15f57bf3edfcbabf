"""The event contract at the ground floor: workers and stages report events, sinks consume them.

This module imports nothing else of engage, so every package can depend on it.

Workers hold a :class:`Reporter` whose transport pushes batches to an :class:`EventHub`
actor without waiting; the driver's :class:`EventPump` drains the hub and fans each batch
out to the sinks (tracking, progress display, and later the live monitor). Nothing on a
training worker talks to MLflow or Prometheus directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

EventKind = Literal["metric", "progress", "lifecycle"]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Event:
    """One thing that happened: a metric point, a progress tick, a lifecycle change."""

    kind: EventKind
    name: str
    value: float | None = None
    step: int | None = None
    timestamp_ms: int = field(default_factory=now_ms)
    labels: Mapping[str, str] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_finite(self) -> bool:
        return self.value is None or math.isfinite(self.value)


class EventSink(Protocol):
    """Consumes batches of events, in the order they were reported."""

    def emit(self, events: Sequence[Event]) -> None: ...


class Transport(Protocol):
    def send(self, events: list[Event], wait: bool = False) -> None: ...


class Reporter:
    """The reporting API handed to workers and stages.

    Calls buffer locally and return at once; the buffer goes out when it holds
    ``max_batch`` events, when ``max_age_s`` has passed, or on :meth:`flush`.
    """

    def __init__(
        self,
        transport: Transport,
        labels: Mapping[str, str] | None = None,
        *,
        max_batch: int = 256,
        max_age_s: float = 0.5,
    ) -> None:
        self._transport = transport
        self._labels = dict(labels or {})
        self._buffer: list[Event] = []
        self._max_batch = max_batch
        self._max_age_s = max_age_s
        self._oldest = 0.0

    def with_labels(self, **labels: str) -> Reporter:
        return Reporter(
            self._transport,
            {**self._labels, **labels},
            max_batch=self._max_batch,
            max_age_s=self._max_age_s,
        )

    def metric(self, name: str, value: float, step: int | None = None) -> None:
        self._add(Event("metric", name, float(value), step, labels=self._labels))

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        ts = now_ms()
        for name, value in values.items():
            self._add(Event("metric", name, float(value), step, ts, self._labels))

    def progress(self, name: str, **data: Any) -> None:
        self._add(Event("progress", name, labels=self._labels, data=data))

    def lifecycle(self, name: str, **data: Any) -> None:
        self._add(Event("lifecycle", name, labels=self._labels, data=data))
        self.flush()

    def flush(self, wait: bool = False) -> None:
        """Send what is buffered; ``wait`` blocks until the receiver has it (use at exit)."""
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self._transport.send(batch, wait)

    def _add(self, event: Event) -> None:
        if not self._buffer:
            self._oldest = time.monotonic()
        self._buffer.append(event)
        if (
            len(self._buffer) >= self._max_batch
            or time.monotonic() - self._oldest > self._max_age_s
        ):
            self.flush()


class FanOut:
    """Sends each batch to every sink; used directly on the driver and by the pump."""

    def __init__(self, sinks: Iterable[EventSink]) -> None:
        self.sinks = list(sinks)

    def send(self, events: list[Event], wait: bool = False) -> None:
        for sink in self.sinks:
            sink.emit(events)


class EventHub:
    """A Ray actor body that collects batches from workers until the driver drains them."""

    def __init__(self) -> None:
        self._pending: list[Event] = []

    def push(self, events: list[Event]) -> None:
        self._pending.extend(events)

    def drain(self) -> list[Event]:
        out, self._pending = self._pending, []
        return out


class HubTransport:
    """Fire-and-forget pushes to an EventHub actor (Ray keeps one caller's calls in order)."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def send(self, events: list[Event], wait: bool = False) -> None:
        ref = self._hub.push.remote(events)
        if wait:
            import ray

            ray.get(ref)


def start_hub() -> Any:
    """Start the job's EventHub actor (zero CPUs, so it never competes with workers)."""
    import ray

    return ray.remote(num_cpus=0)(EventHub).remote()


class EventPump:
    """Drains the hub on the driver and hands each batch to the fan-out."""

    def __init__(self, hub: Any, fanout: FanOut) -> None:
        self._hub = hub
        self._fanout = fanout

    def poll(self, timeout_s: float = 10.0) -> int:
        import ray

        events = ray.get(self._hub.drain.remote(), timeout=timeout_s)
        if events:
            self._fanout.send(events)
        return len(events)
