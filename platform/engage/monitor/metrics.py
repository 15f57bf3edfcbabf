"""The Prometheus metrics of a job, on an explicit registry, fed by reported events.

Names follow Prometheus conventions (``engage_`` prefix, base units, ``_total`` for
counters) with labels ``job``, ``run_id`` and, per worker, ``rank``. A worker's step splits into
data wait, host-to-device copy and compute (``engage_data_wait_seconds_total``,
``engage_host_to_device_seconds_total``, ``engage_compute_seconds_total``); the data stall
ratio is the wait's share of their sum. The MLflow metric key
of each is the same name without the prefix, except the all-reduce families, whose step
metrics (``allreduce_seconds``, ``allreduce_blocked_seconds``, ``allreduce_buckets``, from
:mod:`engage.train.comm`) add up into ``_total`` counters.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from engage.events import POINTS, Event, Row, from_rows

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STALL_WINDOW_S = 60.0  # the data stall and comm blocked ratios cover this much training time
# The parts of a step's time the stall window sums, as indices into JobMetrics._sums.
_WAIT, _COPY, _COMPUTE, _BLOCKED = range(4)
_PARTS = 4

JOB = ("job", "run_id")
WORKER = ("job", "run_id", "rank")


class JobMetrics:
    """Every metric family of one job, and the mapping from events to them."""

    def __init__(self, registry: CollectorRegistry, job: str, run_id: str) -> None:
        self.registry = registry
        self.labels = {"job": job, "run_id": run_id}
        r = registry
        self.step_seconds = Histogram(
            "engage_step_seconds",
            "Wall time of one training step.",
            WORKER,
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter("engage_steps_total", "Training steps completed.", WORKER, registry=r)
        self.samples = Counter(
            "engage_samples_total", "Training samples processed.", WORKER, registry=r
        )
        self.data_wait = Counter(
            "engage_data_wait_seconds_total",
            "Time blocked waiting for the next batch.",
            WORKER,
            registry=r,
        )
        self.host_to_device = Counter(
            "engage_host_to_device_seconds_total",
            "Time copying batches from host memory to the worker's device.",
            WORKER,
            registry=r,
        )
        self.compute = Counter(
            "engage_compute_seconds_total",
            "Time in forward, backward and optimiser step.",
            WORKER,
            registry=r,
        )
        self.stall_ratio = Gauge(
            "engage_data_stall_ratio",
            f"Share of the last {STALL_WINDOW_S:g} s of step time (data wait, host-to-device "
            "copy, compute) spent waiting for data.",
            JOB,
            registry=r,
        )
        self.allreduce = Counter(
            "engage_allreduce_seconds_total",
            "Time in gradient all-reduce, summed over DDP buckets (overlapped or not).",
            WORKER,
            registry=r,
        )
        self.allreduce_blocked = Counter(
            "engage_allreduce_blocked_seconds_total",
            "Time a step waited on all-reduce after the backward pass handed over its last bucket.",
            WORKER,
            registry=r,
        )
        self.allreduce_buckets = Counter(
            "engage_allreduce_buckets_total", "Gradient buckets all-reduced.", WORKER, registry=r
        )
        self.allreduce_overlap = Gauge(
            "engage_allreduce_overlap_ratio",
            "Share of the last step's all-reduce time hidden behind the backward pass (0-1).",
            WORKER,
            registry=r,
        )
        self.comm_blocked_ratio = Gauge(
            "engage_comm_blocked_ratio",
            f"Share of the last {STALL_WINDOW_S:g} s of steps spent blocked on gradient all-reduce.",
            JOB,
            registry=r,
        )
        self.throughput = Gauge(
            "engage_samples_per_second", "Training throughput over the last epoch.", JOB, registry=r
        )
        self.loss = Gauge("engage_loss", "Latest loss per split.", (*JOB, "split"), registry=r)
        self.eval_metric = Gauge(
            "engage_eval_metric",
            "Latest evaluation metric (accuracy, F1, MAE...).",
            (*JOB, "metric"),
            registry=r,
        )
        self.epoch = Gauge("engage_epoch", "Last completed epoch.", JOB, registry=r)
        self.workers = Gauge("engage_workers", "Training workers running.", JOB, registry=r)
        self.restarts = Counter(
            "engage_restarts_total", "Training worker group restarts.", JOB, registry=r
        )
        self.last_step = Gauge(
            "engage_last_step_timestamp_seconds",
            "Unix time of the last training step.",
            JOB,
            registry=r,
        )
        self.stage = Gauge(
            "engage_stage", "1 for the stage the job is in.", (*JOB, "stage"), registry=r
        )
        self.cpu = Counter(
            "engage_worker_cpu_seconds_total",
            "CPU time used by a worker process.",
            WORKER,
            registry=r,
        )
        self.rss = Gauge(
            "engage_worker_resident_memory_bytes",
            "Resident memory of a worker process.",
            WORKER,
            registry=r,
        )
        self.gpu_util = Gauge(
            "engage_gpu_utilization_ratio",
            "GPU utilisation of a worker's device (0-1).",
            WORKER,
            registry=r,
        )
        self.gpu_memory = Gauge(
            "engage_gpu_memory_used_bytes",
            "GPU memory used by a worker's device.",
            WORKER,
            registry=r,
        )
        self.spool_depth = Gauge(
            "engage_tracking_spool_depth", "Tracking entries not yet in MLflow.", JOB, registry=r
        )
        self.spool_lag = Gauge(
            "engage_tracking_spool_lag_seconds",
            "Age of the oldest entry not yet in MLflow.",
            JOB,
            registry=r,
        )
        self.stall_threshold = Gauge(
            "engage_stall_threshold_seconds",
            "Training steps may pause this long before the job counts as stalled.",
            JOB,
            registry=r,
        )
        self.alerts = Gauge(
            "engage_alerts_firing",
            "1 while an alert rule fires for this job.",
            (*JOB, "alertname"),
            registry=r,
        )
        self._lock = threading.Lock()
        # (time, part, seconds) of each step part reported (_WAIT, _COPY, _COMPUTE, _BLOCKED),
        # and each part's running sum over the window: blocked time is part of compute time;
        # a step's time is wait + copy + compute
        self._window: deque[tuple[float, int, float]] = deque()
        self._sums = [0.0] * _PARTS
        self._comm_seen = False  # the blocked ratio is exported only for jobs that time all-reduce
        self._cpu_seen: dict[str, float] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._worker_labels: dict[str, dict[str, str]] = {}  # the handlers' labels, per rank
        self._starts = 0
        self._last_step_at = 0.0

    # -- from events --------------------------------------------------------------------------
    def observe(self, events: Sequence[Event]) -> None:
        """Update the metrics from ``events`` (metric and lifecycle events; others are ignored),
        then recompute the data-stall and comm-blocked ratios over their window.
        """
        with self._lock:
            for event in events:
                if event.kind == "metric" and event.value is not None:
                    self._metric(event)
                elif event.kind == "lifecycle":
                    self._lifecycle(event)
            self._update_stall_ratio(time.time())

    def observe_rows(self, batch: Sequence[Event | Row]) -> None:
        """:meth:`observe` of ``batch``'s Events, read from its rows (Events and rows mixed,
        as the hub's drain holds them): a ``metrics()`` row's points are looked up by name,
        and only the names a family is fed from are handled; no Event is built for a point
        (issue 11)."""
        with self._lock:
            for entry in batch:
                if type(entry) is not tuple:
                    if entry.kind == "metric" and entry.value is not None:
                        self._metric(entry)
                    elif entry.kind == "lifecycle":
                        self._lifecycle(entry)
                    continue
                kind, name, value, _, ts, labels, _ = entry
                if kind == POINTS:
                    if _EXPORTED.isdisjoint(name) and not any(map(_is_eval, name)):
                        continue  # nearly every row: no name the monitor exports
                    rank = labels.get("rank")
                    for n, v in zip(name, value, strict=True):
                        self._point(n, v, rank, ts)
                elif kind == "metric" and value is not None:
                    self._point(name, value, labels.get("rank"), ts)
                elif kind == "lifecycle":
                    self._lifecycle(from_rows([entry])[0])
            self._update_stall_ratio(time.time())

    def _metric(self, e: Event) -> None:
        self._point(e.name, e.value, e.labels.get("rank"), e.timestamp_ms)

    def _point(self, name: str, value: float, rank: str | None, timestamp_ms: int) -> None:
        """Feed one metric point (of worker ``rank``, if any) to its family."""
        if rank is not None and name in _WORKER_HANDLERS:
            if (labels := self._worker_labels.get(rank)) is None:  # built once per worker
                labels = self._worker_labels[rank] = {**self.labels, "rank": rank}
            _WORKER_HANDLERS[name](self, labels, value, timestamp_ms / 1000)
        elif name in ("train_loss", "val_loss", "test_loss"):
            self.loss.labels(**self.labels, split=name.removesuffix("_loss")).set(value)
        elif name.startswith(("val_", "test_")):
            self.eval_metric.labels(**self.labels, metric=name).set(value)
        elif name == "samples_per_second":
            self.throughput.labels(**self.labels).set(value)
        elif name == "epoch":
            self.epoch.labels(**self.labels).set(value)

    def _step(self, labels: dict, seconds: float, at: float) -> None:
        self._child(self.step_seconds, labels).observe(seconds)
        self._child(self.steps, labels).inc()
        self._last_step_at = max(at, self._last_step_at)
        self._child(self.last_step, self.labels).set(self._last_step_at)

    def _child(self, metric: Any, labels: dict) -> Any:
        """``metric.labels(**labels)``, cached: the per-step handlers run for every step of
        every worker, and prometheus_client's lookup costs microseconds each time."""
        key = (id(metric), tuple(labels.values()))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(**labels)
        return child

    def _cpu_total(self, labels: dict, seconds: float, at: float) -> None:
        # Workers report their process's cumulative CPU time; the counter takes the increase.
        key = labels["rank"]
        increase = seconds - self._cpu_seen.get(key, 0.0)
        self._cpu_seen[key] = seconds
        if increase > 0:
            self.cpu.labels(**labels).inc(increase)

    def _lifecycle(self, e: Event) -> None:
        if e.name == "stage":
            for stage in _STAGES:
                self.stage.labels(**self.labels, stage=stage).set(
                    1.0 if stage == e.data["stage"] else 0.0
                )
        elif e.name == "train_start" and e.labels.get("rank") == "0":
            self._starts += 1
            if self._starts > 1:
                self.restarts.labels(**self.labels).inc()
            self.workers.labels(**self.labels).set(e.data.get("world_size", 0))
        elif e.name == "alert":
            firing = 1.0 if e.data.get("state") == "firing" else 0.0
            self.alerts.labels(**self.labels, alertname=e.data["rule"]).set(firing)

    def _update_stall_ratio(self, now: float) -> None:
        # Running sums, not a sum over the window per batch: at hundreds of steps a second
        # the window holds tens of thousands of entries and summing them cost more than the
        # training step (benchmarks/monitor_overhead.py).
        while self._window and self._window[0][0] < now - STALL_WINDOW_S:
            _, part, seconds = self._window.popleft()
            self._sums[part] -= seconds
        if not self._window:  # no float drift carried over
            self._sums = [0.0] * _PARTS
        wait, copy, compute, blocked = self._sums
        busy = wait + max(copy, 0.0) + compute  # the steps' time
        if busy > 0:
            self._child(self.stall_ratio, self.labels).set(wait / busy)
            if self._comm_seen:
                # Blocked time lies inside compute time, so the share is of the same busy time.
                blocked = min(blocked, compute)
                self._child(self.comm_blocked_ratio, self.labels).set(max(blocked, 0.0) / busy)

    # -- set directly by the job ---------------------------------------------------------------
    def set_stage(self, stage: str) -> None:
        """Mark ``stage`` as the job's current pipeline stage."""
        self.observe([Event("lifecycle", "stage", data={"stage": stage})])

    def snapshot(self) -> dict[str, float]:
        """Current value of every sample, keyed ``name{label="v",...}`` (for the evaluator)."""
        out: dict[str, float] = {}
        with self._lock:
            for family in self.registry.collect():
                for sample in family.samples:
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}"] = sample.value
        return out

    def set_stall_threshold(self, seconds: float) -> None:
        """Export the job's stall threshold (MonitorSpec.stall_seconds) for EngageJobStalled."""
        with self._lock:
            self.stall_threshold.labels(**self.labels).set(seconds)

    def set_spool(self, depth: int, lag_seconds: float) -> None:
        """Export the tracking spool's depth (pending operations) and lag in seconds."""
        with self._lock:
            self.spool_depth.labels(**self.labels).set(depth)
            self.spool_lag.labels(**self.labels).set(lag_seconds)


