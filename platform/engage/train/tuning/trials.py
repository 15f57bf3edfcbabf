"""The driver's book of tuning trials: one child run and one monitored job per trial.

:class:`TrialBook` is told when Tune starts and ends a trial (by the callback in
:mod:`engage.train.tuning.callback`) and is the sink of every event the trials report
through the job's event hub. Per trial it holds an MLflow child run of the job's run
(tag ``mlflow.parentRunId`` through the spool), whose metric sink gets that trial's
series, and an event-store record, so ``engage monitor`` and the dashboard list each
trial like a job. Every trial event also reaches the job's live monitor, which keeps the
stall alert fed while trials train. Lifecycle lines and a ``trial`` progress tick go to
the job's bus for the display. Nothing here imports Ray, so it is tested without it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engage.events import Event, EventSink
from engage.tracking.sinks import MetricSink
from engage.train.tuning.search import describe, trial_overrides
from engage.train.tuning.trial import TRIAL_LABEL

_RUN_ID_WAIT_S = 1.0  # how long a trial's start waits for MLflow to have its child run


@dataclass
class TrialRecord:
    """One trial as the driver sees it."""

    number: int
    trial_id: str
    config: dict[str, Any]
    run: Any  # its child PipelineRun
    sinks: list[EventSink]
    store: Any = None  # its StoreSink, when the job has an event store
    status: str = "RUNNING"
    epochs: int = 0
    value: float | None = None
    stopped_early: bool = False
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0

    def row(self, metric: str) -> dict[str, Any]:
        """The trial as one row of ``tune/trials.json``."""
        return {
            "trial": self.number,
            "trial_id": self.trial_id,
            "run_id": self.run.run_id,
            "status": self.status,
            "stopped_early": self.stopped_early,
            "epochs": self.epochs,
            metric: self.value,
            "seconds": round(self.seconds, 3),
            "config": self.config,
            **({"error": self.error} if self.error else {}),
        }


class TrialBook:
    """Every trial of one search: its child run, its monitored record, its result.

    Thread-safe: Tune calls :meth:`started` and :meth:`ended` from its own thread while
    the driver's event pump calls :meth:`emit`.

    Parameters
    ----------
    parent:
        The job's run (a :class:`~engage.tracking.PipelineRun`).
    job:
        The job's name; a trial is listed as ``JOB/trial-N``.
    metric, mode:
        What trials are compared on, and whether lower (``min``) or higher is better.
    total:
        How many trials the search runs.
    epochs_of:
        How many epochs a trial's configuration trains (to tell an early stop).
    publish:
        The job's bus ``send``: display lines and the ``trial`` progress tick.
    monitor:
        The job's live monitor sink (None when the spec turns it off).
    store:
        The job's event store (None without one).
    where:
        The spec's folder (child runs record no lineage of their own).
    """

    def __init__(
        self,
        parent: Any,
        job: str,
        metric: str,
        mode: str,
        total: int,
        epochs_of: Callable[[Mapping[str, Any]], int],
        publish: Callable[[list[Event]], None],
        monitor: EventSink | None = None,
        store: Any = None,
        where: Path | None = None,
    ) -> None:
        self.parent, self.job, self.metric, self.mode = parent, job, metric, mode
        self.total, self.epochs_of, self.publish = total, epochs_of, publish
        self.monitor, self.store, self.where = monitor, store, where or Path.cwd()
        self.records: dict[str, TrialRecord] = {}
        self._waiting: dict[str, list[Event]] = {}  # events of a trial not started yet
        self._lock = threading.RLock()

    # -- what Tune tells ----------------------------------------------------------------

    def started(self, trial_id: str, config: Mapping[str, Any]) -> TrialRecord:
        """Open the trial's child run and monitored record, and say so on the bus."""
        with self._lock:
            if trial_id in self.records:
                return self.records[trial_id]
            number = len(self.records) + 1
            config = dict(config)
            run = self.parent.child(
                f"trial-{number:04d}",
                {
                    "engage.tune.trial": str(number),
                    "engage.tune.trial_id": trial_id,
                    "engage.overrides": " ".join(trial_overrides(config)),
                },
                self.where,
            )
            run.log_params(config)
            record = TrialRecord(number, trial_id, config, run, [MetricSink(run)])
            record.store = self._open_store(record)
            self.records[trial_id] = record
            waiting = self._waiting.pop(trial_id, [])
        if waiting:
            self.emit(waiting)
        self._say(f"trial {number}/{self.total} started: {describe(config)}")
        self._tick()
        return record

    def ended(self, trial_id: str, status: str, last: Mapping[str, Any] | None, error: str = ""):
        """End the trial's child run with ``status`` (FINISHED or FAILED) and tick the display."""
        with self._lock:
            record = self.records.get(trial_id) or self.started(trial_id, {})
            if record.status != "RUNNING":
                return
            last = last or {}
            record.epochs = int(last.get("training_iteration", record.epochs) or 0)
            value = last.get(self.metric)
            record.value = float(value) if isinstance(value, int | float) else None
            record.status, record.error = status, error
            record.stopped_early = status == "FINISHED" and record.epochs < self.epochs_of(
                record.config
            )
            record.seconds = time.monotonic() - record.started
            record.run.set_tags(
                {
                    "engage.tune.stopped_early": str(record.stopped_early).lower(),
                    **({"engage.tune.error": error[:500]} if error else {}),
                }
            )
            record.run.end(status)
            if record.store is not None:
                record.store.finish(status)
        self._say(self._ended_line(record))
        self._tick()

    # -- what the trials report ---------------------------------------------------------

    def emit(self, events: Sequence[Event]) -> None:
        """Route each trial's events to its child run and record, all to the monitor."""
        by_trial: dict[str, list[Event]] = {}
        for e in events:
            by_trial.setdefault(str(e.labels.get(TRIAL_LABEL, "")), []).append(e)
        with self._lock:
            for trial_id, batch in by_trial.items():
                record = self.records.get(trial_id)
                if record is None:
                    if trial_id:  # Tune's start call may come after the first events
                        self._waiting.setdefault(trial_id, []).extend(batch)
                    continue
                for sink in record.sinks:
                    sink.emit(batch)
                if record.store is not None:
                    record.store.emit(batch)
        if self.monitor is not None:
            self.monitor.emit(events)

    # -- what the search found ----------------------------------------------------------

    def best(self) -> TrialRecord | None:
        """The finished trial with the best last value of the metric (None: none finished)."""
        done = [
            r
            for r in self.records.values()
            if r.status == "FINISHED" and r.value is not None and math.isfinite(r.value)
        ]
        if not done:
            return None
        # An early-stopped trial's last value is from fewer epochs: it wins only if better.
        sign = 1.0 if self.mode == "min" else -1.0
        return min(done, key=lambda r: (sign * (r.value or 0.0), r.number))

    def rows(self) -> list[dict[str, Any]]:
        """Every trial as a row, in start order."""
        with self._lock:
            return [r.row(self.metric) for r in sorted(self.records.values(), key=_number)]

    def summary(self) -> dict[str, float]:
        """Counts and totals of the search, as the job's ``tune_*`` metrics."""
        with self._lock:
            records = list(self.records.values())
        best = self.best()
        out = {
            "tune_trials": float(len(records)),
            "tune_trials_stopped_early": float(sum(r.stopped_early for r in records)),
            "tune_trials_failed": float(sum(r.status == "FAILED" for r in records)),
            "tune_trial_epochs": float(sum(r.epochs for r in records)),
        }
        if best is not None and best.value is not None:
            out[f"tune_best_{self.metric}"] = best.value
        return out

    def close(self, status: str) -> None:
        """End every trial still running with ``status`` (the search stopped or failed)."""
        with self._lock:
            running = [r.trial_id for r in self.records.values() if r.status == "RUNNING"]
        for trial_id in running:
            self.ended(trial_id, status, None, error="the search ended before this trial")

    # -- helpers ------------------------------------------------------------------------

    def _open_store(self, record: TrialRecord) -> Any:
        """The trial's event-store record, listed as ``JOB/trial-N`` (None without a store)."""
        if self.store is None:
            return None
        from engage.monitor import StoreSink

        run_id = record.run.wait_for_run_id(_RUN_ID_WAIT_S)
        sink = StoreSink(self.store, f"{self.job}/trial-{record.number:04d}", run_id)
        sink.start(None)  # a trial has no endpoint of its own: the job's serves its series
        sink.stage("trial", describe(record.config))
        return sink

    def _ended_line(self, r: TrialRecord) -> str:
        head = f"trial {r.number}/{self.total} "
        if r.status == "FAILED":
            return head + f"failed after {r.epochs} epochs: {r.error or 'see its run'}"
        how = "stopped early by ASHA" if r.stopped_early else "finished"
        value = "n/a" if r.value is None else f"{r.value:.4f}"
        return head + f"{how} after {r.epochs} epochs: {self.metric} {value}"

    def _tick(self) -> None:
        """The display's trials bar: how many trials ended, of how many, and the best so far."""
        with self._lock:
            done = sum(r.status != "RUNNING" for r in self.records.values())
            best = self.best()
        data = {
            "done": done,
            "total": self.total,
            "metric": self.metric,
            "best": best.value if best is not None else None,
        }
        self.publish([Event("progress", "trial", data=data)])

    def _say(self, text: str) -> None:
        self.publish([Event("lifecycle", "tune", data={"message": text})])


def _number(record: TrialRecord) -> int:
    return record.number


def dumps(rows: list[dict[str, Any]]) -> str:
    """``rows`` as the JSON text of ``tune/trials.json``."""
    return json.dumps({"trials": rows}, indent=2, default=str)
