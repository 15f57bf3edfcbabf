"""A job's monitor: its metrics endpoint, kept current, and its own alert evaluation."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engage.monitor.exporter import MonitorSink
from engage.runtime.reporting import Event


class JobMonitor:
    """Observer and EventSink of a pipeline run: metrics, stage, spool state, alerts.

    A background tick (every ``spec.evaluate_every_seconds``) refreshes what is not an
    event (the tracking spool's depth and lag) and evaluates the alert rules.
    """

    def __init__(self, job: str, run_id: str, home: Path, spec: Any, spool: Any) -> None:
        self.sink = MonitorSink(job, run_id, home, spec.host, spec.port)
        self.spec = spec
        self._spool = spool
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    @property
    def metrics(self):
        return self.sink.metrics

    def start(self) -> str:
        self.url = self.sink.start().url
        self._tick()
        self._thread = threading.Thread(target=self._loop, name="engage-monitor", daemon=True)
        self._thread.start()
        return self.url

    def stage(self, name: str, detail: str = "") -> None:
        self.sink.metrics.set_stage(name)

    def emit(self, events: Sequence[Event]) -> None:
        self.sink.emit(events)

    def _loop(self) -> None:
        while not self._stop.wait(self.spec.evaluate_every_seconds):
            self._tick()

    def _tick(self) -> None:
        stats = self._spool.stats()
        self.sink.metrics.set_spool(stats.depth, stats.lag_seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sink.stop()
