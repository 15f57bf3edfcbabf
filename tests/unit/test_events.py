"""The one report path: Reporter buffering, labels, fan-out to sinks, the hub's queue."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence

import pytest

from engage import events as reporting
from engage.events import Event, EventHub, FanOut, HubTransport, Reporter


class _Recorder:
    """A transport and a sink at once: keeps every batch it gets, and each ``wait``."""

    def __init__(self, log: list | None = None, name: str = "") -> None:
        self.batches: list[list[Event]] = []
        self.waits: list[bool] = []
        self._log = log
        self._name = name

    def send(self, events: list[Event], wait: bool = False) -> None:
        self.batches.append(list(events))
        self.waits.append(wait)

    def emit(self, events: Sequence[Event]) -> None:
        self.batches.append(list(events))
        if self._log is not None:
            self._log.append(self._name)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _delivered(sink: _Recorder, batches: int, within_s: float = 2.0) -> list[list[str]]:
    """The names in each batch ``sink`` got, once it has ``batches`` (or after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while len(sink.batches) < batches and time.monotonic() < deadline:
        time.sleep(0.005)
    return [[e.name for e in b] for b in sink.batches]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(reporting.time, "monotonic", fake)
    return fake


def test_events_stay_buffered_until_max_batch(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=3, max_age_s=60)

    reporter.metric("a", 1)
    reporter.metric("b", 2)
    sent_before = len(sink.batches)
    reporter.metric("c", 3)  # full: handed to the background thread, sent at once

    assert sent_before == 0
    assert _delivered(sink, 1) == [["a", "b", "c"]]


def test_buffer_goes_out_once_the_oldest_event_is_older_than_max_age(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=100, max_age_s=0.5)

    reporter.metric("a", 1)
    clock.now += 0.4
    reporter.metric("b", 2)
    sent_while_young = len(sink.batches)
    clock.now += 0.2  # the first event is now 0.6 s old
    reporter.metric("c", 3)

    assert sent_while_young == 0
    assert [[e.name for e in b] for b in sink.batches] == [["a", "b", "c"]]


def test_age_restarts_with_the_first_event_after_a_flush(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=100, max_age_s=0.5)
    reporter.metric("a", 1)
    reporter.flush()

    clock.now += 10.0  # long idle: the next event starts a fresh buffer
    reporter.metric("b", 2)

    assert len(sink.batches) == 1


def test_flush_sends_what_is_buffered_and_passes_wait(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=100, max_age_s=60)
    reporter.metric("a", 1, step=4)

    reporter.flush(wait=True)
    reporter.flush()  # nothing buffered: sends nothing

    assert len(sink.batches) == 1
    assert sink.waits == [True]
    (event,) = sink.batches[0]
    assert (event.kind, event.name, event.value, event.step) == ("metric", "a", 1.0, 4)


def test_with_labels_merges_and_leaves_the_parent_alone(clock: _Clock) -> None:
    sink = _Recorder()
    parent = Reporter(sink, {"job": "j1", "rank": "0"}, max_batch=100)

    child = parent.with_labels(rank="3", stage="train")
    child.metric("a", 1)
    parent.metric("b", 2)
    child.flush()
    parent.flush()

    assert dict(sink.batches[0][0].labels) == {"job": "j1", "rank": "3", "stage": "train"}
    assert dict(sink.batches[1][0].labels) == {"job": "j1", "rank": "0"}


def test_metrics_share_one_timestamp_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count(1_000)
    monkeypatch.setattr(reporting, "now_ms", lambda: next(ticks))
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=100)

    reporter.metrics({"loss": 0.5, "acc": 0.9, "f1": 0.8}, step=7)
    reporter.flush()

    (batch,) = sink.batches
    assert [e.name for e in batch] == ["loss", "acc", "f1"]
    assert {e.timestamp_ms for e in batch} == {1_000}
    assert {e.step for e in batch} == {7}


def test_lifecycle_event_is_sent_at_once_with_what_came_before(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=100, max_age_s=60)
    reporter.progress("step", step=1)

    reporter.lifecycle("started", attempt=1)

    (batch,) = sink.batches
    assert [(e.kind, e.name) for e in batch] == [("progress", "step"), ("lifecycle", "started")]
    assert dict(batch[1].data) == {"attempt": 1}
    assert batch[1].value is None


