"""The Job page: one job over time: step time, throughput, data stall, host-to-device copy,
all-reduce, CPU, memory.

Training workers report per-step timings (``step_seconds``, ``data_wait_seconds``,
``host_to_device_seconds``, ``samples``, and ``allreduce_blocked_seconds`` when ``train.comm`` times DDP's gradient
all-reduce) and their process's resources (``worker_cpu_seconds``, cumulative, and
``worker_resident_memory_bytes``); the runner sends rank 0's to MLflow through its spool
while the job runs (``engage.tracking.sinks.MetricSink``). Those histories are the
page's time series, binned to at most a few hundred points. The job's own ``/metrics``
endpoint (through :mod:`engage.monitor.live`) adds what is true right now: its stage,
the data stall ratio over the last minute, seconds since its last step, and how much the
spool has not yet sent to MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engage.monitor.views.jobs import JobRow
from engage.monitor.views.sources import local_times, reading_mlflow

# The series the page draws, in order: name -> (title, unit for the axis).
SERIES = {
    "step time": ("Step time (rank 0)", "seconds per step"),
    "throughput": ("Throughput (rank 0)", "samples per second"),
    "data stall": ("Data-stall ratio: step time spent waiting for data", "share"),
    "host-to-device": ("Host-to-device: step time spent copying batches to the device", "share"),
    "all-reduce": ("All-reduce: step time blocked on gradient communication", "share"),
    "cpu": ("CPU of the rank 0 worker", "cores busy"),
    "memory": ("Memory of the rank 0 worker", "resident MiB"),
}
STEP_KEYS = (
    "step_seconds",
    "data_wait_seconds",
    "host_to_device_seconds",
    "samples",
    "allreduce_blocked_seconds",
)
SHARES = (
    "data stall",
    "host-to-device",
    "all-reduce",
)  # the series that are a share of step time (0-1)
RESOURCE_KEYS = ("worker_cpu_seconds", "worker_resident_memory_bytes")
EPOCH_THROUGHPUT = "samples_per_second"
MAX_POINTS = 300  # bins per series: enough for a curve, few enough for the browser


@dataclass(frozen=True)
class JobDetail:
    """One job: its row (state, stage, epoch, alerts), its series, its live scrape."""

    row: JobRow
    series: pd.DataFrame  # time, series, value
    live: Any | None = None  # engage.monitor.live.JobView while its endpoint answers
    in_mlflow: bool = True  # False: no MLflow run (yet) for the job's run id

    @property
    def running(self) -> bool:
        """True while the store or the endpoint says the job runs."""
        return self.row.state in ("running", "unreachable")


def job_order(rows: Sequence[JobRow]) -> list[JobRow]:
    """Running jobs first (newest first), then the rest as listed (newest first)."""
    running = [r for r in rows if r.state == "running"]
    return running + [r for r in rows if r.state != "running"]


def job_detail(row: JobRow, client: Any | None, live: Any | None = None) -> JobDetail:
    """The job's time series from its MLflow run, joined with its live endpoint's view."""
    view = next((v for v in getattr(live, "jobs", None) or [] if v.run_id == row.run_id), None)
    if client is None:
        return JobDetail(row, _empty(), view, in_mlflow=False)
    from mlflow.exceptions import MlflowException

    with reading_mlflow(client):
        try:
            run = client.get_run(row.run_id)
        except MlflowException:
            return JobDetail(row, _empty(), view, in_mlflow=False)
        logged = set(run.data.metrics)
        history = {
            key: _points(client.get_metric_history(row.run_id, key))
            for key in (*STEP_KEYS, *RESOURCE_KEYS, EPOCH_THROUGHPUT)
            if key in logged
        }
    return JobDetail(row, job_series(history), view)


def job_series(history: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Long frame (time, series, value) of the page's series from metric histories.

    ``history`` maps an MLflow metric key to its points (columns time, value). Steps are
    binned by time: step time is the bin's mean, throughput its samples over its step
    time, the data-stall ratio its waiting over its step time, host-to-device its copying
    over its step time (the rest of a step is compute), all-reduce its time blocked
    on gradient all-reduce over its step time (only for runs that report it). CPU is the
    increase of the cumulative CPU seconds per wall second, memory the resident size in MiB.
    """
    parts = [_steps(history)]
    if "throughput" not in set(parts[0]["series"]) and EPOCH_THROUGHPUT in history:
        parts.append(_named(history[EPOCH_THROUGHPUT], "throughput"))
    if "worker_cpu_seconds" in history:
        parts.append(_cpu(history["worker_cpu_seconds"]))
    if "worker_resident_memory_bytes" in history:
        memory = history["worker_resident_memory_bytes"]
        parts.append(_named(memory.assign(value=memory["value"] / 2**20), "memory"))
    frame = pd.concat([p for p in parts if not p.empty] or [_empty()], ignore_index=True)
    order = {name: i for i, name in enumerate(SERIES)}
    return frame.sort_values(
        ["series", "time"], key=lambda c: c.map(order) if c.name == "series" else c
    ).reset_index(drop=True)


