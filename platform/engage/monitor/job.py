"""A job's monitor: its metrics endpoint, kept current, and its own alert evaluation."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engage.events import Event
from engage.monitor.evaluator import ANNOUNCED, AlertEvaluator, alert_event
from engage.monitor.exporter import MonitorSink
from engage.monitor.rules import RULES, series_names
from engage.monitor.series import SeriesBuffer

_log = logging.getLogger(__name__)


def _no_publish(events: list[Event]) -> None:
    """Default ``JobMonitor.publish``: alerts stay in the job's own metrics."""


class JobMonitor:
    """Observer and EventSink of a pipeline run: metrics, stage, spool state, alerts.

    A background tick (every ``spec.evaluate_every_seconds``) refreshes what is not an
    event (the tracking spool's depth and lag) and evaluates the alert rules. Each alert
    that fires or resolves sets ``engage_alerts_firing`` and goes to ``publish`` as an
    ``Event("lifecycle", "alert")``; the runner points ``publish`` at its fan-out.
    """

    def __init__(self, job: str, run_id: str, home: Path, spec: Any, spool: Any) -> None:
        self.sink = MonitorSink(job, run_id, home, spec.host, spec.port)
        self.spec = spec
        self._spool = spool
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.url: str | None = None
        self.publish: Callable[[list[Event]], None] = _no_publish
        self.evaluator = AlertEvaluator(RULES, SeriesBuffer(names=series_names()))
        self.sink.metrics.set_stall_threshold(spec.stall_seconds)

    @property
    def metrics(self):
        """The job's :class:`~engage.monitor.metrics.JobMetrics`."""
        return self.sink.metrics

    def start(self) -> str:
        """Serve the metrics, evaluate once, start the background tick; returns the metrics URL.

        Raises
        ------
        EngageError
            If the metrics endpoint cannot be bound.
        """
        self.url = self.sink.start().url
        self._tick()
        self._thread = threading.Thread(target=self._loop, name="engage-monitor", daemon=True)
        self._thread.start()
        return self.url

    def stage(self, name: str, detail: str = "") -> None:
        """Show the pipeline stage ``name`` in the job's metrics (``detail`` is not recorded)."""
        self.sink.metrics.set_stage(name)

    def emit(self, events: Sequence[Event]) -> None:
        """Update the job's metrics from ``events`` (the EventSink side of the monitor)."""
        self.sink.emit(events)

    def _loop(self) -> None:
        while not self._stop.wait(self.spec.evaluate_every_seconds):
            try:
                self._tick()
            except Exception as exc:  # a broken sink must not end monitoring for the job
                _log.warning("monitor tick failed: %s", exc)

    def _tick(self) -> None:
        stats = self._spool.stats()
        self.sink.metrics.set_spool(stats.depth, stats.lag_seconds)
        self.evaluate(time.time())

    def evaluate(self, now: float) -> list[Event]:
        """Sample the job's metrics, evaluate the rules, announce what changed."""
        self.evaluator.buffer.sample_registry(self.sink.registry, now)
        transitions = self.evaluator.evaluate(now)
        events = [alert_event(t) for t in transitions if t.state in ANNOUNCED]
        if events:
            self.sink.emit(events)  # engage_alerts_firing follows the alert events
            self.publish(events)
        return events

    def stop(self) -> None:
        """Stop the background tick (waiting up to 10 s for it) and the metrics endpoint."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sink.stop()
