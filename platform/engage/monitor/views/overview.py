"""The Overview page: how many runs, jobs, alerts and models there are, and the latest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engage.monitor._schema import AlertRecord
from engage.monitor.store import EventStore
from engage.monitor.views.experiments import RunRow, run_rows
from engage.monitor.views.sources import reading_mlflow

COUNT_UP_TO = 1000  # runs and jobs are counted up to this many ("1000+" past it)


@dataclass(frozen=True)
class Overview:
    """The landing page's numbers and lists."""

    runs: int = 0
    jobs: int = 0
    running_jobs: int = 0
    models: int = 0
    versions: int = 0
    open_alerts: tuple[AlertRecord, ...] = ()
    latest_runs: tuple[RunRow, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        """True when nothing was ever recorded: the page then says what to run."""
        return not (self.runs or self.jobs or self.models or self.open_alerts)


def overview(store: EventStore | None, client: Any | None, latest: int = 5) -> Overview:
    """Counts from the event store and MLflow, the ``latest`` runs and every open alert."""
    jobs = store.jobs(COUNT_UP_TO) if store is not None else []
    alerts = tuple(store.open_alerts()) if store is not None else ()
    runs = run_rows(client, max_results=COUNT_UP_TO) if client is not None else []
    models, versions = _models(client) if client is not None else (0, 0)
    return Overview(
        runs=len(runs),
        jobs=len(jobs),
        running_jobs=sum(j.state == "running" for j in jobs),
        models=models,
        versions=versions,
        open_alerts=alerts,
        latest_runs=tuple(runs[:latest]),
    )


def _models(client: Any) -> tuple[int, int]:
    from engage.tracking.catalog import list_models

    with reading_mlflow(client):
        found = list_models(client)
    return len(found), sum(m.versions for m in found)