def test_fanout_gives_every_sink_each_batch_in_sink_order() -> None:
    order: list[str] = []
    first, second, third = (_Recorder(order, n) for n in ("first", "second", "third"))
    fanout = FanOut([first, second, third])
    batch1, batch2 = [Event("metric", "a", 1.0)], [Event("metric", "b", 2.0)]

    fanout.send(batch1)
    fanout.send(batch2)

    assert order == ["first", "second", "third"] * 2
    for sink in (first, second, third):
        assert sink.batches == [batch1, batch2]


def test_reporter_through_fanout_reaches_every_sink() -> None:
    a, b = _Recorder(), _Recorder()
    reporter = Reporter(FanOut([a, b]), {"stage": "driver"})

    reporter.metrics({"x": 1.0, "y": 2.0})
    reporter.flush()

    assert [e.name for e in a.batches[0]] == ["x", "y"] == [e.name for e in b.batches[0]]


def test_hub_drains_pushes_in_order_then_is_empty() -> None:
    hub = EventHub()
    e1, e2, e3 = (Event("metric", n, 1.0) for n in ("a", "b", "c"))

    hub.push([e1, e2])
    hub.push([e3])
    first = hub.drain()
    second = hub.drain()

    assert reporting.from_rows(first) == [e1, e2, e3]
    assert second == []


def test_the_hub_drains_rows_the_driver_unpickles_cheaply() -> None:
    """Issue 11: the drain's reply crosses Ray to the driver. Events built in the hub cost the
    hub 4.7 ms to pickle and the driver 7.2 ms to unpickle per 1,000 points (dataclass
    instances, one Python call each); the rows they come from, 0.2 ms each way. Both ran on
    the cores the training workers use. The pump builds the Events on the driver."""
    import ray

    hub = EventHub()
    handle = _FakeHubHandle(hub)
    reporter = Reporter(HubTransport(handle), {"rank": "0"}, max_age_s=60)
    for step in range(100):
        reporter.metrics({f"m{k}": 0.1 * k for k in range(10)}, step=step)
    reporter.flush()

    rows = hub.drain()

    assert len(rows) == 100
    assert all(type(row) is tuple for row in rows)
    assert all(type(x) in (str, int, float, tuple, dict, type(None)) for r in rows for x in r)
    again = ray.cloudpickle.loads(ray.cloudpickle.dumps(rows))
    events = reporting.from_rows(again)
    assert len(events) == 1000
    assert events[-1] == Event("metric", "m9", 0.9, 99, events[-1].timestamp_ms, {"rank": "0"})


class _FakeRemote:
    def __init__(self, hub: EventHub) -> None:
        self.remote = hub.push


class _FakeHubHandle:
    def __init__(self, hub: EventHub) -> None:
        self.push = _FakeRemote(hub)


def test_hub_transport_pushes_batches_to_the_hub_without_waiting() -> None:
    hub = EventHub()
    reporter = Reporter(HubTransport(_FakeHubHandle(hub)), max_batch=2)

    reporter.metric("a", 1)
    reporter.metric("b", 2)
    deadline = time.monotonic() + 2.0
    got: list[Event] = []
    while len(got) < 2 and time.monotonic() < deadline:
        got += reporting.from_rows(hub.drain())
        time.sleep(0.01)

    assert [e.name for e in got] == ["a", "b"]


def test_a_worker_reporter_pushes_hub_sized_batches_and_a_driver_one_smaller() -> None:
    # Issue 11: each push is a Ray task submission (~1.8 ms of the worker's CPU whatever
    # its size), so a Reporter on the hub batches HUB_MAX_BATCH events; the age limit
    # still bounds how long a point waits.
    hub = EventHub()
    pushed: list[int] = []

    class _Counting(HubTransport):
        def send(self, events: list, wait: bool = False) -> None:
            pushed.append(len(reporting.from_rows(events)))  # points, whatever their rows
            super().send(events, wait)

    reporter = Reporter(_Counting(_FakeHubHandle(hub)), max_age_s=60)
    reporter.metrics({f"m{k}": float(k) for k in range(reporting.HUB_MAX_BATCH - 1)}, step=0)
    time.sleep(0.05)
    assert pushed == []
    reporter.metric("last", 1.0)
    deadline = time.monotonic() + 2.0
    while not pushed and time.monotonic() < deadline:
        time.sleep(0.01)

    assert pushed == [reporting.HUB_MAX_BATCH]
    assert reporter.with_labels(rank="1")._max_batch == reporting.HUB_MAX_BATCH
    assert Reporter(FanOut([]))._max_batch == reporting.MAX_BATCH
    assert Reporter(FanOut([]), max_batch=7)._max_batch == 7


