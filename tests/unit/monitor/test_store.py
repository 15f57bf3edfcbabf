"""The event store's contract, run over SQLite and PostgreSQL (the same suite for both)."""

from __future__ import annotations

import math
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.errors import EngageError
from engage.monitor._schema import NewEvent, metadata
from engage.monitor.store import EventStore, resolve_events_url

# -- backends -------------------------------------------------------------------------------------


def _psql(port: str, *sql: str) -> None:
    user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    command = [*user, "psql", "-q", "-v", "ON_ERROR_STOP=1", "-p", port, "-d", "postgres"]
    for statement in sql:
        command += ["-c", statement]
    subprocess.run(command, check=True, capture_output=True, text=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A role with a password and its own database on Debian's cluster (started if down)."""
    if not shutil.which("pg_lsclusters") or not shutil.which("pg_ctlcluster"):
        pytest.skip(
            "PostgreSQL binaries not installed (apt-get install postgresql; make test does)"
        )
    listed = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
    clusters = [line.split() for line in listed.stdout.splitlines() if line.strip()]
    if not clusters:
        pytest.skip("no PostgreSQL cluster (apt-get install postgresql; make test does)")
    version, name, port, status = clusters[0][:4]
    started = status != "online"
    if started:  # pg_ctlcluster drops to the postgres user: PostgreSQL refuses to run as root
        subprocess.run(["pg_ctlcluster", version, name, "start"], check=True)
    role, password = f"engage_ev_{secrets.token_hex(4)}", secrets.token_hex(12)
    _psql(
        port,
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}'",
        f"CREATE DATABASE {role} OWNER {role}",
    )
    try:
        # TCP with a password: root's peer authentication over the socket fails.
        yield f"postgresql://{role}:{password}@127.0.0.1:{port}/{role}"
    finally:
        _psql(port, f"DROP DATABASE IF EXISTS {role} WITH (FORCE)", f"DROP ROLE IF EXISTS {role}")
        if started:
            subprocess.run(["pg_ctlcluster", version, name, "stop"], check=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'events.db'}"
    return resolve_events_url(tmp_path, request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(url: str) -> Iterator[EventStore]:
    made = EventStore(url)
    yield made
    if made._ready:  # leave the shared PostgreSQL database empty for the next test
        metadata.drop_all(made._engine)
    made.close()


def _event(run_id: str, name: str, ts: float, **data) -> NewEvent:
    return NewEvent(run_id, "job-a", "lifecycle", name, ts, message=f"{name} at {ts}", data=data)


def _alert(run_id: str, state: str, ts: float, value: float = 1.0, **labels: str) -> NewEvent:
    data = {"rule": "LossNaN", "state": state, "severity": "critical", "summary": "loss is NaN"}
    return _event(run_id, "alert", ts, value=value, labels=labels, **data)


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


# -- jobs -----------------------------------------------------------------------------------------


def test_a_started_job_is_running_until_it_ends(store: EventStore) -> None:
    store.job_started("r1", "job-a", "http://127.0.0.1:1/metrics", started_at=100.0)
    store.job_started("r2", "job-b", started_at=200.0)

    running = store.running_jobs()
    store.job_ended("r1", "failed", at=150.0)

    assert [(j.run_id, j.state, j.pid) for j in running] == [
        ("r2", "running", os.getpid()),
        ("r1", "running", os.getpid()),
    ]
    assert [j.run_id for j in store.running_jobs()] == ["r2"]
    ended = store.job("r1")
    assert (ended.state, ended.ended_at, ended.metrics_url) == (
        "failed",
        150.0,
        "http://127.0.0.1:1/metrics",
    )
    assert [j.run_id for j in store.jobs(limit=1)] == ["r2"]


def test_a_running_job_whose_process_is_gone_shows_as_lost_on_its_host(store: EventStore) -> None:
    dead = _dead_pid()
    store.job_started("here", "job-a", pid=dead, started_at=1.0)
    store.job_started("elsewhere", "job-a", pid=dead, host="another-host", started_at=2.0)

    states = {j.run_id: j.state for j in store.running_jobs()}
    reaped = store.reap_lost()

    assert states == {"here": "lost", "elsewhere": "running"}
    assert [j.run_id for j in reaped] == ["here"]
    assert store.job("here").state == "lost"
    assert store.reap_lost() == []


def test_progress_is_kept_on_the_job_row(store: EventStore) -> None:
    store.job_started("r1", "job-a")

    store.note_progress("r1", stage="train")
    store.note_progress("r1", epoch=4)

    job = store.job("r1")
    assert (job.stage, job.epoch) == ("train", 4)


# -- events ---------------------------------------------------------------------------------------


def test_events_filter_by_run_kind_and_time_and_keep_the_newest(store: EventStore) -> None:
    store.record([_event("r1", "stage", float(t), stage=f"s{t}") for t in range(5)])
    store.record([_event("r2", "stage", 10.0), NewEvent("r2", "job-b", "metric", "m", 11.0)])

    newest = store.events(run_id="r1", limit=2)
    since = store.events(since=4.0, kinds=["lifecycle"])

    assert [(e.ts, e.data["stage"]) for e in newest] == [(3.0, "s3"), (4.0, "s4")]
    assert [(e.run_id, e.ts) for e in since] == [("r1", 4.0), ("r2", 10.0)]
    assert newest[0].message == "stage at 3.0"


def test_non_finite_values_in_event_data_are_stored(store: EventStore) -> None:
    store.record([_event("r1", "training_health", 1.0, loss=math.nan, nested={"x": (1, math.inf)})])

    (event,) = store.events()

    assert event.data == {"loss": "nan", "nested": {"x": [1, "inf"]}}


# -- alerts ---------------------------------------------------------------------------------------


def test_one_open_alert_per_run_rule_and_labels(store: EventStore) -> None:
    store.record([_alert("r1", "firing", 1.0, value=1.0, rank="0")])
    store.record([_alert("r1", "firing", 2.0, value=2.0, rank="0")])  # still firing
    store.record([_alert("r1", "firing", 3.0, rank="1"), _alert("r2", "firing", 3.0, rank="0")])

    open_r1 = store.open_alerts("r1")

    assert [(a.labels, a.started_at, a.value) for a in open_r1] == [
        ({"rank": "1"}, 3.0, 1.0),
        ({"rank": "0"}, 1.0, 2.0),
    ]
    assert len(store.open_alerts()) == 3
    assert len(store.events(kinds=["lifecycle"])) == 4  # an alert is also an event


def test_a_resolved_alert_closes_and_a_new_firing_opens_a_new_row(store: EventStore) -> None:
    store.record([_alert("r1", "firing", 1.0)])
    store.record([_alert("r1", "resolved", 5.0)])
    store.record([_alert("r1", "firing", 9.0, value=math.nan)])

    history = store.alerts("r1")

    assert [(a.state, a.started_at, a.resolved_at, a.value) for a in history] == [
        ("firing", 9.0, None, None),
        ("resolved", 1.0, 5.0, 1.0),
    ]
    assert history[1].severity == "critical"
    assert history[1].summary == "loss is NaN"


def test_ending_a_job_resolves_its_open_alerts(store: EventStore) -> None:
    store.job_started("r1", "job-a")
    store.record([_alert("r1", "firing", 1.0)])

    store.job_ended("r1", "finished", at=7.0)

    assert store.open_alerts() == []
    assert store.alerts()[0].resolved_at == 7.0


# -- several processes ----------------------------------------------------------------------------

_WRITER = """
import sys
from engage.monitor._schema import NewEvent
from engage.monitor.store import EventStore
store = EventStore(sys.argv[1])
for i in range(40):
    alert = {"rule": "R", "state": "firing", "summary": "s", "labels": {}}
    store.record([NewEvent("r1", "j", "lifecycle", "alert", float(i), data=alert)])
"""


def test_several_processes_write_at_once_and_agree_on_one_open_alert(url: str, store) -> None:
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, url]) for _ in range(3)]

    codes = [w.wait(timeout=120) for w in writers]

    assert codes == [0, 0, 0]
    assert len(store.events(limit=1000)) == 120
    assert len(store.open_alerts()) == 1


# -- configuration --------------------------------------------------------------------------------


def test_the_url_comes_from_the_flag_then_the_environment_then_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGAGE_EVENTS_URI", raising=False)
    assert resolve_events_url(tmp_path) == f"sqlite:///{tmp_path / 'events.db'}"
    monkeypatch.setenv("ENGAGE_EVENTS_URI", "postgresql://u:p@db/events")
    assert resolve_events_url(tmp_path) == "postgresql+psycopg2://u:p@db/events"
    assert resolve_events_url(tmp_path, "sqlite:///x.db") == "sqlite:///x.db"


def test_an_unreachable_database_is_one_error_without_the_password() -> None:
    store = EventStore("postgresql+psycopg2://u:hunter2@127.0.0.1:1/events")

    with pytest.raises(EngageError) as caught:
        store.running_jobs()

    assert "cannot use the event store at postgresql+psycopg2://u:***@127.0.0.1:1/events" in str(
        caught.value
    )
    assert "hunter2" not in str(caught.value)