def _points(metrics: Sequence[Any]) -> pd.DataFrame:
    rows = [(m.timestamp, float(m.value)) for m in metrics if math.isfinite(m.value)]
    frame = pd.DataFrame(rows, columns=["ms", "value"]).sort_values("ms", ignore_index=True)
    frame["time"] = local_times(frame["ms"])
    return frame[["time", "value"]]


def _steps(history: dict[str, pd.DataFrame]) -> pd.DataFrame:
    steps = history.get("step_seconds")
    if steps is None or steps.empty:
        return _empty()
    bins = _bins(steps["time"])
    seconds = steps.groupby(bins)["value"]
    out = [_binned(seconds.mean(), steps, bins, "step time")]
    total = seconds.sum()
    shares = (
        ("samples", "throughput"),
        ("data_wait_seconds", "data stall"),
        ("host_to_device_seconds", "host-to-device"),
    )
    for key, name in shares:
        other = history.get(key)
        if other is not None and len(other) == len(steps):
            # One point per step for each key: the same bins line up step for step.
            ratio = other["value"].groupby(bins.to_numpy()).sum() / total.to_numpy()
            out.append(_binned(ratio.where(total.to_numpy() > 0), steps, bins, name))
    blocked = history.get("allreduce_blocked_seconds")
    if blocked is not None and not blocked.empty:
        out.append(_blocked_share(blocked, steps, bins, total))
    return pd.concat(out, ignore_index=True)


def _blocked_share(
    blocked: pd.DataFrame, steps: pd.DataFrame, bins: pd.Series, total: pd.Series
) -> pd.DataFrame:
    """Seconds blocked on all-reduce per bin over the bin's step seconds.

    With gradient accumulation only the steps that end an accumulation group all-reduce
    (and report it), so a point joins the bin of the step it was reported with: the first
    step at or after its time. Otherwise there is one point per step, aligned step for step.
    """
    where = bins.to_numpy()
    if len(blocked) != len(steps):
        step_ns = steps["time"].astype("int64").to_numpy()
        at = np.searchsorted(step_ns, blocked["time"].astype("int64").to_numpy(), side="left")
        where = where[np.clip(at, 0, len(steps) - 1)]
    per_bin = blocked["value"].groupby(where).sum().reindex(total.index, fill_value=0.0)
    ratio = per_bin / total
    return _binned(ratio.where(total > 0), steps, bins, "all-reduce")


def _bins(times: pd.Series) -> pd.Series:
    """Bin numbers 0..n-1 over the span of ``times`` (one bin per point when few)."""
    if len(times) <= MAX_POINTS:
        return pd.Series(np.arange(len(times)), index=times.index)
    ns = times.astype("int64").to_numpy()
    edges = np.linspace(ns[0], ns[-1], MAX_POINTS + 1)
    return pd.Series(np.clip(np.searchsorted(edges, ns, side="right") - 1, 0, MAX_POINTS - 1))


def _binned(values: pd.Series, points: pd.DataFrame, bins: pd.Series, name: str) -> pd.DataFrame:
    """A bin's value at the time of its last point."""
    times = points["time"].groupby(bins.to_numpy()).max()
    values = pd.Series(values.to_numpy(), index=times.index)
    frame = pd.DataFrame({"time": times, "series": name, "value": values})
    return frame.dropna().reset_index(drop=True)


def _cpu(cumulative: pd.DataFrame) -> pd.DataFrame:
    seconds = cumulative["time"].diff().dt.total_seconds()
    busy = cumulative["value"].diff() / seconds
    frame = pd.DataFrame({"time": cumulative["time"], "value": busy})
    frame = frame[(seconds > 0) & (busy >= 0)]  # a restarted worker starts its count at 0
    return _named(frame, "cpu")


def _named(points: pd.DataFrame, name: str) -> pd.DataFrame:
    return pd.DataFrame({"time": points["time"], "series": name, "value": points["value"]})


def _empty() -> pd.DataFrame:
    return pd.DataFrame(
        {"time": pd.Series(dtype="datetime64[ns]"), "series": [], "value": []}
    ).astype({"series": str, "value": float})
