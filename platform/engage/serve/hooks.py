"""Monitoring hooks of an ingress replica: one report path, two sinks, and drift samples.

Every answered request becomes events on a :class:`Reporter` whose sinks are the replica's
Prometheus endpoint (``engage.monitor.serving``, advertised through file discovery) and an
aggregator that logs a few summary metrics per interval to the deployment's monitoring run
through the tracking spool. Sampled inputs and predictions go to the :class:`Sampler`,
whose consumers include the :class:`~engage.serve.drift_watch.DriftWatcher` (live drift
checks, reported through the same path; the aggregator logs their latest values too).
All of it runs after the response is sent (a background task), never before it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engage.runtime.reporting import Event, FanOut, Reporter
from engage.serve.sampling import Sample, Sampler, make_consumers
from engage.spec.models import DriftWatchSpec

_log = logging.getLogger(__name__)
_RESERVOIR = 2048  # latencies kept per interval for the logged percentiles


@dataclass(frozen=True)
class HookSettings:
    app: str
    home: str
    run_local_id: str | None  # the deployment's monitoring run in the spool
    run_id: str  # its MLflow id when known (the Prometheus label), else the local id
    sample_rate: float
    sample_queue: int
    consumers: tuple[str, ...]
    metrics_every_seconds: float
    tracking_uri: str | None = None  # where the served versions' drift references are
    drift: DriftWatchSpec | None = None  # None or disabled: no live drift checks


class _Aggregate:
    """Sums events over an interval and spools them to the monitoring run (low volume)."""

    def __init__(self, run, every_s: float, replica: str) -> None:
        self._run = run
        self._every = every_s
        self._replica = replica
        self._lock = threading.Lock()
        self._reset()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engage-serve-agg", daemon=True)
        self._thread.start()

    def _reset(self) -> None:
        self._count, self._errors, self._latency, self._classes = 0, 0, [], Counter()
        self._drift: dict[str, float] = {}

    def emit(self, events: Sequence[Event]) -> None:
        with self._lock:
            for e in events:
                if e.name == "request_seconds" and e.labels.get("route") == "/predict":
                    self._count += 1
                    self._errors += e.labels.get("status", "200")[0] in "45"
                    if len(self._latency) < _RESERVOIR:
                        self._latency.append(e.value)
                elif e.name == "predictions":
                    self._classes[e.labels.get("class", "")] += e.value or 0
                elif e.name.startswith("drift_") and e.kind == "metric":
                    self._drift_metric(e)
        for e in events:
            if e.kind == "lifecycle" and e.name == "alert":
                self._alert_tag(e)

    def _drift_metric(self, e: Event) -> None:
        """Latest drift values (NaN, a failed check, is counted instead: MLflow charts)."""
        lab = e.labels
        if e.name == "drift_checks":
            key = f"drift_checks_{lab.get('outcome', '')}"
            self._drift[key] = self._drift.get(key, 0.0) + (e.value or 0.0)
            return
        parts = [lab.get("detector", "")]
        if e.name != "drift_detected":
            parts.append(lab.get("feature", ""))
        if e.value is not None and np.isfinite(e.value):
            self._drift["_".join([e.name, *parts])] = e.value

    def _alert_tag(self, e: Event) -> None:
        """An alert becomes a tag of the monitoring run at once (rare, worth seeing now)."""
        data = e.data
        value = f"{data.get('state', '')}: {data.get('summary', '')}"[:4900]
        try:
            self._run.set_tags({f"engage.alert.{data.get('rule', 'unknown')}": value})
        except Exception as exc:
            _log.warning("cannot spool the alert tag: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            count, errors, latency, classes, drift = (
                self._count,
                self._errors,
                self._latency,
                self._classes,
                self._drift,
            )
            self._reset()
        if not count and not drift:
            return
        step = int(time.time())
        values: dict[str, float] = dict(drift)
        if count:
            values |= {"serve_requests": count, "serve_error_ratio": errors / count}
            values["serve_request_p50_seconds"] = float(np.percentile(latency, 50))
            values["serve_request_p99_seconds"] = float(np.percentile(latency, 99))
            total = sum(classes.values()) or 1
            values |= {f"serve_class_share_{c}": n / total for c, n in classes.items()}
        events = [Event("metric", k, float(v), step) for k, v in values.items()]
        try:
            self._run.log_metric_events(events)
        except Exception as exc:  # a full disk must not break serving
            _log.warning("cannot spool serving metrics: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self.flush()


class ServingHooks:
    """What an ingress replica reports through: metrics endpoint, monitoring run, sampler."""

    def __init__(self, settings: HookSettings, replica: str) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        from engage.monitor.discovery import register_target
        from engage.monitor.serving import ServingMetrics

        self.settings = settings
        self.replica = replica
        home = Path(settings.home)
        self.registry = CollectorRegistry(auto_describe=True)
        self.metrics = ServingMetrics(self.registry, settings.app, settings.run_id, replica)
        self._server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.address = f"127.0.0.1:{self._server.server_port}"
        self._job = f"serve-{settings.app}"
        self._target_id = f"{settings.run_id}-{replica}"
        register_target(
            home,
            self._job,
            self._target_id,
            self.address,
            {"run_id": settings.run_id, "replica": replica, "app": settings.app},
        )
        sinks: list = [self.metrics]
        self._spool = self._drainer = self._aggregate = None
        if settings.run_local_id:
            self._open_run(home, settings, sinks)
        # Flushed by each hook call itself: nothing waits in a buffer between requests.
        self.reporter = Reporter(
            FanOut(_Observe(s) for s in sinks), max_batch=10_000, max_age_s=3600
        )
        folder = home / "serve" / settings.app
        consumers = make_consumers(settings.consumers, folder)
        self.drift_watcher = self._watcher(settings)
        if self.drift_watcher is not None:
            consumers.append(self.drift_watcher)
        self.sampler = Sampler(consumers, settings.sample_rate, settings.sample_queue).start()

    def _watcher(self, settings: HookSettings):
        """The live drift checks, when enabled (a broken store must not stop serving)."""
        if settings.drift is None or not settings.drift.enabled or settings.sample_rate <= 0:
            return None
        from engage.serve.drift_watch import DriftWatcher

        try:
            return DriftWatcher.for_replica(settings, self.reporter)
        except Exception as exc:
            _log.warning("live drift checks are off: %s", exc)
            return None

    def _open_run(self, home: Path, settings: HookSettings, sinks: list) -> None:
        from engage.tracking import Drainer, PipelineRun, Spool

        try:
            self._spool = Spool(home / "spool.db")
            run = PipelineRun(self._spool, settings.run_local_id, "", "")
            self._aggregate = _Aggregate(run, settings.metrics_every_seconds, self.replica)
            sinks.append(self._aggregate)
            # One drainer per spool holds its lock; the others stay idle, so this is safe.
            self._drainer = Drainer(self._spool.path, warn=_log.warning).start(interval_s=1.0)
        except Exception as exc:
            _log.warning("serving metrics will not reach MLflow: %s", exc)

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def request(self, route: str, status: int, seconds: float) -> None:
        """Latency and status of one answered request (any route, any status)."""
        reporter = self.reporter.with_labels(route=route, status=str(status))
        reporter.metric("request_seconds", seconds)
        reporter.flush()

    def predicted(
        self, target, ids: Sequence[str], x: np.ndarray, out: np.ndarray, labels: list, batch: int
    ) -> None:
        """Prediction distribution, batch size and drift samples of one answered request."""
        reporter = self.reporter.with_labels(version=target.version)
        reporter.metric("batch_size", float(batch))
        if target.classes:
            for cls, n in Counter(labels).items():
                by_class = reporter.with_labels(**{"class": str(cls)})
                by_class.metric("predictions", float(n))
                by_class.flush()
        else:
            for value in out.reshape(-1)[:256]:
                reporter.metric("prediction_value", float(value))
        at = time.time()
        dropped = self.sampler.offer(
            [
                Sample(rid, x[i], out[i].tolist(), labels[i], target.name, target.version, at)
                for i, rid in enumerate(ids)
            ]
        )
        if dropped:
            reporter.metric("samples_dropped", float(dropped))
        reporter.flush()

    def traffic(self, routes) -> None:
        """The share of traffic each served version gets (after every route change)."""
        for r in routes:
            reporter = self.reporter.with_labels(version=r.target.version)
            reporter.metric("traffic_share", r.weight)
            reporter.flush()

    def close(self) -> None:
        from engage.monitor.discovery import unregister_target

        unregister_target(Path(self.settings.home), self._job, self._target_id)
        self.sampler.stop()
        if self._aggregate is not None:
            self._aggregate.stop()
        if self._drainer is not None:
            self._drainer.stop(final_drain_s=2.0)
        self._server.shutdown()


class _Observe:
    """Adapts ServingMetrics (observe) and sinks (emit) to the EventSink protocol."""

    def __init__(self, sink) -> None:
        self._call = sink.observe if hasattr(sink, "observe") else sink.emit

    def emit(self, events: Sequence[Event]) -> None:
        self._call(events)
