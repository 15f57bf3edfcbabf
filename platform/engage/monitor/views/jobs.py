"""The Jobs and Alerts pages: jobs from the event store, live metrics, last MLflow metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from engage.monitor._schema import AlertRecord
from engage.monitor.store import EventStore
from engage.monitor.views.sources import local_time

# Metrics a job row shows, in this order, when its run has them.
KEY_METRICS = (
    "train_loss",
    "val_loss",
    "val_accuracy",
    "val_f1",
    "val_mae",
    "val_rmse",
    "test_accuracy",
    "test_mae",
    "samples_per_second",
    "data_stall_ratio",
)


@dataclass(frozen=True)
class JobRow:
    """One job: the store's record, joined with its live scrape or its MLflow run."""

    run_id: str
    job: str
    state: str
    started_at: float | None
    ended_at: float | None = None
    stage: str | None = None
    epoch: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    open_alerts: tuple[str, ...] = ()
    mlflow_url: str | None = None

    @property
    def metrics_text(self) -> str:
        """The key metrics the row has, ``name value · ...`` in KEY_METRICS order."""
        shown = [(k, self.metrics[k]) for k in KEY_METRICS if k in self.metrics]
        return " · ".join(f"{k} {v:.4g}" for k, v in shown) or "-"


def job_rows(
    store: EventStore | None, client: Any | None = None, live: Any | None = None, limit: int = 50
) -> tuple[list[JobRow], list[str]]:
    """Recent jobs, newest first, and notes on what could not be read.

    ``live`` is a :class:`~engage.monitor.live.LiveView` (running jobs as their endpoints
    report them, what ``engage monitor`` shows); ``client`` fills the last metrics of
    jobs that no endpoint reports any more.
    """
    notes: list[str] = list(getattr(live, "notes", []) or [])
    records = store.jobs(limit) if store is not None else []
    firing: dict[str, list[str]] = {}
    for a in store.open_alerts() if store is not None else []:
        firing.setdefault(a.run_id, []).append(a.rule)
    views = {v.run_id: v for v in (getattr(live, "jobs", None) or [])}
    rows = [_from_live(v, None, firing) for v in views.values() if v.run_id not in _ids(records)]
    for r in records:
        rows.append(
            _from_live(views[r.run_id], r, firing) if r.run_id in views else _row(r, firing)
        )
    if client is not None:
        rows, note = _with_mlflow(rows, client)
        notes += [note] if note else []
    return rows, notes


def open_alert_count(rows: list[JobRow]) -> int:
    """Open alerts on ``rows``: the number the Jobs page heads its table with."""
    return sum(len(r.open_alerts) for r in rows)


def jobs_timeline(rows: list[JobRow], now: float) -> pd.DataFrame:
    """One bar per job from its start to its end (``now`` while it runs): the Jobs chart."""
    shown = [r for r in rows if r.started_at]
    return pd.DataFrame(
        {
            "job": [r.job for r in shown],
            "run id": [r.run_id for r in shown],
            "state": [r.state for r in shown],
            "start": [local_time(r.started_at * 1000) for r in shown],
            "end": [local_time((r.ended_at or now) * 1000) for r in shown],
            "open alerts": [", ".join(r.open_alerts) or "-" for r in shown],
        },
        columns=["job", "run id", "state", "start", "end", "open alerts"],
    )


def alert_rows(store: EventStore | None, limit: int = 500) -> list[AlertRecord]:
    """Alert history, newest first (firing and resolved)."""
    return store.alerts(limit=limit) if store is not None else []


def _ids(records: list[Any]) -> set[str]:
    return {r.run_id for r in records}


def _row(r: Any, firing: dict[str, list[str]]) -> JobRow:
    return JobRow(
        r.run_id,
        r.job,
        r.state,
        r.started_at,
        r.ended_at,
        r.stage,
        r.epoch,
        open_alerts=tuple(firing.get(r.run_id, ())),
    )


def _from_live(v: Any, r: Any | None, firing: dict[str, list[str]]) -> JobRow:
    metrics = {
        "train_loss": v.train_loss,
        "samples_per_second": v.samples_per_second,
        "data_stall_ratio": v.stall_ratio,
    }
    if v.val_metric:
        metrics[v.val_metric[0]] = v.val_metric[1]
    alerts = set(firing.get(v.run_id, ())) | set(v.firing)
    return JobRow(
        v.run_id,
        v.job,
        v.state,
        r.started_at if r else None,
        None,
        v.stage or (r.stage if r else None),
        v.epoch if v.epoch is not None else (r.epoch if r else None),
        {k: x for k, x in metrics.items() if x is not None and math.isfinite(x)},
        tuple(sorted(alerts)),
    )


def _with_mlflow(rows: list[JobRow], client: Any) -> tuple[list[JobRow], str | None]:
    """Each row's MLflow link, and its run's last metrics where no endpoint gave any."""
    from mlflow.exceptions import MlflowException

    from engage.tracking.store import run_url

    out = []
    for i, row in enumerate(rows):
        try:
            run = client.get_run(row.run_id)
        except MlflowException:
            out.append(row)  # not (yet) in MLflow: a local id, or a deleted run
            continue
        except Exception as exc:  # the server is down: keep the rows, say so once
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return out + rows[i:], f"MLflow at {client.tracking_uri} unavailable: {why}"
        metrics = row.metrics or {
            k: v for k, v in run.data.metrics.items() if k in KEY_METRICS and math.isfinite(v)
        }
        url = run_url(str(client.tracking_uri), run.info.experiment_id, row.run_id)
        out.append(replace(row, metrics=metrics, mlflow_url=url))
    return out, None