@pytest.mark.parametrize(
    ("value", "finite"),
    [
        (None, True),
        (0.0, True),
        (-3.5, True),
        (math.nan, False),
        (math.inf, False),
        (-math.inf, False),
    ],
)
def test_event_is_finite(value: float | None, finite: bool) -> None:
    assert Event("metric", "m", value).is_finite is finite


def test_event_timestamp_defaults_to_now() -> None:
    before = reporting.now_ms()

    event = Event("progress", "tick")

    assert before <= event.timestamp_ms <= reporting.now_ms()


def test_quiet_reporter_still_delivers_within_max_age_without_another_call() -> None:
    # Issue 11 item 2: ten calls, then quiet: the age limit must fire on a timer,
    # not wait for an eleventh call that may never come.
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=256, max_age_s=0.2)

    for i in range(10):
        reporter.metric("m", float(i), step=i)
    deadline = time.monotonic() + 3.0
    while not sink.batches and time.monotonic() < deadline:
        time.sleep(0.02)
    delivered_after = time.monotonic() - (deadline - 3.0)

    assert [e.step for b in sink.batches for e in b] == list(range(10))
    assert delivered_after < 1.0


def test_timer_flush_keeps_order_with_the_callers_own_flushes() -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=7, max_age_s=0.001)

    for i in range(2_000):
        reporter.metric("m", float(i), step=i)
    reporter.flush()

    assert [e.step for b in sink.batches for e in b] == list(range(2_000))


class _Failing:
    def __init__(self) -> None:
        self.fail = True
        self.batches: list[list[Event]] = []

    def send(self, events: list[Event], wait: bool = False) -> None:
        if self.fail:
            raise OSError("disk full")
        self.batches.append(list(events))


def test_a_timer_flush_that_fails_is_raised_on_the_next_call_and_keeps_the_events() -> None:
    transport = _Failing()
    reporter = Reporter(transport, max_batch=256, max_age_s=0.05)
    reporter.metric("a", 1.0)
    time.sleep(0.4)  # the timer tries, and fails

    with pytest.raises(OSError, match="disk full"):
        reporter.metric("b", 2.0)
    transport.fail = False
    reporter.flush()

    # "a" was kept for the retry; "b" raised, so it was never acknowledged
    assert [e.name for b in transport.batches for e in b] == ["a"]


def test_metrics_builds_the_same_events_as_the_dataclass() -> None:
    """metrics() skips Event.__init__ for speed; what it builds must not differ from it."""
    import pickle

    sink = _Recorder()
    reporter = Reporter(sink, {"rank": "0"}, max_batch=100, max_age_s=60)
    reporter.metrics({"loss": 1, "acc": 0.5}, step=3)
    reporter.flush()
    (got,) = sink.batches
    want = [
        Event("metric", n, float(v), 3, got[0].timestamp_ms, {"rank": "0"})
        for n, v in (("loss", 1), ("acc", 0.5))
    ]
    assert got == want
    assert [repr(e) for e in got] == [repr(e) for e in want]
    assert all(type(e.value) is float for e in got)  # an int reported is stored as a float
    assert pickle.loads(pickle.dumps(got)) == want  # Ray pickles batches to the hub
    with pytest.raises(AttributeError):  # still frozen
        got[0].value = 2.0  # type: ignore[misc]


