"""The live view's data, from a real job endpoint (MonitorSink fed by events; no Ray)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from engage.events import Event
from engage.monitor import MonitorSink, register_target
from engage.monitor.live import collect, parse_samples
from engage.monitor.store import EventStore


def training_events(epoch: int = 3) -> list[Event]:
    """What a 2-worker job reports mid-training."""
    worker = [
        Event("metric", name, value, labels={"rank": rank})
        for rank in ("0", "1")
        for name, value in (
            ("step_seconds", 0.05),
            ("data_wait_seconds", 0.01),
            ("compute_seconds", 0.04),
        )
    ]
    return [
        Event("lifecycle", "stage", data={"stage": "train"}),
        Event("lifecycle", "train_start", labels={"rank": "0"}, data={"world_size": 2}),
        Event("metric", "epoch", float(epoch)),
        Event("metric", "train_loss", 0.4123),
        Event("metric", "val_loss", 0.5),
        Event("metric", "val_f1", 0.7),
        Event("metric", "val_accuracy", 0.875),
        Event("metric", "samples_per_second", 1234.0),
        Event("lifecycle", "alert", data={"rule": "DataBound", "state": "firing"}),
        *worker,
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / ".engage"


@pytest.fixture
def store(home: Path) -> EventStore:
    return EventStore.open(home, f"sqlite:///{home / 'events.db'}")


@pytest.fixture
def job(home: Path) -> Iterator[MonitorSink]:
    sink = MonitorSink("job-a", "r1", home)
    sink.start()
    sink.emit(training_events())
    sink.metrics.set_spool(7, 2.0)
    yield sink
    sink.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_job_shows_its_key_metrics(home: Path, store: EventStore, job) -> None:
    store.job_started("r1", "job-a", job.endpoint.url)

    view = collect(home, store)

    (row,) = view.jobs
    assert (row.job, row.run_id, row.state, row.stage) == ("job-a", "r1", "running", "train")
    assert (row.epoch, row.train_loss, row.val_metric) == (3, 0.4123, ("val_accuracy", 0.875))
    assert (row.samples_per_second, row.workers, row.spool_depth) == (1234.0, 2, 7)
    assert row.stall_ratio == pytest.approx(0.2)
    assert row.comm_blocked_ratio is None  # its all-reduce is not timed
    assert 0 <= row.since_last_step_s < 60
    assert row.firing == ("DataBound",)


def test_a_job_with_timed_all_reduce_shows_its_blocked_share(
    home: Path, store: EventStore, job
) -> None:
    job.emit([Event("metric", "allreduce_blocked_seconds", 0.02, labels={"rank": r}) for r in "01"])
    store.job_started("r1", "job-a", job.endpoint.url)

    (row,) = collect(home, store).jobs

    assert row.comm_blocked_ratio == pytest.approx(0.4)  # 0.02 of each 0.05 s step


def test_a_job_known_only_from_discovery_is_shown(home: Path, job) -> None:
    view = collect(home, store=None)

    assert [(j.run_id, j.state, j.epoch) for j in view.jobs] == [("r1", "running", 3)]


def test_an_endpoint_that_does_not_answer_is_unreachable_not_an_error(
    home: Path, store: EventStore
) -> None:
    register_target(home, "job-b", "r2", f"127.0.0.1:{closed_port()}", {})
    store.job_started("r2", "job-b")
    store.note_progress("r2", stage="train", epoch=5)

    (row,) = collect(home, store, timeout_s=1.0).jobs

    assert (row.run_id, row.state, row.stage, row.epoch) == ("r2", "unreachable", "train", 5)
    assert row.error


def test_a_running_job_whose_process_is_gone_is_lost(home: Path, store: EventStore) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store.job_started("r3", "job-c", pid=gone.pid)

    (row,) = collect(home, store).jobs

    assert (row.run_id, row.state) == ("r3", "lost")


def test_a_stale_discovery_file_of_an_ended_job_is_not_shown(home: Path, store: EventStore) -> None:
    register_target(home, "job-d", "r4", f"127.0.0.1:{closed_port()}", {})  # SIGKILLed job's file
    store.job_started("r4", "job-d")
    store.job_ended("r4", "killed")

    assert collect(home, store, timeout_s=1.0).jobs == []


def test_open_alerts_come_from_the_store(home: Path, store: EventStore) -> None:
    from engage.monitor.store_sink import StoreSink

    StoreSink(store, "job-a", "r1").emit(
        [Event("lifecycle", "alert", data={"rule": "LossNaN", "state": "firing", "summary": "x"})]
    )

    view = collect(home, store)

    assert [(a.rule, a.run_id) for a in view.alerts] == [("LossNaN", "r1")]
    assert view.taken_at == pytest.approx(time.time(), abs=5)


def test_parse_samples_reads_counters_and_histograms(job) -> None:
    text = generate_latest(job.registry).decode()

    samples = parse_samples(text)

    assert samples["engage_steps_total"][0] == ({"job": "job-a", "run_id": "r1", "rank": "0"}, 1.0)
    assert "engage_step_seconds_bucket" in samples
