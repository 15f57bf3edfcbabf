"""The event store's tables (SQLAlchemy Core) and the records its queries return.

Table names carry an ``engage_`` prefix: at scale the store may share a PostgreSQL
database with MLflow, which has a ``jobs`` table of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Column, Float, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

jobs = Table(
    "engage_jobs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("job", String(200), nullable=False),
    Column("state", String(16), nullable=False),  # running|finished|failed|killed|lost
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("metrics_url", String(300)),
    Column("host", String(255)),
    Column("pid", Integer),
    Column("stage", String(32)),
    Column("epoch", Integer),
)

events = Table(
    "engage_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("job", String(200), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("name", String(64), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("data", JSON, nullable=False),
    Index("ix_engage_events_run_ts", "run_id", "ts"),
    Index("ix_engage_events_ts", "ts"),
)

alerts = Table(
    "engage_alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("job", String(200), nullable=False),
    Column("rule", String(200), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("state", String(16), nullable=False),  # firing|resolved
    Column("started_at", Float, nullable=False),
    Column("resolved_at", Float),
    Column("summary", Text, nullable=False),
    Column("value", Float),
    Column("labels", JSON, nullable=False),
    Column("labels_key", String(1000), nullable=False),  # canonical JSON of labels
    Index("ix_engage_alerts_run", "run_id", "started_at"),
)
# One open alert per (run, rule, labels), held by the database so several writers agree.
Index(
    "ux_engage_alerts_open",
    alerts.c.run_id,
    alerts.c.rule,
    alerts.c.labels_key,
    unique=True,
    sqlite_where=alerts.c.state == "firing",
    postgresql_where=alerts.c.state == "firing",
)


@dataclass(frozen=True)
class JobRecord:
    """A job as the store knows it; ``state`` is "lost" for a running job whose process is gone."""

    run_id: str
    job: str
    state: str
    started_at: float
    ended_at: float | None = None
    metrics_url: str | None = None
    host: str | None = None
    pid: int | None = None
    stage: str | None = None
    epoch: int | None = None


@dataclass(frozen=True)
class NewEvent:
    """An event to record. An ``alert`` event (data: rule, state, severity, summary, value,
    labels) also opens or resolves the matching row of the alerts table."""

    run_id: str
    job: str
    kind: str
    name: str
    ts: float
    severity: str = "info"
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventRecord:
    """One stored event as the store's queries return it: the :class:`NewEvent` fields plus
    its row ``id``, ``run_id`` and ``job``.
    """

    id: int
    ts: float
    run_id: str
    job: str
    kind: str
    name: str
    severity: str
    message: str
    data: dict[str, Any]


@dataclass(frozen=True)
class AlertRecord:
    """One row of the alerts table: an alert of ``rule`` for ``labels`` in one run, ``state``
    "firing" until ``resolved_at`` is set and it becomes "resolved".
    """

    id: int
    run_id: str
    job: str
    rule: str
    severity: str
    state: str
    started_at: float
    resolved_at: float | None
    summary: str
    value: float | None
    labels: dict[str, str]
