"""The Federated page: per run, the global model per round and every client's verdicts.

The federated server reports, per round, an ``fl_verdict`` event per scored client (score,
flagged, action, reasons), an ``fl_update_rejected`` event per refused update (reason),
``fl_quarantined`` when the policy quarantines a client, and the closing ``verdicts`` table;
the event store keeps them all. The global model's ``val_*`` metrics per round are metrics
of the run in MLflow, with the round as step; each round's child run holds every client's
``fl_client_score.<client>`` and the round's flagged and rejected clients as tags, which
complete the events where the store kept fewer (its sink drops repeats of one message).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engage.monitor._schema import AlertRecord
from engage.monitor.store import EventStore
from engage.monitor.views.sources import named_events, reading_mlflow, runs_with_events

FL_EVENTS = ("fl_verdict", "fl_update_rejected", "fl_quarantined")
_SCORE_COLUMNS = ["round", "client", "score", "flagged", "action", "reasons"]
_REJECT_COLUMNS = ["round", "client", "reason", "detail"]


@dataclass(frozen=True)
class FederatedRun:
    """A run that recorded federated verdicts: its id, job name and last event time."""

    run_id: str
    job: str
    last_ts: float

    @property
    def label(self) -> str:
        """``job · run id``: what the run picker shows."""
        return f"{self.job} · {self.run_id}"


@dataclass(frozen=True)
class FederatedView:
    """Everything the page shows about one federated run."""

    run: FederatedRun
    global_metrics: pd.DataFrame  # round, metric, value
    scores: pd.DataFrame  # round, client, score, flagged, action, reasons
    rejected: pd.DataFrame  # round, client, reason, detail
    clients: pd.DataFrame  # one row per client: the verdict table
    quarantined: tuple[str, ...] = ()
    flagged: tuple[str, ...] = ()
    closing_table: str | None = None
    alerts: tuple[AlertRecord, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def federated_runs(store: EventStore | None) -> list[FederatedRun]:
    """Runs that recorded federated verdicts, newest first."""
    if store is None:
        return []
    return [FederatedRun(*row) for row in runs_with_events(store, FL_EVENTS)]


def federated_view(store: EventStore, run: FederatedRun, client: Any | None) -> FederatedView:
    """The run's rounds from its events, completed by its per-round child runs in MLflow."""
    found = named_events(store, (*FL_EVENTS, "verdicts"), run_id=run.run_id)
    scores = _frame([_score_row(e.data) for e in found if e.name == "fl_verdict"], _SCORE_COLUMNS)
    rejected = _frame(
        [_rejected_row(e.data) for e in found if e.name == "fl_update_rejected"], _REJECT_COLUMNS
    )
    quarantine = {
        _client(e.data): int(e.data.get("round", 0)) for e in found if e.name == "fl_quarantined"
    }
    closing = next(
        (str(e.data.get("message")) for e in reversed(found) if e.name == "verdicts"), None
    )
    metrics, notes = _global_metrics(client, run.run_id)
    if client is not None and not notes:
        child_scores, child_rejected = _child_runs(client, run.run_id)
        scores = _union(scores, child_scores, ["round", "client"])
        rejected = _union(rejected, child_rejected, ["round", "client", "reason"])
    clients = _clients(scores, rejected, quarantine)
    flagged = tuple(sorted(set(scores.loc[scores["flagged"], "client"]))) if len(scores) else ()
    return FederatedView(
        run,
        metrics,
        scores,
        rejected,
        clients,
        tuple(sorted(quarantine)),
        flagged,
        closing,
        tuple(store.alerts(run.run_id, limit=500)),
        tuple(notes),
    )


