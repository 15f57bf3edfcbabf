"""Monitoring hooks of a serving replica: one report path, two sinks, and drift samples.

Every answered request becomes events on a :class:`Reporter` whose sinks, wired once here,
are the replica's Prometheus endpoint (``engage.monitor.serving``, advertised through file
discovery), an aggregator that logs a few summary metrics per interval to the deployment's
monitoring run through the tracking spool, and, when live drift checks are on, the event
store (lifecycle events only: alerts and notices). Sampled inputs and predictions go to the
:class:`Sampler`, whose consumers include the :class:`~engage.drift.watch.DriftWatcher`:
serving only hands it samples; the checks, the decisions and the alerts are drift's, and
they come back as events on the same report path (the aggregator logs their latest values
and tags the run with alerts; the store records the alerts).

None of it runs on a request: the request path appends one tuple to a queue (a
``deque.append``, well under a microsecond) and the hooks' own thread turns what queued
into events, samples and Prometheus updates every ``DRAIN_EVERY_S``. Counts and the
latency histogram are exact; they reach the sinks up to that much later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engage.drift.samples import Sample
from engage.events import Event, FanOut, Reporter
from engage.serve.sampling import Sampler, make_consumers
from engage.spec.models import DriftWatchSpec

_log = logging.getLogger(__name__)
_RESERVOIR = 2048  # latencies kept per interval for the logged percentiles
_SCORING_ROUTES = ("/predict", "/invocations")  # requests the monitoring run counts
DRAIN_EVERY_S = 0.2  # how often the hooks' thread reports what the requests queued
_PENDING_MAX = 200_000  # records waiting at most (the oldest go first if the thread stalls)
_VALUES_PER_REQUEST = 256  # regression values per request put in the value histogram


@dataclass(frozen=True)
class HookSettings:
    """What a replica's hooks need to know: its app, home, monitoring run and sampling."""

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
                if e.name == "request_seconds" and e.labels.get("route") in _SCORING_ROUTES:
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
    """What a serving replica reports through: metrics endpoint, monitoring run, sampler.

    ``request``, ``predicted``, ``batched`` and ``traffic`` only queue a record; the
    ``engage-serve-hooks`` thread reports them (see the module docstring).
    """

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
        watching = _watching(settings)
        if watching:
            self._open_store(home, settings, sinks)
        self._fanout = FanOut(_Observe(s) for s in sinks)
        # Flushed by the hooks' thread after each drain: nothing waits in a buffer longer.
        self.reporter = Reporter(self._fanout, max_batch=100_000, max_age_s=3600)
        self._labelled: dict[tuple, Reporter] = {}
        folder = home / "serve" / settings.app
        consumers = make_consumers(settings.consumers, folder)
        self.drift_watcher = self._watcher(settings) if watching else None
        if self.drift_watcher is not None:
            consumers.append(self.drift_watcher)
        self.sampler = Sampler(consumers, settings.sample_rate, settings.sample_queue).start()
        self._pending: deque[tuple] = deque(maxlen=_PENDING_MAX)
        self._drain_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engage-serve-hooks", daemon=True)
        self._thread.start()

    def _watcher(self, settings: HookSettings):
        """The live drift checks, reporting through this replica's sinks (a watcher that
        cannot start must not stop serving)."""
        from engage.drift.watch import DriftWatcher

        try:
            # Its own Reporter: it reports from the sampler's thread.
            reporter = Reporter(self._fanout, max_batch=10_000, max_age_s=3600)
            return DriftWatcher.for_replica(settings, reporter)
        except Exception as exc:
            _log.warning("live drift checks are off: %s", exc)
            return None

    def _open_store(self, home: Path, settings: HookSettings, sinks: list) -> None:
        """The event store as one more sink, for the watcher's alerts (lifecycle events)."""
        from engage.monitor.store import EventStore
        from engage.monitor.store_sink import StoreSink

        try:
            store = StoreSink(EventStore.open(home), self._job, settings.run_id)
            sinks.append(_Lifecycle(store))
        except Exception as exc:  # a broken store must not stop serving
            _log.warning("drift alerts will not reach the event store: %s", exc)

    def _open_run(self, home: Path, settings: HookSettings, sinks: list) -> None:
        from engage.tracking import Drainer, PipelineRun, Spool

        try:
            self._spool = Spool(home / "spool.db")
            run = PipelineRun(self._spool, settings.run_local_id, "", "")
            self._aggregate = _Aggregate(run, settings.metrics_every_seconds, self.replica)
            sinks.append(self._aggregate)
            # One drainer per spool holds its lock; the others stay idle, so this is safe.
            # A thread, not a drainer process: a replica's hooks already run off the request
            # path, and a replica should not leave children behind when Serve replaces it.
            self._drainer = Drainer(self._spool.path, warn=_log.warning, in_process=True).start(
                interval_s=1.0
            )
        except Exception as exc:
            _log.warning("serving metrics will not reach MLflow: %s", exc)

    @property
    def url(self) -> str:
        """The replica's Prometheus endpoint."""
        return f"http://{self.address}/metrics"

    def prepare(self, target) -> None:
        """A replica is about to serve ``target``: fit its drift detectors now (see
        DriftWatcher.prepare); a failure is the watcher's to report, not a reason to stop."""
        if self.drift_watcher is not None:
            try:
                self.drift_watcher.prepare(target.name, target.version)
            except Exception as exc:
                _log.warning("drift detectors of %s not prepared: %s", target.label, exc)

    # -- the request path: one append each ---------------------------------------------------
    def request(self, route: str, status: int, seconds: float) -> None:
        """Latency and status of one answered request (any route, any status)."""
        self._pending.append((_REQUEST, route, status, seconds))

    def predicted(
        self, target, ids: Sequence[str], x: np.ndarray, out: np.ndarray, labels: list
    ) -> None:
        """Prediction distribution and drift samples of one answered request."""
        self._pending.append((_PREDICTED, target, ids, x, out, labels))

    def batched(self, size: int) -> None:
        """One model call and how many requests it combined."""
        self._pending.append((_BATCH, size))

    def traffic(self, routes) -> None:
        """The share of traffic each served version gets (after every route change)."""
        self._pending.append((_TRAFFIC, tuple(routes)))

    # -- the hooks' thread -------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(DRAIN_EVERY_S):
            try:
                self.drain()
            except Exception:  # a failing sink must not end the reporting
                _log.exception("serving hooks: reporting failed")

    def _rep(self, **labels: str) -> Reporter:
        key = tuple(sorted(labels.items()))
        rep = self._labelled.get(key)
        if rep is None:
            rep = self._labelled[key] = self.reporter.with_labels(**labels)
        return rep

    def drain(self) -> int:
        """Report every queued record now; returns how many there were."""
        with self._drain_lock:
            pending, n = self._pending, len(self._pending)
            classes: Counter = Counter()
            for _ in range(n):
                record = pending.popleft()
                kind = record[0]
                if kind is _REQUEST:
                    _, route, status, seconds = record
                    self._rep(route=route, status=str(status)).metric("request_seconds", seconds)
                elif kind is _PREDICTED:
                    self._predicted(*record[1:], classes)
                elif kind is _BATCH:
                    self._rep().metric("batch_size", float(record[1]))
                elif kind is _TRAFFIC:
                    for r in record[1]:
                        self._rep(version=r.target.version).metric("traffic_share", r.weight)
            for (version, cls), count in classes.items():
                self._rep(version=version, **{"class": cls}).metric("predictions", float(count))
            for rep in self._labelled.values():
                rep.flush()
            return n

    def _predicted(self, target, ids, x, out, labels, classes: Counter) -> None:
        if target.classes:
            for label in labels:
                classes[(target.version, str(label))] += 1
        else:
            rep = self._rep(version=target.version)
            for value in out.reshape(-1)[:_VALUES_PER_REQUEST]:
                rep.metric("prediction_value", float(value))
        rows = self.sampler.pick(len(ids))
        if not rows:
            return
        at = time.time()
        dropped = self.sampler.put(
            [
                Sample(ids[i], x[i], out[i].tolist(), labels[i], target.name, target.version, at)
                for i in rows
            ]
        )
        if dropped:
            self._rep(version=target.version).metric("samples_dropped", float(dropped))

    def close(self) -> None:
        """Report what is queued, stop the threads and the endpoint, withdraw the target."""
        from engage.monitor.discovery import unregister_target

        self._stop.set()
        self._thread.join(timeout=5.0)
        try:
            self.drain()
        except Exception as exc:
            _log.warning("serving hooks: last report failed: %s", exc)
        unregister_target(Path(self.settings.home), self._job, self._target_id)
        self.sampler.stop()
        if self._aggregate is not None:
            self._aggregate.stop()
        if self._drainer is not None:
            self._drainer.stop(final_drain_s=2.0)
        self._server.shutdown()


_REQUEST, _PREDICTED, _BATCH, _TRAFFIC = "request", "predicted", "batch", "traffic"


def _watching(settings: HookSettings) -> bool:
    """Whether live drift checks are on: enabled, and some requests are sampled."""
    return settings.drift is not None and settings.drift.enabled and settings.sample_rate > 0


class _Lifecycle:
    """Hands a sink only the lifecycle events of a batch (the store keeps no request metrics)."""

    def __init__(self, sink) -> None:
        self._sink = sink

    def emit(self, events: Sequence[Event]) -> None:
        chosen = [e for e in events if e.kind == "lifecycle"]
        if chosen:
            self._sink.emit(chosen)


class _Observe:
    """Adapts ServingMetrics (observe) and sinks (emit) to the EventSink protocol."""

    def __init__(self, sink) -> None:
        self._call = sink.observe if hasattr(sink, "observe") else sink.emit

    def emit(self, events: Sequence[Event]) -> None:
        self._call(events)
