"""Where the dashboard reads: the event store and the MLflow store, resolved as the CLI does."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from engage.errors import EngageError, TrackingError
from engage.monitor._schema import EventRecord, events
from engage.monitor.store import EventStore, resolve_events_url

# An unreachable tracking server must fail a page in seconds, not after MLflow's retries.
_MLFLOW_HINT = "check MLFLOW_TRACKING_URI (or --tracking-uri), or that the tracking server runs"
_MLFLOW_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


@dataclass(frozen=True)
class Sources:
    """The resolved locations: ``home``, the event store URL and the MLflow tracking URI.

    Precedence as everywhere in engage: argument > environment (``ENGAGE_HOME``,
    ``ENGAGE_EVENTS_URI``, ``MLFLOW_TRACKING_URI``) > the defaults under ``.engage/``.
    """

    home: Path
    events_url: str
    tracking_uri: str

    @classmethod
    def resolve(
        cls,
        home: str | Path | None = None,
        events_uri: str | None = None,
        tracking_uri: str | None = None,
    ) -> Sources:
        """Resolve each location: argument, else environment, else the default under home."""
        from engage import env_vars
        from engage.tracking.store import resolve_tracking_uri

        resolved = env_vars.engage_home(home)
        return cls(
            resolved,
            resolve_events_url(resolved, events_uri),
            resolve_tracking_uri(None, tracking_uri, resolved),
        )

    def store(self) -> EventStore | None:
        """The event store, or None while its SQLite file does not exist (never created here)."""
        store = EventStore(self.events_url)
        if not store.exists():
            store.close()
            return None
        return store

    def client(self) -> Any | None:
        """An ``MlflowClient``, or None while the local SQLite store does not exist."""
        from engage.tracking.store import open_client

        uri = self.tracking_uri
        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
            return None
        for name, value in _MLFLOW_HTTP.items():
            os.environ.setdefault(name, value)
        try:
            return open_client(uri)
        except Exception as exc:
            raise _tracking_error(uri, exc) from None


@contextmanager
def reading_mlflow(client: Any) -> Iterator[None]:
    """Any failure to read MLflow inside the block becomes one ``TrackingError``."""
    try:
        yield
    except EngageError as exc:
        if exc.hint:
            raise
        raise type(exc)(exc.message, hint=_MLFLOW_HINT) from None
    except Exception as exc:  # MlflowException, connection errors, a corrupt store
        raise _tracking_error(str(client.tracking_uri), exc) from None


def _tracking_error(uri: str, exc: BaseException) -> TrackingError:
    detail = str(getattr(exc, "message", None) or exc).strip().splitlines()
    return TrackingError(
        f"cannot read MLflow at {uri}: {detail[0] if detail else type(exc).__name__}",
        hint=_MLFLOW_HINT,
    )


def named_events(
    store: EventStore, names: tuple[str, ...], run_id: str | None = None, limit: int = 20_000
) -> list[EventRecord]:
    """The newest ``limit`` events with one of ``names`` (of ``run_id``), oldest first."""
    from sqlalchemy import select

    query = select(events).where(events.c.name.in_(names))
    if run_id is not None:
        query = query.where(events.c.run_id == run_id)
    query = query.order_by(events.c.ts.desc(), events.c.id.desc()).limit(limit)
    # The store's own query path: its schema check and its error wrapping.
    return [EventRecord(**row._mapping) for row in reversed(store._rows(query))]


def runs_with_events(store: EventStore, names: tuple[str, ...]) -> list[tuple[str, str, float]]:
    """``(run_id, job, last ts)`` of every run that recorded one of ``names``, newest first."""
    from sqlalchemy import func, select

    last = func.max(events.c.ts).label("last")
    query = (
        select(events.c.run_id, events.c.job, last)
        .where(events.c.name.in_(names))
        .group_by(events.c.run_id, events.c.job)
        .order_by(last.desc())
    )
    return [(r.run_id, r.job, float(r.last)) for r in store._rows(query)]


def local_time(ms: float | None) -> pd.Timestamp | None:
    """Epoch milliseconds (MLflow's timestamps) as a naive local wall-clock time.

    Naive local, because that is what the tables show (``datetime.fromtimestamp``) and how
    Vega-Lite reads a time without a zone: the charts' axes then agree with the tables.
    """
    return None if ms is None else pd.Timestamp.fromtimestamp(ms / 1000)


def local_times(ms: pd.Series) -> pd.Series:
    """:func:`local_time` for a whole column."""
    zone = datetime.now().astimezone().tzinfo
    return pd.to_datetime(ms, unit="ms", utc=True).dt.tz_convert(zone).dt.tz_localize(None)
