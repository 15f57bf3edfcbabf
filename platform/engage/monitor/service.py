"""The standalone monitor service (``engage monitor serve``), for when no Prometheus runs.

Every ``interval_s`` it scrapes each discovered job endpoint, records liveness in the
event store (a job whose endpoint stays gone, or whose process is gone, becomes "lost"),
hands each scrape to its hooks (:class:`AlertRulesHook` evaluates engage's alert rules,
and the alerts it returns are recorded like any job's), and serves its own /metrics.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from engage.errors import EngageError
from engage.events import Event
from engage.monitor._schema import NewEvent
from engage.monitor.exporter import Endpoint
from engage.monitor.live import Scrape, Target, discovered_targets, scrape_all
from engage.monitor.store import TERMINAL_STATES, EventStore
from engage.monitor.store_sink import StoreSink

_log = logging.getLogger(__name__)


class ScrapeHook(Protocol):
    """What runs inside ``serve`` with the scrapes: alert rule evaluation plugs in here."""

    def on_scrape(self, scrape: Scrape) -> None:
        """Called with every scrape, answered or not."""

    def after_cycle(self, now: float) -> Sequence[Event]:
        """Called once per cycle; returns events (alerts) labelled with job and run_id."""


class AlertRulesHook:
    """engage's alert rules over every scraped job, as a Prometheus server would evaluate them."""

    def __init__(self) -> None:
        from engage.monitor.evaluator import AlertEvaluator
        from engage.monitor.rules import RULES, series_names
        from engage.monitor.series import SeriesBuffer

        self.evaluator = AlertEvaluator(RULES, SeriesBuffer(names=series_names()))

    def on_scrape(self, scrape: Scrape) -> None:
        """Add an answered scrape's samples to the rules' series buffer."""
        if scrape.text is not None:
            self.evaluator.buffer.sample_text(scrape.text, scrape.at)

    def after_cycle(self, now: float) -> list[Event]:
        """Evaluate every rule and return an ``alert`` lifecycle event for each alert that began
        firing or resolved, labelled with its job and run.
        """
        out = []
        for t in self.evaluator.evaluate(now):
            if t.state not in ("firing", "resolved"):
                continue  # pending and inactive alerts were never announced
            labels = dict(t.labels)
            job, run_id = labels.pop("job", "?"), labels.pop("run_id", "?")
            data = {
                "rule": t.rule.name,
                "state": t.state,
                "severity": t.rule.severity,
                "summary": t.summary,
                "value": t.value,
                "labels": labels,
            }
            out.append(
                Event("lifecycle", "alert", timestamp_ms=int(t.since * 1000),
                      labels={"job": job, "run_id": run_id}, data=data)
            )  # fmt: skip
        return out