def _child_runs(client: Any, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-client scores and rejections of each round, from the round's child run."""
    from engage.monitor.rules import FL_SCORE_FLAG

    with reading_mlflow(client):
        parent = client.get_run(run_id)
        children = client.search_runs(
            [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'"
        )
    scores, rejected = [], []
    for child in children:
        tags = child.data.tags
        if not str(tags.get("engage.fl.round", "")).isdigit():
            continue
        n = int(tags["engage.fl.round"])
        flagged = set(tags.get("engage.fl.flagged", "-").split(",")) - {"-", ""}
        for key, value in child.data.metrics.items():
            if key.startswith("fl_client_score."):
                name = key.removeprefix("fl_client_score.")
                is_flagged = name in flagged or value >= FL_SCORE_FLAG
                scores.append((n, name, float(value), is_flagged, "", ""))
        for item in tags.get("engage.fl.rejected", "-").split(","):
            name, sep, reason = item.rpartition(":")
            if sep:
                rejected.append((n, name, reason, ""))
    return _frame(scores, _SCORE_COLUMNS), _frame(rejected, _REJECT_COLUMNS)


def _union(events: pd.DataFrame, children: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Event rows (they carry actions and reasons), plus child-run rows they lack."""
    if children.empty:
        return events
    if events.empty:
        return children.sort_values(key, ignore_index=True)
    seen = set(map(tuple, events[key].itertuples(index=False)))
    extra = children[[tuple(row) not in seen for row in children[key].itertuples(index=False)]]
    return pd.concat([events, extra], ignore_index=True).sort_values(key, ignore_index=True)


def _client(data: dict[str, Any]) -> str:
    return str((data.get("labels") or {}).get("client") or data.get("client") or "unknown")


def _score_row(d: dict[str, Any]) -> tuple:
    reasons = ", ".join(str(r) for r in d.get("reasons") or ())
    score = d.get("score")
    return (
        int(d.get("round", 0)),
        _client(d),
        float(score) if isinstance(score, int | float) else float("nan"),
        bool(d.get("flagged")),
        str(d.get("action", "aggregate")),
        reasons,
    )


def _rejected_row(d: dict[str, Any]) -> tuple:
    return (int(d.get("round", 0)), _client(d), str(d.get("reason", "?")), str(d.get("detail", "")))


def _frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


def _clients(
    scores: pd.DataFrame, rejected: pd.DataFrame, quarantine: dict[str, int]
) -> pd.DataFrame:
    names = sorted(set(scores["client"]) | set(rejected["client"]) | set(quarantine))
    rows = []
    for name in names:
        mine = scores[scores["client"] == name]
        reasons = Counter(rejected.loc[rejected["client"] == name, "reason"])
        flags = int(mine["flagged"].sum())
        if name in quarantine:
            verdict = f"quarantined (round {quarantine[name]})"
        elif flags:
            verdict = "flagged"
        else:
            verdict = "ok"
        rows.append(
            (
                name,
                len(mine),
                ", ".join(f"{k} {n}" for k, n in sorted(reasons.items())) or "0",
                flags,
                float(mine["score"].mean()) if len(mine) else float("nan"),
                float(mine["score"].max()) if len(mine) else float("nan"),
                verdict,
            )
        )
    columns = ["client", "rounds scored", "rejected", "flagged", "mean score", "max score"]
    return pd.DataFrame(rows, columns=[*columns, "verdict"])


def _global_metrics(client: Any | None, run_id: str) -> tuple[pd.DataFrame, list[str]]:
    columns = ["round", "metric", "value"]
    if client is None:
        return pd.DataFrame(columns=columns), ["no MLflow store yet: the per-round metric is there"]
    from mlflow.exceptions import MlflowException

    with reading_mlflow(client):
        try:
            run = client.get_run(run_id)
        except MlflowException:
            note = f"run {run_id} is not in MLflow at {client.tracking_uri} (yet): `engage sync`"
            return pd.DataFrame(columns=columns), [note]
        rows = [
            (int(m.step), key, float(m.value))
            for key in sorted(run.data.metrics)
            if key.startswith("val_")
            for m in client.get_metric_history(run_id, key)
        ]
    return pd.DataFrame(rows, columns=columns).sort_values(
        ["metric", "round"], ignore_index=True
    ), []