def _add(counter_name: str):
    def handler(m: JobMetrics, labels: dict, value: float, at: float) -> None:
        """Add ``value`` (never negative) to counter ``counter_name`` for the worker's ``labels``."""
        m._child(getattr(m, counter_name), labels).inc(max(value, 0.0))

    return handler


def _set(gauge_name: str):
    def handler(m: JobMetrics, labels: dict, value: float, at: float) -> None:
        """Set gauge ``gauge_name`` for the worker's ``labels`` to ``value``."""
        m._child(getattr(m, gauge_name), labels).set(value)

    return handler


def _timed(counter_name: str, part: int):
    def handler(m: JobMetrics, labels: dict, value: float, at: float) -> None:
        """Add ``value`` seconds to counter ``counter_name`` and to the stall window's
        ``part`` of the step."""
        seconds = max(value, 0.0)
        m._child(getattr(m, counter_name), labels).inc(seconds)
        m._window.append((at, part, seconds))
        m._sums[part] += seconds
        m._comm_seen = m._comm_seen or part == _BLOCKED

    return handler


_WORKER_HANDLERS = {
    "step_seconds": JobMetrics._step,
    "data_wait_seconds": _timed("data_wait", _WAIT),
    "host_to_device_seconds": _timed("host_to_device", _COPY),
    "compute_seconds": _timed("compute", _COMPUTE),
    "samples": lambda m, labels, v, at: m._child(m.samples, labels).inc(v),
    "worker_cpu_seconds": JobMetrics._cpu_total,
    "worker_resident_memory_bytes": _set("rss"),
    "gpu_utilization_ratio": _set("gpu_util"),
    "gpu_memory_used_bytes": _set("gpu_memory"),
    "allreduce_seconds": _add("allreduce"),
    "allreduce_blocked_seconds": _timed("allreduce_blocked", _BLOCKED),
    "allreduce_buckets": _add("allreduce_buckets"),
    "allreduce_overlap": _set("allreduce_overlap"),
}
#: The metric names a family is fed from, besides the ``val_``/``test_`` ones (:func:`_is_eval`).
_EXPORTED = frozenset(
    {*_WORKER_HANDLERS, "train_loss", "val_loss", "test_loss", "samples_per_second", "epoch"}
)


def _is_eval(name: str) -> bool:
    """Whether ``name`` is an evaluation metric, exported as ``engage_eval_metric``."""
    return name.startswith(("val_", "test_"))


_STAGES = ("data", "ray", "train", "evaluate", "register", "tracking")