def test_batches_cross_the_hub_as_rows_and_come_back_equal() -> None:
    """The worker's push and the driver's drain carry plain tuples (cheap to pickle), and
    the pump's Events equal the reported ones, labels and data included."""
    import ray.cloudpickle

    hub = EventHub()
    pushed: list = []
    handle = _FakeHubHandle(hub)
    handle.push.remote = lambda batch: (pushed.append(batch), hub.push(batch))[1]
    sent = [
        Event("metric", "loss", 0.5, 3, 1000, {"rank": "1"}),
        Event("lifecycle", "epoch_end", None, None, 1001, {}, {"epoch": 2}),
    ]
    HubTransport(handle).send(sent)

    assert all(type(row) is tuple for batch in pushed for row in batch)
    rows = ray.cloudpickle.loads(ray.cloudpickle.dumps(pushed[0]))
    assert reporting.from_rows(rows) == sent
    assert reporting.from_rows(hub.drain()) == sent
    hub.push(sent)
    assert reporting.from_rows(hub.drain()) == sent


def test_a_poll_hands_on_what_the_hub_held_at_that_poll_not_at_the_one_before(
    monkeypatch,
) -> None:
    """Issue 11 (driver-kill window): a poll that starts a drain waits a Ray hop for it, so
    each poll hands on what reached the hub before it. Collected only at the next poll,
    every event waited two poll intervals, and a killed driver lost them all."""
    import ray

    from engage.events import DRAIN_HOP_S, EventPump

    hub = EventHub()
    handle = _FakeHubHandle(hub)
    handle.drain = type("Drain", (), {"remote": staticmethod(hub.drain)})
    waits: list[float] = []
    monkeypatch.setattr(ray, "wait", lambda refs, timeout: (waits.append(timeout), (refs, []))[1])
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    sink = _Recorder()
    pump = EventPump(handle, FanOut([sink]))

    for value in (0.5, 0.4):
        hub.push([Event("metric", "loss", value, 1, 1000)])
        assert pump.poll() is True

    assert [[e.value for e in batch] for batch in sink.batches] == [[0.5], [0.4]]
    assert waits == [DRAIN_HOP_S, DRAIN_HOP_S]


def test_a_metrics_call_crosses_the_hub_as_one_row_and_comes_back_as_its_events() -> None:
    """Issue 11: a worker's step pays one tuple per metrics() call, not an Event per point;
    the driver's drain expands it into the same Events the dataclass would build."""
    hub = EventHub()
    pushed: list = []
    handle = _FakeHubHandle(hub)
    handle.push.remote = lambda batch: (pushed.append(batch), hub.push(batch))[1]
    reporter = Reporter(HubTransport(handle), {"rank": "1"}, max_age_s=60)

    reporter.metrics({"loss": 1, "acc": 0.5, "wait": 0.25}, step=3)
    reporter.metrics({"loss": 2}, step=4)
    reporter.metrics({}, step=5)
    reporter.flush()

    (batch,) = pushed
    assert len(batch) == 2
    assert all(type(row) is tuple for row in batch)
    got = reporting.from_rows(hub.drain())
    ts = [e.timestamp_ms for e in got]
    want = [
        Event("metric", n, float(v), s, t, {"rank": "1"})
        for (n, v, s), t in zip(
            [("loss", 1, 3), ("acc", 0.5, 3), ("wait", 0.25, 3), ("loss", 2, 4)], ts, strict=True
        )
    ]
    assert got == want
    assert ts[0] == ts[1] == ts[2]
    assert all(type(e.value) is float for e in got)


def test_max_batch_counts_points_not_calls(clock: _Clock) -> None:
    sink = _Recorder()
    reporter = Reporter(sink, max_batch=20, max_age_s=60)

    reporter.metrics({f"m{k}": float(k) for k in range(10)}, step=0)
    assert reporter._ready == []
    reporter.metrics({f"m{k}": float(k) for k in range(10)}, step=1)
    reporter.flush()

    assert [len(b) for b in sink.batches] == [20]
    assert all(type(e) is Event for e in sink.batches[0])


