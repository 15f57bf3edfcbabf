"""The driver's pump hands the hub's rows straight to the tracking sinks (issue 11, item 7).

A worker's ``metrics()`` call crosses the hub as one row (names, values, step, timestamp,
labels). Building an Event per point on the driver and then taking each one apart again
for the spool's columns was most of the driver's 1.6-2.5 µs a point, CPU on the cores the
training workers use (benchmarks/tracking_driver_path.py). :meth:`MetricSink.emit_rows` and :meth:`HealthSink.emit_rows` read
the rows as they are; what reaches the spool, the replay rule, the health tags and the
order must be exactly what the Event path gives.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest

from engage import events as reporting
from engage.events import Event, EventPump, FanOut
from engage.runtime.context import NullObserver
from engage.tracking import PipelineRun, Spool
from engage.tracking.sinks import HealthSink, MetricSink

P = reporting.POINTS
RANK0 = {"rank": "0"}


@pytest.fixture
def spool(tmp_path: Path) -> Spool:
    s = Spool(tmp_path / "spool.db")
    yield s
    s.close()


def _run(spool: Spool) -> PipelineRun:
    return PipelineRun(spool, spool.create_run("sqlite:///x.db", "e", "r", {}), "u", "e")


def _blobs(spool: Spool, run: PipelineRun) -> list[tuple]:
    return spool._read(
        "SELECT kind, n, ts, data FROM outbox WHERE run = ? ORDER BY seq", [run.local_id]
    )


def _points(spool: Spool, run: PipelineRun) -> list[tuple]:
    return [(e.kind, e.key, e.value, e.step, e.ts) for e in spool.pending(run.local_id, 10_000)]


def _batches() -> list[list]:
    """Poll-sized batches mixing every kind of entry a hub or a driver Reporter holds."""
    rank1, client = {"rank": "1"}, {"rank": "0", "client": "c3"}
    first = [
        (P, ("loss", "acc"), (0.5, 0.25), 1, 1_000, RANK0, None),
        (P, ("loss", "acc"), (0.4, 0.5), 2, 1_001, RANK0, None),
        (P, ("loss",), (9.0,), 2, 1_002, rank1, None),  # a per-worker copy: monitor only
        (P, ("loss",), (8.0,), 2, 1_003, client, None),  # a per-client series
        (P, ("test_loss",), (0.3,), None, 1_004, RANK0, None),  # no step: 0 in the spool
        ("progress", "step", None, None, 1_005, RANK0, {"epoch": 1}),
        ("metric", "lr", 0.01, 2, 1_006, RANK0, {}),  # an Event pushed as a row
        ("metric", "empty", None, 3, 1_007, RANK0, {}),  # no value: never spooled
        Event("lifecycle", "epoch_end", None, None, 1_008, RANK0, {"epoch": 1}),
        Event("metric", "val_loss", 0.45, 2, 1_009, RANK0),
        (P, ("grad", "grad"), (1.0, 2.0), 3, 1_010, RANK0, None),  # one name twice
    ]
    replay = [  # a restart replays step 2 and goes on
        (P, ("loss", "acc"), (0.4, 0.5), 2, 1_100, {"rank": "0"}, None),
        (P, ("loss", "acc", "new"), (0.3, 0.6, 1.0), 3, 1_101, {"rank": "0"}, None),
        ("metric", "lr", 0.02, 2, 1_102, {"rank": "0"}, {}),
        Event("metric", "val_loss", 0.44, 3, 1_103, {"rank": "0"}),
        (P, ("loss",), (0.2,), 4, 1_104, RANK0, None),
        (P, ("loss",), (0.1,), 1, 1_105, RANK0, None),  # far behind: a replay
    ]
    nonfinite = [
        (P, ("train_loss", "acc"), (math.nan, 0.7), 5, 1_200, RANK0, None),
        (P, ("grad_norm",), (math.inf,), 6, 1_201, RANK0, None),
        (P, ("big", "bigger"), (1e308, 1e308), 7, 1_202, RANK0, None),  # sums to inf
        Event("metric", "val_loss", -math.inf, 7, 1_203, RANK0),
        Event("lifecycle", "restart", None, None, 1_204, {}, {"attempt": 2, "epoch": 1}),
    ]
    return [pickle.loads(pickle.dumps(b)) for b in (first, replay, nonfinite)]


def test_rows_spool_the_same_blobs_and_drop_the_same_replays_as_events(tmp_path: Path) -> None:
    by_events, by_rows = Spool(tmp_path / "a.db"), Spool(tmp_path / "b.db")
    try:
        run_e, run_r = _run(by_events), _run(by_rows)
        sink_e, sink_r = MetricSink(run_e), MetricSink(run_r)
        for batch in _batches():
            sink_e.emit(reporting.from_rows(batch))
            sink_r.emit_rows(batch)

        assert repr(_points(by_rows, run_r)) == repr(_points(by_events, run_e))  # NaN too
        assert [b[1:] for b in _blobs(by_rows, run_r)] == [b[1:] for b in _blobs(by_events, run_e)]
        assert sink_r.replayed == sink_e.replayed == 5
        keys = [p[1] for p in _points(by_rows, run_r)]
        assert "empty" not in keys
        assert keys.count("grad") == 1
        assert ("metric", "test_loss", 0.3, 0, 1_004) in _points(by_rows, run_r)
    finally:
        by_events.close()
        by_rows.close()


def test_events_and_rows_share_one_replay_rule(spool: Spool) -> None:
    """The driver's bus gets both (its own Events, the workers' rows): a step spooled by one
    is a replay for the other."""
    run = _run(spool)
    sink = MetricSink(run)

    sink.emit([Event("metric", "loss", 0.5, 3, 10, RANK0)])
    sink.emit_rows([(P, ("loss", "acc"), (0.4, 0.1), 3, 11, RANK0, None)])
    sink.emit_rows([(P, ("loss",), (0.3,), 4, 12, RANK0, None)])
    sink.emit([Event("metric", "loss", 0.2, 4, 13, RANK0), Event("metric", "acc", 0.2, 4, 14)])

    assert _points(spool, run) == [
        ("metric", "loss", 0.5, 3, 10),
        ("metric", "acc", 0.1, 3, 11),
        ("metric", "loss", 0.3, 4, 12),
        ("metric", "acc", 0.2, 4, 14),
    ]
    assert sink.replayed == 2


def test_health_rows_raise_what_events_raise() -> None:
    class Tags:
        def __init__(self) -> None:
            self.tags: dict[str, str] = {}

        def set_tags(self, tags: dict[str, str]) -> None:
            self.tags.update(tags)

        def log_text(self, text: str, artifact_file: str) -> None:
            raise AssertionError("no text artifact in these batches")

    run_e, run_r, published_e, published_r = Tags(), Tags(), [], []
    sink_e = HealthSink(run_e, published_e.extend)
    sink_r = HealthSink(run_r, published_r.extend)
    for batch in _batches():
        sink_e.emit(reporting.from_rows(batch))
        sink_r.emit_rows(batch)

    assert (
        sink_r.warnings
        == sink_e.warnings
        == [
            "train_loss is nan at step 5",
            "grad_norm is inf at step 6",
            "val_loss is -inf at step 7",
        ]
    )
    assert run_r.tags == run_e.tags
    assert "engage.restarts" in run_r.tags
    assert [(e.kind, e.name, dict(e.data)) for e in published_r] == [
        (e.kind, e.name, dict(e.data)) for e in published_e
    ]


def _no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("an Event was built for a sink that reads rows")

    monkeypatch.setattr(reporting, "_metric_events", refuse)
    monkeypatch.setattr(reporting, "from_rows", refuse)


def test_the_pump_hands_rows_to_the_tracking_sinks_without_building_events(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost this removes: an Event per point built, then read field by field again."""
    import ray

    run = _run(spool)
    rows = [
        (P, tuple(f"m{k}" for k in range(10)), tuple(range(10)), s, s, RANK0, None)
        for s in range(100)
    ]

    class Hub:
        def __init__(self) -> None:
            self.drain = type("Drain", (), {"remote": staticmethod(lambda: rows)})

    monkeypatch.setattr(ray, "wait", lambda refs, timeout: (refs, []))
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    published: list = []
    sinks = [MetricSink(run), HealthSink(run, published.extend), NullObserver()]
    pump = EventPump(Hub(), FanOut(sinks))
    _no_events(monkeypatch)

    assert pump.poll() is True
    assert len(_points(spool, run)) == 1_000
    assert published == []


