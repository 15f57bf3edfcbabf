"""The Experiments page: MLflow runs, their metric curves, a parameter diff and lineage.

Runs are read through an explicit ``MlflowClient`` (``Sources.client``). Top-level runs
only: a federated round's child run belongs to its parent (the Federated page), and the
serving replicas' monitoring runs (experiment ``engage-serving``) to the Drift page,
unless that experiment is asked for by name. Lineage is what ``engage run`` tags each run
with (:mod:`engage.tracking.lineage`, ``engage.runtime.stages.open_run``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engage.errors import TrackingError
from engage.monitor.views.jobs import KEY_METRICS
from engage.monitor.views.sources import local_time, reading_mlflow

MONITORING_EXPERIMENT = "engage-serving"  # engage.serve.controller.EXPERIMENT
PARENT_TAG = "mlflow.parentRunId"
# What the page calls each lineage tag, in the order it shows them.
LINEAGE_TAGS = (
    ("git commit", "mlflow.source.git.commit"),
    ("git branch", "engage.git.branch"),
    ("git dirty", "engage.git.dirty"),
    ("dataset digest", "engage.dataset.digest"),
    ("dataset rows", "engage.dataset.rows"),
    ("dataset source", "engage.dataset.source"),
    ("pipeline", "engage.pipeline"),
    ("spec file", "engage.spec_file"),
    ("overrides", "engage.overrides"),
    ("engage", "engage.version"),
    ("python", "engage.python"),
    ("torch", "engage.torch"),
    ("ray", "engage.ray"),
    ("mlflow", "engage.mlflow"),
    ("cuda", "engage.cuda"),
    ("gpus", "engage.gpus"),
    ("host", "engage.host"),
    ("cpus", "engage.cpus"),
)


class RunFilterError(TrackingError):
    """MLflow refused the page's run filter (a typo in ``metrics.x > 1``)."""

    headline = "invalid run filter"