def default_hooks() -> list[ScrapeHook]:
    """The hooks ``engage monitor serve`` runs: alert rules, when that module is present."""
    try:
        return [AlertRulesHook()]
    except ImportError:
        return []


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback IP address (a host name other than
    ``localhost`` is not resolved and counts as not loopback).
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MonitorService:
    """Scrapes job endpoints, keeps the store's job states honest, serves its own metrics."""

    def __init__(
        self,
        home: Path,
        store: EventStore,
        interval_s: float = 5.0,
        lost_after_s: float | None = None,
        timeout_s: float = 2.0,
        hooks: Sequence[ScrapeHook] = (),
    ) -> None:
        self.home = home
        self.store = store
        self.interval_s = interval_s
        self.lost_after_s = lost_after_s if lost_after_s is not None else max(15.0, 3 * interval_s)
        self.timeout_s = timeout_s
        self.hooks: list[ScrapeHook] = list(hooks)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.jobs = Gauge(
            "engage_monitor_jobs", "Job endpoints watched, by up|down.", ("state",), registry=r
        )
        self.scrape_errors = Counter(
            "engage_monitor_scrape_errors",
            "Scrapes of a job endpoint that failed.",
            ("job", "run_id"),
            registry=r,
        )
        self.up = Gauge(
            "engage_up",
            "1 when the job's endpoint answered the last scrape.",
            ("job", "run_id"),
            registry=r,
        )
        self.cycles = Counter("engage_monitor_cycles", "Scrape cycles run.", registry=r)
        self.hook_errors = Counter(
            "engage_monitor_hook_errors", "Scrape hooks that raised.", registry=r
        )
        self._down_since: dict[str, float] = {}
        self._series: set[tuple[str, str]] = set()
        self._sinks: dict[str, StoreSink] = {}
        self._server: Any = None

    # -- one cycle ---------------------------------------------------------------------------
    def cycle(self) -> list[Scrape]:
        """Scrape every watched endpoint once; returns the scrapes."""
        targets = self._targets()
        scrapes = scrape_all(targets, self.timeout_s)
        for got in scrapes:
            self._observe(got)
        now = time.time()
        self._after_cycle(now)
        self._forget({(t.job, t.run_id) for t in targets})
        self._reap(now)
        up = sum(1 for s in scrapes if s.ok)
        self.jobs.labels(state="up").set(up)
        self.jobs.labels(state="down").set(len(scrapes) - up)
        self.cycles.inc()
        return scrapes

    def _targets(self) -> list[Target]:
        running = {j.run_id: j for j in self.store.running_jobs()}
        targets = {t.run_id: t for t in discovered_targets(self.home)}
        for run_id, job in running.items():
            if run_id not in targets and job.metrics_url:
                targets[run_id] = Target(job.job, run_id, job.metrics_url)
        watched = []
        for run_id, target in targets.items():
            record = running.get(run_id) or self.store.job(run_id)
            # A discovery file left behind by a job the store saw end (SIGKILL leaves it).
            if record is not None and record.state in TERMINAL_STATES and run_id not in running:
                continue
            watched.append(target)
        return watched

    def _observe(self, got: Scrape) -> None:
        t = got.target
        self._series.add((t.job, t.run_id))
        self.up.labels(job=t.job, run_id=t.run_id).set(1 if got.ok else 0)
        if got.ok:
            self._down_since.pop(t.run_id, None)
        else:
            self.scrape_errors.labels(job=t.job, run_id=t.run_id).inc()
            self._down_since.setdefault(t.run_id, got.at)
        for hook in self.hooks:
            self._call(hook.on_scrape, got)

    def _after_cycle(self, now: float) -> None:
        for hook in self.hooks:
            for e in self._call(hook.after_cycle, now) or ():
                job, run_id = e.labels.get("job", "?"), e.labels.get("run_id", "?")
                self._sink(job, run_id).emit([e])

    def _call(self, fn: Any, arg: Any) -> Any:
        try:
            return fn(arg)
        except Exception:  # a broken hook must not stop liveness tracking
            self.hook_errors.inc()
            _log.exception("monitor hook failed")
            return None

    def _sink(self, job: str, run_id: str) -> StoreSink:
        if run_id not in self._sinks:
            self._sinks[run_id] = StoreSink(self.store, job, run_id)
        return self._sinks[run_id]

    def _forget(self, current: set[tuple[str, str]]) -> None:
        for job, run_id in self._series - current:
            self.up.remove(job, run_id)
            self._down_since.pop(run_id, None)
            self._sinks.pop(run_id, None)
        self._series &= current

    def _reap(self, now: float) -> None:
        """Running jobs whose process is gone, or whose endpoint stayed down, become lost."""
        lost = {j.run_id: "its process is gone" for j in self.store.reap_lost()}
        for run_id, since in list(self._down_since.items()):
            if now - since >= self.lost_after_s and self.store.mark_lost(run_id, now):
                lost[run_id] = f"its endpoint has not answered for {now - since:.0f} s"
        for run_id, why in lost.items():
            record = self.store.job(run_id)
            job = record.job if record else "?"
            self.store.record(
                [NewEvent(run_id, job, "lifecycle", "lost", now, "warning", f"job lost: {why}")]
            )

    # -- serving -----------------------------------------------------------------------------
    def serve(self, host: str = "127.0.0.1", port: int = 9470) -> Endpoint:
        """Serve /metrics; binds loopback unless the caller passed another host on purpose.

        Raises
        ------
        EngageError
            If ``host:port`` cannot be bound (for example a port already in use).
        """
        try:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise EngageError(
                f"cannot serve the monitor on {host}:{port}: {exc.strerror or exc}",
                hint="pass another --port (0 picks a free one)",
            ) from None
        return Endpoint(host, self._server.server_port)

    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set; a failing cycle is logged and retried next time."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:
                _log.exception("monitor cycle failed")
            stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def close(self) -> None:
        """Shut down the service's own metrics endpoint, if it was started; safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