def test_a_driver_reporter_spools_without_building_events(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(spool)
    reporter = reporting.Reporter(FanOut([MetricSink(run)]), RANK0, max_age_s=60)
    _no_events(monkeypatch)

    for step in range(30):
        reporter.metrics({"loss": 1.0 / (step + 1), "acc": 0.5}, step=step)
    reporter.flush()

    assert len(_points(spool, run)) == 60


def test_a_run_without_columns_still_gets_its_events() -> None:
    """A MetricRun that only has ``log_metric_events`` (tests' fakes, older callers)."""

    class Events:
        def __init__(self) -> None:
            self.events: list[Event] = []

        def log_metric_events(self, events: Sequence[Event]) -> None:
            self.events.extend(events)

    run = Events()
    sink = MetricSink(run)
    sink.emit_rows([(P, ("loss", "acc"), (0.5, 0.25), 1, 7, RANK0, None)])
    sink.emit_rows([(P, ("loss",), (0.5,), 1, 8, RANK0, None)])

    assert run.events == [
        Event("metric", "loss", 0.5, 1, 7, RANK0),
        Event("metric", "acc", 0.25, 1, 7, RANK0),
    ]
    assert sink.replayed == 1


def test_columns_spool_the_blob_of_the_same_events(tmp_path: Path) -> None:
    a, b = Spool(tmp_path / "a.db"), Spool(tmp_path / "b.db")
    try:
        run_a, run_b = _run(a), _run(b)
        events = [
            Event("metric", f"m{i % 3}", i / 7, i if i % 4 else None, 100 + i) for i in range(2_345)
        ]
        run_a.log_metric_events(events)
        run_b.log_metric_columns(
            [e.name for e in events],
            [e.value for e in events],
            [e.step for e in events],
            [e.timestamp_ms for e in events],
        )
        run_b.log_metric_columns([], [], [], [])

        assert [x[1:] for x in _blobs(b, run_b)] == [x[1:] for x in _blobs(a, run_a)]
    finally:
        a.close()
        b.close()
