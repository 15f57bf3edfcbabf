"""The event store: jobs, their lifecycle events and alerts, through SQLAlchemy.

SQLite under ``<ENGAGE_HOME>/events.db`` by default (WAL, a busy timeout, and write
transactions that take the lock up front so several processes can write at once);
PostgreSQL, or any SQLAlchemy URL, through ``ENGAGE_EVENTS_URI``. The schema is created
on first use. The dashboard and ``engage monitor`` read through the query methods here.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Engine, and_, create_engine, event, insert, select, text, update
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from engage import env_vars
from engage.errors import EngageError
from engage.monitor._schema import (
    AlertRecord,
    EventRecord,
    JobRecord,
    NewEvent,
    alerts,
    events,
    jobs,
    metadata,
)
from engage.paths import private_file

TERMINAL_STATES = ("finished", "failed", "killed", "lost")
_BUSY_TIMEOUT_MS = 30_000
_SCHEMA_LOCK = 0x656E67616765  # PostgreSQL advisory lock key ("engage") around CREATE TABLE


def resolve_events_url(home: Path, override: str | None = None) -> str:
    """flag > ENGAGE_EVENTS_URI > ``sqlite:///<home>/events.db``."""
    url = override or env_vars.ENGAGE_EVENTS_URI.get()
    if not url:
        return f"sqlite:///{home / 'events.db'}"
    if url.startswith(("postgresql://", "postgres://")):
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; engage ships psycopg2.
        url = "postgresql+psycopg2://" + url.split("://", 1)[1]
    return url


