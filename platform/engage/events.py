"""The event contract at the ground floor: workers and stages report events, sinks consume them.

This module imports nothing else of engage, so every package can depend on it.

Workers hold a :class:`Reporter` whose transport pushes batches to an :class:`EventHub`
actor without waiting; the driver's :class:`EventPump` drains the hub and fans each batch
out to the sinks (tracking, progress display, and later the live monitor). Nothing on a
training worker talks to MLflow or Prometheus directly.

The durability contract (what "reported" means; measured by
``benchmarks/tracking_durability.py``, docs/BENCHMARKS.md):

- A call returns at once. The Reporter sends its buffer when it holds ``max_batch`` points
  (256 on the driver, ``HUB_MAX_BATCH`` = 2048 on a worker), from a background thread; when its oldest event is ``max_age_s`` (0.5 s) old,
  from a timer, whether or not another call comes; and at once on :meth:`Reporter.lifecycle`
  and :meth:`Reporter.flush` (the training loop flushes at every epoch boundary).
- On the driver the transport is the sinks' fan-out: a metric is in the tracking spool,
  in a synced SQLite transaction, within 0.5 s of the call.
- On a worker the transport is the job's EventHub, an in-memory actor: the driver spools
  what it holds at its next poll (every 0.25 s), so a worker's metric is on disk within
  about 0.75 s of the call.
- So a SIGKILL loses only that last window. A killed worker loses what its own buffer
  held (at most 0.5 s of reports); a killed driver, or node (the embedded Ray cluster dies
  with its driver), loses the workers' last 0.75 s and its own last 0.5 s. Everything
  older is on disk and reaches MLflow through the drainer or ``engage sync``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

EventKind = Literal["metric", "progress", "lifecycle"]

#: The contract's figures (module docstring): a Reporter sends its buffer at ``MAX_BATCH``
#: events or once its oldest is ``MAX_AGE_S`` old; a driver pumps its hub every ``HUB_POLL_S``.
MAX_BATCH = 256
#: A worker's batch: each push to the hub is a Ray task submission, about 1.4 ms of the
#: worker's CPU at 1,024 points and 1.9 ms at 4,096 on 2 loaded cores (most of it Ray's
#: submission path, not the pickling), so a worker's batch holds what a training loop
#: reports within the age limit (10 metrics per 2.5 ms step: 2,000 points in 0.5 s) and
#: its pushes go out once per ``MAX_AGE_S``, not twice (issue 11). 2048 points of
#: 10-metric rows (one row per ``metrics()`` call) pickle to about 46 KB, well under the
#: 100 KiB up to which Ray sends an argument inline. Time bounds the loss window, not
#: size: ``MAX_AGE_S`` holds on a worker as on the driver.
HUB_MAX_BATCH = 2048
MAX_AGE_S = 0.5
HUB_POLL_S = 0.25
#: How long a poll waits for the hub's answer to its drain (a Ray round trip, ~1 ms idle);
#: an answer later than that is collected by the next poll.
DRAIN_HOP_S = 0.05

Row = tuple  # an Event's fields in declaration order: (kind, name, value, step, ts, labels, data)
#: The kind of a row holding one metrics() call: names and values are tuples, data is None.
POINTS = "points"


def now_ms() -> int:
    """Milliseconds since the epoch (the events' timestamp unit)."""
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
        """Whether the value is finite (or absent); NaN and infinities are health events."""
        return self.value is None or math.isfinite(self.value)


class EventSink(Protocol):
    """Consumes batches of events, in the order they were reported.

    A sink may also have ``emit_rows(batch)`` (:class:`RowSink`): :class:`FanOut` then hands
    it the batch as it came, rows and Events mixed, and builds Events only for the sinks
    that have no ``emit_rows``.
    """

    def emit(self, events: Sequence[Event]) -> None:
        """Consume one batch, in report order."""


class RowSink(EventSink, Protocol):
    """A sink that reads a batch's rows as they are (issue 11: the driver's spool writer).

    ``emit_rows(batch)`` must do exactly what ``emit(from_rows(batch))`` does: the batch
    holds Events and rows (:func:`_to_rows`' tuples, and one :data:`POINTS` row per
    ``metrics()`` call), in report order.
    """

    def emit_rows(self, batch: Sequence[Event | Row]) -> None:
        """Consume one batch of Events and rows, in report order."""


class Transport(Protocol):
    """Where a Reporter's batches go: a sink fan-out on the driver, the hub on a worker."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        """Deliver one batch; ``wait`` blocks until the receiver has it."""


class Reporter:
    """The reporting API handed to workers and stages.

    Calls buffer locally and return at once. The buffer goes out when it holds
    ``max_batch`` points (by default the transport's ``max_batch`` attribute where it has
    one, :data:`HUB_MAX_BATCH` for the hub, else :data:`MAX_BATCH`; handed to a
    background thread, so the caller never waits for
    the send), when its oldest event is ``max_age_s`` old (sent by a timer, whether or
    not another call comes), at every :meth:`lifecycle` event, and on :meth:`flush`
    (on the calling thread, after every batch before it). A send that fails in the
    background keeps its events and is raised by the next call on this Reporter, so an
    error is never lost with the points; when more than ``_MAX_READY`` full batches wait
    (a slow receiver), the caller sends them itself, which slows it down instead of
    growing memory.

    Thread-safe: batches reach the transport in the order their events were reported.
    """

    def __init__(
        self,
        transport: Transport,
        labels: Mapping[str, str] | None = None,
        *,
        max_batch: int | None = None,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        self._transport = transport
        if max_batch is None:  # the transport's own preference (the hub's), else MAX_BATCH
            max_batch = getattr(transport, "max_batch", MAX_BATCH)
        self._labels = dict(labels or {})
        # Events, and one row per metrics() call (:data:`POINTS`): expanded into Events for
        # a transport that wants them, sent as they are to one that takes rows
        # (``takes_rows``: the hub, and a FanOut, whose row-reading sinks need no Events).
        # The caller appends to it without a lock (``list.append`` is atomic under the
        # GIL); a send takes its first ``n`` rows under ``_lock`` (``buffer[:n]``, then
        # ``del buffer[:n]``, each atomic), so a row appended meanwhile stays for the next.
        # The list itself is never replaced.
        self._buffer: list[Event | Row] = []
        self._ready: list[list[Event | Row]] = []  # full batches for the background thread
        self._rows_ok = bool(getattr(transport, "takes_rows", False))
        self._max_batch = max_batch
        self._max_age_s = max_age_s
        # The fast path's two checks (issue 11: all a step pays is an append and these).
        # Rows the buffer may hold before a call counts its points (0: the next call looks).
        self._quiet_rows = 0
        # When the buffer's first row was reported (monotonic); -inf when that row is not
        # known yet (the buffer was taken), so the next call's age check takes the slow path.
        self._oldest = -math.inf
        self._lock = threading.Lock()  # the buffer's takes, the ready batches, the timer
        self._send_lock = threading.Lock()  # one send at a time, so batches stay in order
        self._timer_set = False  # whether the flusher holds a deadline for this Reporter
        self._error: BaseException | None = None  # a failed background send, for the next call

    def with_labels(self, **labels: str) -> Reporter:
        """A Reporter on the same transport whose events carry these labels too."""
        return Reporter(
            self._transport,
            {**self._labels, **labels},
            max_batch=self._max_batch,
            max_age_s=self._max_age_s,
        )

    def metric(self, name: str, value: float, step: int | None = None) -> None:
        """Report one metric point (sent within ``max_age_s``)."""
        self._add((POINTS, (name,), (float(value),), step, now_ms(), self._labels, None))

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        """Report several metric points sharing one timestamp and step.

        This is what a training step pays to report (issue 11): one tuple of the names and
        one of the values, whatever their number, appended to the buffer with no lock, and
        two checks; the Events are built off the step, by the transport's thread or on the
        driver. It runs right after the step has evicted the caches of the code it runs,
        where each line costs several times what it costs in a warm loop.
        """
        if self._error is not None:
            self._raise_pending()
        if values:
            buffer = self._buffer
            buffer.append(
                (
                    POINTS,
                    tuple(values),
                    tuple(map(float, values.values())),
                    step,
                    now_ms(),
                    self._labels,
                    None,
                )
            )
            if len(buffer) > self._quiet_rows or time.monotonic() - self._oldest > self._max_age_s:
                self._added()

    def progress(self, name: str, **data: Any) -> None:
        """Report a progress tick (for displays; not a metric)."""
        self._add(Event("progress", name, labels=self._labels, data=data))

    def lifecycle(self, name: str, **data: Any) -> None:
        """Report a lifecycle change and send it, with everything before it, at once."""
        self._add(Event("lifecycle", name, labels=self._labels, data=data))
        self.flush()

    def flush(self, wait: bool = False) -> None:
        """Send everything buffered, in order; ``wait`` blocks until the receiver has it.

        Raises whatever the transport raises, or what a background send raised before.
        """
        self._raise_pending()
        self._send(wait, everything=True)

    def _take(self, now: float) -> list[Event | Row]:
        """The buffer's rows so far, taken out of it (hold ``_lock``): rows appended
        meanwhile stay, and the next call or timer looks at them again."""
        buffer = self._buffer
        n = len(buffer)
        batch = buffer[:n]
        del buffer[:n]
        self._quiet_rows = 0
        self._oldest = -math.inf
        self._know_oldest(now)
        return batch

    def _know_oldest(self, now: float) -> None:
        """Set ``_oldest`` from the first row's timestamp where it is not known (hold
        ``_lock``): the monotonic time it was reported, to the millisecond."""
        if self._oldest == -math.inf and self._buffer:
            head = self._buffer[0]
            ts = head[4] if type(head) is tuple else head.timestamp_ms
            self._oldest = now - max(0.0, (now_ms() - ts) / 1000)

    def _send(self, wait: bool = False, everything: bool = False) -> None:
        with self._send_lock:
            with self._lock:
                batches, self._ready = self._ready, []
                if everything and self._buffer:
                    batches.append(self._take(time.monotonic()))
            for i, batch in enumerate(batches):
                try:
                    self._transport.send(batch if self._rows_ok else from_rows(batch), wait)
                except BaseException:
                    with self._lock:  # keep the points for the next try, in their order
                        self._ready[:0] = batches[i:]
                    raise

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _add(self, entry: Event | Row) -> None:
        """Buffer one entry: :meth:`metrics`' fast path, for the other calls."""
        if self._error is not None:
            self._raise_pending()
        buffer = self._buffer
        buffer.append(entry)
        if len(buffer) > self._quiet_rows or time.monotonic() - self._oldest > self._max_age_s:
            self._added()

    def _added(self) -> None:
        """A call's slow path: the buffer's first rows (their age and timer), its size
        (a full batch goes to the background thread), or its age over the limit (the caller
        sends it, should the timer be late)."""
        now = time.monotonic()
        with self._lock:
            buffer = self._buffer
            self._know_oldest(now)
            old = bool(buffer) and now - self._oldest > self._max_age_s
            points, biggest = 0, 1
            for entry in buffer:
                size = len(entry[2]) if type(entry) is tuple else 1
                points += size
                biggest = max(biggest, size)
            if points >= self._max_batch:
                self._ready.append(self._take(now))
            else:  # no call looks again before the one whose row can make it full
                rows_left = -(-(self._max_batch - points) // biggest)  # ceiling division
                self._quiet_rows = len(buffer) + rows_left - 1
            backlog = len(self._ready) > _MAX_READY
            soon = bool(self._ready) and not backlog
            arm = bool(self._buffer) and not self._timer_set
            self._timer_set = self._timer_set or arm
            deadline = self._oldest + self._max_age_s
        if backlog or old:
            self._send(everything=old)
        if soon:
            _FLUSHER.now(self)
        if arm:
            _FLUSHER.at(deadline, self)

    def _on_timer(self) -> float | None:
        """Called by the flusher: send the ready batches, and the buffer once it is due.

        Returns the buffer's next deadline, or None when nothing is left to watch.
        """
        with self._lock:
            now = time.monotonic()
            self._know_oldest(now)
            due = bool(self._buffer) and now >= self._oldest + self._max_age_s
        try:
            self._send(everything=due)
        except BaseException as exc:  # raised by the owner's next call
            self._error = exc
        with self._lock:
            self._know_oldest(time.monotonic())
            if self._buffer and self._error is None:
                return self._oldest + self._max_age_s
            self._timer_set = False
            self._quiet_rows = 0  # the next call sets the timer again if rows wait
            return None

    def _on_ready(self) -> None:
        """Called by the flusher for a hand-off: send the full batches only."""
        try:
            self._send()
        except BaseException as exc:
            self._error = exc


_MAX_READY = 4  # full batches a Reporter lets wait for the background thread


def _metric_events(
    names: Sequence[str],
    values: Sequence[float],
    step: int | None,
    ts: int,
    labels: Mapping[str, str],
) -> list[Event]:
    """``[Event("metric", name, value, step, ts, labels) ...]`` of one :data:`POINTS` row,
    built the cheap way (as :func:`from_rows`, the fields straight into each instance
    dict)."""
    events = []
    new = object.__new__
    for name, value in zip(names, values, strict=True):
        event = new(Event)
        fields = event.__dict__
        fields["kind"] = "metric"
        fields["name"] = name
        fields["value"] = value
        fields["step"] = step
        fields["timestamp_ms"] = ts
        fields["labels"] = labels
        fields["data"] = {}
        events.append(event)
    return events


class _Flusher:
    """One daemon thread per process that sends Reporters' batches off the caller's thread.

    It takes hand-offs of full batches (:meth:`now`) and holds one deadline per Reporter
    with events waiting (:meth:`at`), sleeping until the earliest. Reporters are held by
    weak reference: one its owner dropped is not kept alive.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, weakref.ref[Reporter]]] = []
        self._handoffs: dict[int, weakref.ref[Reporter]] = {}
        self._ids = itertools.count()
        self._pid = 0  # the thread belongs to this process (a fork has none)

    def now(self, reporter: Reporter) -> None:
        """Take a hand-off: send ``reporter``'s full batches from this thread, soon."""
        with self._cond:
            self._handoffs[id(reporter)] = weakref.ref(reporter)
            self._wake()

    def at(self, deadline: float, reporter: Reporter) -> None:
        """Call ``reporter``'s timer at ``deadline`` (monotonic seconds)."""
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._ids), weakref.ref(reporter)))
            if self._heap[0][0] == deadline or self._pid != os.getpid():
                self._wake()

    def _wake(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            threading.Thread(target=self._loop, name="engage-report-flush", daemon=True).start()
        self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._handoffs and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                handoffs, self._handoffs = list(self._handoffs.values()), {}
                due = []
                while self._heap and self._heap[0][0] <= time.monotonic():
                    due.append(heapq.heappop(self._heap)[2])
            for ref in handoffs:
                if (reporter := ref()) is not None:
                    reporter._on_ready()
            for ref in due:
                reporter = ref()
                if reporter is not None and (again := reporter._on_timer()) is not None:
                    with self._cond:
                        heapq.heappush(self._heap, (again, next(self._ids), ref))


_FLUSHER = _Flusher()


class FanOut:
    """Sends each batch to every sink; used directly on the driver and by the pump.

    It takes rows (``takes_rows``): a batch may hold Events and rows mixed, as a Reporter's
    buffer and the hub's drain do. A sink with ``emit_rows`` (:class:`RowSink`: the metric
    and health sinks) gets the batch as it is; the Events are built once per batch, and
    only when a sink without ``emit_rows`` (a display, the live monitor) is there to take
    them. Building an Event per point only for the spool writer to take it apart again was
    most of the driver's CPU per point (issue 11).
    """

    takes_rows = True

    def __init__(self, sinks: Iterable[EventSink]) -> None:
        self.sinks = list(sinks)

    def send(self, events: Sequence[Event | Row], wait: bool = False) -> None:
        """Give the batch to every sink, in sink order (``wait`` is implied: sinks are called directly)."""
        built: list[Event] | None = None
        for sink in self.sinks:
            if (emit_rows := getattr(sink, "emit_rows", None)) is not None:
                emit_rows(events)
                continue
            if built is None:
                built = from_rows(events)
            sink.emit(built)


def _to_rows(events: Sequence[Event | Row]) -> list[Row]:
    """Events as plain tuples for a trip through Ray: its cloudpickle calls back into Python
    for every dataclass instance, and serialised a 256-event batch of them six times slower
    than the same fields as tuples, a cost the reporting worker paid (issue 11)."""
    return [
        e
        if type(e) is tuple
        else (e.kind, e.name, e.value, e.step, e.timestamp_ms, e.labels, e.data)
        for e in events
    ]


def from_rows(rows: Sequence[Event | Row]) -> list[Event]:
    """The Events of :func:`_to_rows` again, equal to the originals, at a third of the cost
    of ``Event(*row)``: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which was most of what a training step paid to report
    (benchmarks/tracking_overhead.py). The fields go straight into the instance dict. A
    :data:`POINTS` row becomes one metric Event per name; an Event passes as it is."""
    events = []
    for row in rows:
        if type(row) is not tuple:
            events.append(row)
            continue
        if row[0] == POINTS:
            events += _metric_events(row[1], row[2], row[3], row[4], row[5])
            continue
        event = object.__new__(Event)
        fields = event.__dict__
        (
            fields["kind"],
            fields["name"],
            fields["value"],
            fields["step"],
            fields["timestamp_ms"],
            fields["labels"],
            fields["data"],
        ) = row
        events.append(event)
    return events


class EventHub:
    """A Ray actor body that collects batches from workers until the driver drains them.

    Workers' batches arrive as rows (:class:`HubTransport` sends them so: cheap for the
    reporting worker to serialise); :meth:`push` takes Events too; :meth:`drain` gives the
    rows back, and the driver's :class:`EventPump` builds the Events.
    """

    def __init__(self) -> None:
        self._pending: list[Row] = []

    def push(self, events: Sequence[Event | Row]) -> None:
        """Queue a worker's batch, Events or rows (called with ``.remote``)."""
        self._pending.extend(_to_rows(events))

    def drain(self) -> list[Row]:
        """Everything queued since the last drain, in arrival order, as rows.

        The reply crosses Ray to the driver: 1,000 Events built here cost this actor 4.7 ms
        to pickle and the driver 7.2 ms to unpickle (one Python call per dataclass
        instance), their rows 0.2 ms each way, on the cores the training workers use
        (issue 11). :class:`EventPump` hands the rows to the driver's :class:`FanOut`, which
        builds Events only for the sinks that do not read rows.
        """
        out, self._pending = self._pending, []
        return out


class HubTransport:
    """Fire-and-forget pushes to an EventHub actor (Ray keeps one caller's calls in order).

    A Reporter on it batches :data:`HUB_MAX_BATCH` points (its ``max_batch`` attribute) and
    hands it rows as they are (``takes_rows``): the hub's drain builds the Events.
    """

    max_batch = HUB_MAX_BATCH
    takes_rows = True

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def send(self, events: list[Event | Row], wait: bool = False) -> None:
        """Push the batch (Events or rows) to the hub without waiting, unless ``wait``."""
        ref = self._hub.push.remote(_to_rows(events))
        if wait:
            import ray

            ray.get(ref)


class Discard:
    """A transport that drops what it is sent: training with no receiver (an adaptive
    round's ensemble members, a tuning trial without a hub). It takes rows, so nothing is
    expanded into Events only to be dropped."""

    takes_rows = True

    def send(self, events: list[Event | Row], wait: bool = False) -> None:
        """Drop ``events``."""


def start_hub() -> Any:
    """Start the job's EventHub actor on the driver's node, with zero CPUs.

    Zero CPUs, so it never competes with workers. Pinned to the driver's node because Ray
    would put a zero-CPU actor on any node (about a third of them on the second of two):
    a job that loses that node must lose only its workers there, never its events.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(EventHub).options(scheduling_strategy=here).remote()


class EventPump:
    """Drains the hub on the driver and hands each batch to the fan-out, never dropping one.

    The batch goes on as the hub's rows when the fan-out takes rows (``takes_rows``, as
    :class:`FanOut` does), else as Events.

    One drain call is in flight at a time and is collected only once it is ready: on a
    loaded machine the hub's process can take longer to start or answer than any fixed
    time-out, and a drain given up on would lose the events it returns.
    """

    def __init__(self, hub: Any, fanout: FanOut) -> None:
        self._hub = hub
        self._fanout = fanout
        self._ref: Any = None

    def poll(self, wait_s: float = 0.0) -> bool:
        """Hand on the events of a finished drain, or start one; True if one finished.

        A drain still in flight is waited for up to ``wait_s``. A drain this poll starts is
        waited for up to ``max(wait_s, DRAIN_HOP_S)``, so a poll hands on what reached the
        hub before it: collected only at the next poll, every event sat in the hub for two
        poll intervals, most of a killed driver's loss window (issue 11).
        """
        import ray

        if self._ref is None:
            self._ref = self._hub.drain.remote()
            wait_s = max(wait_s, DRAIN_HOP_S)
        ready, _ = ray.wait([self._ref], timeout=wait_s)
        if not ready:
            return False  # still in flight: collected by a later poll, never given up on
        rows, self._ref = ray.get(self._ref), None
        if rows:  # a FanOut builds Events only for the sinks that want them
            self._fanout.send(
                rows if getattr(self._fanout, "takes_rows", False) else from_rows(rows)
            )
        return True

    def finish(self, timeout_s: float = 60.0) -> None:
        """Collect what the workers reported last: the drain in flight, then one that sees
        every push made before it (each waited for up to ``timeout_s``)."""
        for _ in range(2):
            if not self.poll(timeout_s):
                return