@dataclass(frozen=True)
class RunRow:
    """One MLflow run as the Experiments page lists it."""

    run_id: str
    name: str
    experiment: str
    status: str
    started_ms: int | None
    ended_ms: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name · first 8 characters of the id``: unique enough for a picker or a legend."""
        return f"{self.name} · {self.run_id[:8]}"

    @property
    def seconds(self) -> float | None:
        """Wall time of the run; None while it runs."""
        if self.started_ms is None or self.ended_ms is None:
            return None
        return (self.ended_ms - self.started_ms) / 1000


def experiment_names(client: Any | None) -> list[str]:
    """Names of the experiments holding runs, the serving monitoring experiment last."""
    if client is None:
        return []
    with reading_mlflow(client):
        names = sorted(e.name for e in client.search_experiments())
    return [n for n in names if n != MONITORING_EXPERIMENT] + (
        [MONITORING_EXPERIMENT] if MONITORING_EXPERIMENT in names else []
    )


def run_rows(
    client: Any | None,
    experiments: Sequence[str] = (),
    filter_string: str = "",
    max_results: int = 500,
) -> list[RunRow]:
    """Top-level runs of ``experiments`` (default: all but monitoring), newest first.

    Raises
    ------
    RunFilterError
        ``filter_string`` is not an MLflow search filter.
    TrackingError
        MLflow cannot be read.
    """
    if client is None:
        return []
    from mlflow.exceptions import MlflowException

    with reading_mlflow(client):
        found = {e.experiment_id: e.name for e in client.search_experiments()}
        wanted = set(experiments) or set(found.values()) - {MONITORING_EXPERIMENT}
        ids = [i for i, name in found.items() if name in wanted]
        if not ids:
            return []
        try:
            runs = client.search_runs(
                ids,
                filter_string.strip(),
                order_by=["attributes.start_time DESC"],
                max_results=max_results,
            )
        except MlflowException as exc:
            if "filter" not in str(exc).lower() and "invalid" not in str(exc).lower():
                raise
            raise RunFilterError(
                f"MLflow cannot search with {filter_string!r}: {str(exc).splitlines()[0]}",
                hint="write e.g. metrics.val_accuracy > 0.9 and params.`train.epochs` = '3'",
            ) from None
    return [_row(r, found) for r in runs if PARENT_TAG not in r.data.tags]


def _row(run: Any, experiments: dict[str, str]) -> RunRow:
    info, data = run.info, run.data
    return RunRow(
        info.run_id,
        info.run_name or info.run_id,
        experiments.get(info.experiment_id, info.experiment_id),
        info.status,
        info.start_time,
        info.end_time,
        {k: v for k, v in data.metrics.items() if math.isfinite(v)},
        dict(data.params),
        dict(data.tags),
    )


def metric_keys(rows: Sequence[RunRow]) -> list[str]:
    """Every metric of ``rows``: the key metrics first (as the Jobs page orders them)."""
    found = {k for r in rows for k in r.metrics}
    return [k for k in KEY_METRICS if k in found] + sorted(found - set(KEY_METRICS))


def runs_frame(
    rows: Sequence[RunRow],
    metrics: Sequence[str] = (),
    sort_by: str = "started",
    descending: bool = True,
) -> pd.DataFrame:
    """The runs table: one row per run, one column per chosen metric, sorted."""
    frame = pd.DataFrame(
        {
            "run": [r.name for r in rows],
            "experiment": [r.experiment for r in rows],
            "status": [r.status for r in rows],
            "started": [local_time(r.started_ms) for r in rows],
            "seconds": [r.seconds for r in rows],
            **{m: [r.metrics.get(m) for r in rows] for m in metrics},
            "run id": [r.run_id for r in rows],
        }
    )
    if sort_by in frame:
        frame = frame.sort_values(sort_by, ascending=not descending, na_position="last")
    return frame.reset_index(drop=True)


def metric_history(client: Any, rows: Sequence[RunRow], keys: Sequence[str]) -> pd.DataFrame:
    """Every logged value of ``keys`` for each run: run, run id, metric, step, time, value."""
    points = []
    with reading_mlflow(client):
        for row in rows:
            for key in keys:
                if key not in row.metrics:
                    continue
                for m in client.get_metric_history(row.run_id, key):
                    if math.isfinite(m.value):
                        when = local_time(m.timestamp)
                        points.append((row.label, row.run_id, key, m.step, when, float(m.value)))
    columns = ["run", "run id", "metric", "step", "time", "value"]
    return pd.DataFrame(points, columns=columns).sort_values(
        ["run", "metric", "step", "time"], ignore_index=True
    )


def param_diff(rows: Sequence[RunRow], only_differing: bool = True) -> pd.DataFrame:
    """Parameters side by side, one column per run; differing ones first, then by name.

    A parameter a run did not log shows as ``-``; column ``differs`` says whether the
    runs disagree on it.
    """
    names = sorted({k for r in rows for k in r.params})
    table = pd.DataFrame(
        {"parameter": names, **{r.label: [r.params.get(n, "-") for n in names] for r in rows}}
    )
    table["differs"] = [len({r.params.get(n, "-") for r in rows}) > 1 for n in names]
    if only_differing:
        table = table[table["differs"]]
    return table.sort_values(["differs", "parameter"], ascending=[False, True], ignore_index=True)


def lineage(rows: Sequence[RunRow]) -> pd.DataFrame:
    """What each run ran from (git, dataset, spec, environment), one column per run.

    Only the fields at least one run recorded; a run without one shows ``-``.
    """
    shown = [(label, tag) for label, tag in LINEAGE_TAGS if any(tag in r.tags for r in rows)]
    return pd.DataFrame(
        {
            "field": [label for label, _ in shown],
            **{r.label: [r.tags.get(tag, "-") for _, tag in shown] for r in rows},
        }
    )