def test_fanout_hands_rows_as_they_are_and_builds_events_once_for_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11: a sink that reads rows (``emit_rows``) gets the batch as it came; the
    Events are built once, for the sinks that take only Events, in the one sink order."""
    order: list[str] = []

    class Rows:
        def __init__(self) -> None:
            self.batches: list = []

        def emit(self, events: Sequence[Event]) -> None:
            raise AssertionError("a row sink gets rows")

        def emit_rows(self, batch: Sequence) -> None:
            self.batches.append(batch)
            order.append("rows")

    first, second = _Recorder(order, "first"), _Recorder(order, "second")
    rows = Rows()
    built: list[int] = []
    real = reporting.from_rows
    monkeypatch.setattr(reporting, "from_rows", lambda b: (built.append(len(b)), real(b))[1])
    lifecycle = Event("lifecycle", "epoch_end", None, None, 5, {}, {"epoch": 1})
    batch = [
        (reporting.POINTS, ("loss", "acc"), (0.5, 0.25), 3, 4, {"rank": "0"}, None),
        lifecycle,
    ]

    FanOut([first, rows, second]).send(batch)
    FanOut([rows]).send(batch)

    assert order == ["first", "rows", "second", "rows"]
    assert rows.batches == [batch, batch]
    assert built == [2]  # once, for both Event sinks of the first fan-out; never for rows alone
    want = [
        Event("metric", "loss", 0.5, 3, 4, {"rank": "0"}),
        Event("metric", "acc", 0.25, 3, 4, {"rank": "0"}),
        lifecycle,
    ]
    assert first.batches == [want] == second.batches


def test_a_worker_reporting_every_step_pushes_once_per_age_limit_not_by_size() -> None:
    # Issue 11: each push to the hub is a Ray task submission, about 1.4 ms of the worker's
    # CPU at 1,024 points and 1.9 ms at 4,096 (benchmarks/tracking_overhead.py, worker
    # section), so a worker's batch must hold what a training loop reports within the age
    # limit (10 metrics per 2.5 ms step: 2,000 points in 0.5 s), and still pickle small
    # enough for Ray to send it inline (arguments up to 100 KiB skip the object store).
    import ray

    step_s, per_step = 0.0025, 10
    assert reporting.MAX_AGE_S / step_s * per_step <= reporting.HUB_MAX_BATCH

    names = ("train_loss", "train_loss_ema", "lr", *(f"train_aux_{k}" for k in range(7)))
    rows = [
        (
            reporting.POINTS,
            tuple(names),
            tuple(0.1 * k + s for k in range(per_step)),
            s,
            reporting.now_ms(),
            {"rank": "0"},
            None,
        )
        for s in range(reporting.HUB_MAX_BATCH // per_step)
    ]
    assert len(ray.cloudpickle.dumps(rows)) < 100 * 1024


def test_a_buffer_whose_timer_was_dropped_after_a_failure_gets_one_again() -> None:
    # A timer send that fails drops the timer while later events wait in the buffer; the
    # next call must set it again however many events the buffer holds (the Reporter's
    # fast path skips that check only while a timer is set), or they would wait for a call
    # that may never come.
    transport = _Failing()
    reporter = Reporter(transport, max_batch=3, max_age_s=0.5)
    for name in "abc":  # full: the background send fails
        reporter.metric(name, 1.0)
    time.sleep(0.25)
    with pytest.raises(OSError, match="disk full"):
        reporter.metric("x", 0.0)
    reporter.metric("d", 4.0)
    time.sleep(0.3)  # a's timer (at 0.5 s) retries a-c, fails, and drops the timer
    with pytest.raises(OSError, match="disk full"):
        reporter.metric("y", 0.0)
    reporter.metric("f", 6.0)  # two events in the buffer, no timer: this call sets one
    transport.fail = False
    deadline = time.monotonic() + 2.0
    while len([e for b in transport.batches for e in b]) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)

    assert [e.name for b in transport.batches for e in b] == ["a", "b", "c", "d", "f"]


def test_threads_reporting_at_once_lose_and_repeat_nothing_while_sends_take_the_buffer() -> None:
    # The caller appends with no lock (issue 11); sends take the buffer's first rows while
    # other threads append: every point must arrive once, each thread's in its order.
    import threading

    sink = _Recorder()
    reporter = Reporter(sink, max_batch=37, max_age_s=0.001)

    def produce(rank: int) -> None:
        for i in range(3_000):
            reporter.metrics({f"t{rank}": float(i), "x": 0.0}, step=i)

    threads = [threading.Thread(target=produce, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reporter.flush()

    got = [e for b in sink.batches for e in b]
    assert len(got) == 4 * 3_000 * 2
    for rank in range(4):
        assert [e.step for e in got if e.name == f"t{rank}"] == list(range(3_000))