class EventStore:
    """Jobs, events and alerts of every engage job that shares this store.

    Parameters
    ----------
    url
        A SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg2://...``).

    Raises
    ------
    EngageError
        From the constructor and from every read or write the database refuses, with the
        URL (password hidden) and the database's reason.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self._engine = _make_engine(url)
        except (SQLAlchemyError, ImportError, ValueError) as exc:
            raise _store_error(url, exc) from None
        self._ready = False

    @classmethod
    def open(cls, home: Path, url: str | None = None) -> EventStore:
        """The store for ``home`` (see :func:`resolve_events_url`)."""
        return cls(resolve_events_url(home, url))

    @property
    def display_url(self) -> str:
        """The store's URL with any password hidden, for messages and displays."""
        return make_url(self.url).render_as_string(hide_password=True)

    def exists(self) -> bool:
        """False only for a SQLite file that nobody has created yet (reads need not create it)."""
        database = make_url(self.url).database
        return not self.url.startswith("sqlite") or bool(database and Path(database).exists())

    def close(self) -> None:
        """Close the store's database connections."""
        self._engine.dispose()

    # -- writes ------------------------------------------------------------------------------
    def job_started(
        self,
        run_id: str,
        job: str,
        metrics_url: str | None = None,
        *,
        started_at: float | None = None,
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        """Record a job as running on this host and process (unless told otherwise)."""
        row = {
            "job": job,
            "state": "running",
            "started_at": started_at or time.time(),
            "ended_at": None,
            "metrics_url": metrics_url,
            "host": host or socket.gethostname(),
            "pid": pid if pid is not None else os.getpid(),
        }
        with self._begin() as conn:
            done = conn.execute(update(jobs).where(jobs.c.run_id == run_id).values(**row))
            if done.rowcount == 0:
                conn.execute(insert(jobs).values(run_id=run_id, **row))

    def job_ended(self, run_id: str, state: str, at: float | None = None) -> None:
        """Mark a job finished, failed or killed; its alerts still open are resolved.

        Raises
        ------
        ValueError
            If ``state`` is not one of :data:`TERMINAL_STATES`.
        EngageError
            If the store refuses the write.
        """
        if state not in TERMINAL_STATES:
            raise ValueError(f"state must be one of {TERMINAL_STATES}, not {state!r}")
        at = at or time.time()
        with self._begin() as conn:
            conn.execute(
                update(jobs).where(jobs.c.run_id == run_id).values(state=state, ended_at=at)
            )
            conn.execute(
                update(alerts)
                .where(and_(alerts.c.run_id == run_id, alerts.c.state == "firing"))
                .values(state="resolved", resolved_at=at)
            )

    def mark_lost(self, run_id: str, at: float | None = None) -> bool:
        """Mark a still-running job lost (its process or endpoint is gone); True if it was."""
        with self._begin() as conn:
            done = conn.execute(
                update(jobs)
                .where(and_(jobs.c.run_id == run_id, jobs.c.state == "running"))
                .values(state="lost", ended_at=at or time.time())
            )
        return done.rowcount > 0

    def note_progress(
        self, run_id: str, *, stage: str | None = None, epoch: int | None = None
    ) -> None:
        """Keep a job's current stage and last epoch (what the live view shows offline)."""
        values = {k: v for k, v in (("stage", stage), ("epoch", epoch)) if v is not None}
        if values:
            with self._begin() as conn:
                conn.execute(update(jobs).where(jobs.c.run_id == run_id).values(**values))

    def record(self, new_events: Sequence[NewEvent]) -> None:
        """Append events; ``alert`` events also open, update or resolve their alert row."""
        if not new_events:
            return
        for attempt in (1, 2):
            try:
                with self._begin() as conn:
                    conn.execute(insert(events), [_event_row(e) for e in new_events])
                    for e in new_events:
                        if e.name == "alert":
                            _apply_alert(conn, e)
                return
            except IntegrityError:
                if attempt == 2:  # another writer opened the same alert twice in a row
                    raise

    # -- queries -----------------------------------------------------------------------------
    def running_jobs(self) -> list[JobRecord]:
        """Jobs recorded as running, newest first; those whose process is gone are "lost"."""
        query = select(jobs).where(jobs.c.state == "running").order_by(jobs.c.started_at.desc())
        return [_job(row) for row in self._rows(query)]

    def jobs(self, limit: int = 50) -> list[JobRecord]:
        """The newest ``limit`` jobs in any state, newest first (running ones whose process is gone
        read as "lost").

        Raises
        ------
        EngageError
            If the store cannot be read.
        """
        query = select(jobs).order_by(jobs.c.started_at.desc()).limit(limit)
        return [_job(row) for row in self._rows(query)]

    def job(self, run_id: str) -> JobRecord | None:
        """The job of run ``run_id``, or None if the store has none.

        Raises
        ------
        EngageError
            If the store cannot be read.
        """
        rows = self._rows(select(jobs).where(jobs.c.run_id == run_id))
        return _job(rows[0]) if rows else None

    def reap_lost(self) -> list[JobRecord]:
        """Persist "lost" for running jobs of this host whose process is gone."""
        lost = [j for j in self.running_jobs() if j.state == "lost"]
        return [j for j in lost if self.mark_lost(j.run_id)]

    def events(
        self,
        run_id: str | None = None,
        kinds: Iterable[str] | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[EventRecord]:
        """The newest ``limit`` events matching, oldest first."""
        query = select(events)
        if run_id is not None:
            query = query.where(events.c.run_id == run_id)
        if kinds is not None:
            query = query.where(events.c.kind.in_(list(kinds)))
        if since is not None:
            query = query.where(events.c.ts >= since)
        query = query.order_by(events.c.ts.desc(), events.c.id.desc()).limit(limit)
        return [EventRecord(**row._mapping) for row in reversed(self._rows(query))]

    def open_alerts(self, run_id: str | None = None) -> list[AlertRecord]:
        """Every firing alert (of run ``run_id`` if given), newest first.

        Raises
        ------
        EngageError
            If the store cannot be read.
        """
        return self._alerts(run_id, only_open=True, limit=None)

    def alerts(self, run_id: str | None = None, limit: int = 100) -> list[AlertRecord]:
        """The newest ``limit`` alerts, firing or resolved, of ``run_id`` if given; newest first.

        Raises
        ------
        EngageError
            If the store cannot be read.
        """
        return self._alerts(run_id, only_open=False, limit=limit)

    def _alerts(self, run_id: str | None, only_open: bool, limit: int | None) -> list[AlertRecord]:
        query = select(alerts).order_by(alerts.c.started_at.desc(), alerts.c.id.desc())
        if run_id is not None:
            query = query.where(alerts.c.run_id == run_id)
        if only_open:
            query = query.where(alerts.c.state == "firing")
        if limit is not None:
            query = query.limit(limit)
        return [_alert(row) for row in self._rows(query)]

    # -- plumbing ----------------------------------------------------------------------------
    def _begin(self):
        self._ensure_schema()
        return self._engine.begin()

    def _rows(self, query: Any) -> list[Any]:
        self._ensure_schema()
        try:
            with self._engine.connect() as conn:
                return list(conn.execute(query))
        except SQLAlchemyError as exc:
            raise _store_error(self.url, exc) from None

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
        delay = 0.02
        while True:
            try:
                self._create_schema()
                break
            except OperationalError as exc:
                # Opening a fresh SQLite file while other processes switch it to WAL can report
                # "database is locked" without waiting on the busy timeout; that one is retried.
                if "locked" not in str(exc.orig) or time.monotonic() > deadline:
                    raise _store_error(self.url, exc) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except (SQLAlchemyError, OSError) as exc:
                raise _store_error(self.url, exc) from None
        self._ready = True

    def _create_schema(self) -> None:
        if self.url.startswith("sqlite"):
            database = make_url(self.url).database
            if database and database != ":memory:":
                private_file(Path(database))  # 0600 in a 0700 folder (engage.paths)
        with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":  # concurrent CREATE TABLE races otherwise
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
            metadata.create_all(conn, checkfirst=True)


def _make_engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" hook below opens transactions
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # switching needs a lock
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock at BEGIN, where the busy timeout applies; a deferred
        # transaction that reads and then writes fails at once with "database is locked".
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _store_error(url: str, exc: BaseException) -> EngageError:
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:
        shown = "<unparseable URL>"
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return EngageError(
        f"cannot use the event store at {shown}: {detail}",
        hint="check ENGAGE_EVENTS_URI (a SQLAlchemy URL) or that ENGAGE_HOME is writable",
    )


def _event_row(e: NewEvent) -> dict[str, Any]:
    return {
        "ts": e.ts,
        "run_id": e.run_id,
        "job": e.job,
        "kind": e.kind,
        "name": e.name,
        "severity": e.severity,
        "message": e.message,
        "data": _jsonable(e.data),
    }


def _apply_alert(conn: Connection, e: NewEvent) -> None:
    data = e.data
    labels = {str(k): str(v) for k, v in (data.get("labels") or {}).items()}
    key = json.dumps(labels, sort_keys=True)
    rule = str(data.get("rule", "unknown"))
    match = and_(
        alerts.c.run_id == e.run_id,
        alerts.c.rule == rule,
        alerts.c.labels_key == key,
        alerts.c.state == "firing",
    )
    value = _finite(data.get("value"))
    if data.get("state") == "resolved":
        conn.execute(update(alerts).where(match).values(state="resolved", resolved_at=e.ts))
        return
    fields = {
        "severity": str(data.get("severity", e.severity)),
        "summary": str(data.get("summary", e.message)),
        "value": value,
    }
    if conn.execute(update(alerts).where(match).values(**fields)).rowcount == 0:
        conn.execute(
            insert(alerts).values(
                run_id=e.run_id,
                job=e.job,
                rule=rule,
                state="firing",
                started_at=e.ts,
                labels=labels,
                labels_key=key,
                **fields,
            )
        )


def _job(row: Any) -> JobRecord:
    record = JobRecord(**row._mapping)
    if record.state == "running" and not _process_alive(record.host, record.pid):
        return JobRecord(**{**row._mapping, "state": "lost"})
    return record


def _process_alive(host: str | None, pid: int | None) -> bool:
    """Only a process on this host can be checked; elsewhere assume it runs."""
    if not pid or host != socket.gethostname():
        return True
    return psutil.pid_exists(pid)


def _alert(row: Any) -> AlertRecord:
    fields = dict(row._mapping)
    fields.pop("labels_key")
    return AlertRecord(**fields)


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _jsonable(value: Any) -> Any:
    """Event data as strict JSON (PostgreSQL refuses NaN; numpy scalars become floats)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    try:
        return _jsonable(float(value))
    except (TypeError, ValueError):
        return str(value)
