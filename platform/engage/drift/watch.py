"""Live drift detection on a serving replica: sampled windows -> detectors -> policy -> events.

A :class:`DriftWatcher` is one of the sampler's consumers, so it runs on the sampler's
thread, never on a request. On the first sample of a ``(model, version)`` it loads that
version's training reference (the run's ``reference/`` artifacts, through an explicit
``MlflowClient``) and fits the configured detectors once; every ``check_every`` sampled
windows it checks them (each window's last row, as the reference holds rows), lets a
:class:`~engage.drift.DriftPolicy` decide, and reports through the replica's
:class:`~engage.events.Reporter` only: per detector and feature gauge events
(Prometheus, the MLflow monitoring run) and, when an alert changes state, an ``alert``
lifecycle event (``EngageDriftDetected``, ``EngagePredictionShift`` or
``EngageDriftCheckFailed``). Whoever builds the reporter wires its sinks (the serving hooks:
Prometheus, the monitoring run, the event store); the watcher writes nowhere else. A failed
detector or a NaN p-value is a failed check, never "no drift": the drift state is left as it
was and ``EngageDriftCheckFailed`` fires.

The drift state of a version is "drifted since T, on these features": T is when the change
began as the detectors date it (a detector that keeps regimes, such as ``cusum``, dates
the change point and stays drifted while the stream is in the new regime), else when the
first drifting check ran. It clears when the stream is back in the reference regime, when
the user renews the reference (:meth:`DriftWatcher.renew`), or, for detectors without
regimes, after :data:`~engage.drift.policy.CLEAR_AFTER_CHECKS` clean checks in a row: the
hysteresis is the policy's :class:`~engage.drift.AlertLatch`, one per alert.

Predictions get the same treatment (the label-free proxy of performance decay): the
latest ``prediction_window`` sampled outputs of a version are compared, at each check,
with the training outputs its reference holds
(:func:`~engage.drift.performance.prediction_shift`: predicted-class or value
shift, confidence drop), reported as detector ``prediction_shift`` and alerted as
``EngagePredictionShift``; a version whose reference has no outputs is checked on inputs
only.
"""

from __future__ import annotations

import inspect
import logging
import math
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engage.drift.base import DriftDetector, DriftResult, FeatureDrift, make_detector
from engage.drift.performance import prediction_shift
from engage.drift.policy import (
    CLEAR_AFTER_CHECKS,
    AlertLatch,
    DriftDecision,
    DriftPolicy,
    Transition,
    drifting,
)
from engage.drift.reference import Reference
from engage.drift.samples import Sample, SampleConsumer
from engage.events import Reporter
from engage.spec.models import DriftWatchSpec

__all__ = [
    "CLEAR_AFTER_CHECKS",
    "DRIFT_RULE",
    "FAILED_RULE",
    "PROXY",
    "SHIFT_RULE",
    "DriftStatus",
    "DriftWatcher",
    "ReferenceLoader",
    "mlflow_reference_loader",
]

_log = logging.getLogger(__name__)

DRIFT_RULE = "EngageDriftDetected"
FAILED_RULE = "EngageDriftCheckFailed"
SHIFT_RULE = "EngagePredictionShift"
PROXY = "prediction_shift"  # the detector label of the proxy's gauges
_TIMES = 100_000  # arrival times kept per version, to date a change point (rows back)

# (model, version) -> the version's reference, or None when its run logged none.
ReferenceLoader = Callable[[str, str], Reference | None]


def mlflow_reference_loader(tracking_uri: str) -> ReferenceLoader:
    """Loads a registered version's ``reference/`` artifacts with an explicit client."""

    def load(model: str, version: str) -> Reference | None:
        import os

        from engage.drift.reference import ARTIFACT_PATH, JSON
        from engage.tracking.store import open_client

        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        client = open_client(tracking_uri)
        run_id = client.get_model_version(model, version).run_id
        if not run_id:
            return None
        names = {Path(a.path).name for a in client.list_artifacts(run_id, ARTIFACT_PATH)}
        if JSON not in names:
            return None
        dst = tempfile.mkdtemp(prefix="engage-reference-")
        return Reference.load(Path(client.download_artifacts(run_id, ARTIFACT_PATH, dst)))

    return load


@dataclass(frozen=True)
class DriftStatus:
    """The input-drift state of one served version: drifted since when, on which features.

    Attributes
    ----------
    drifting : bool
        The drift alert is firing.
    since : float or None
        When the change began (Unix seconds), as the detectors date it; None when not
        drifting.
    features : tuple of str
        The drifting features.
    """

    drifting: bool
    since: float | None
    features: tuple[str, ...]


@dataclass
class _Version:
    """What the watcher knows about one served version."""

    model: str
    version: str
    reference: Reference | None = None
    detectors: list[DriftDetector] | None = None
    fit_error: str | None = None
    unavailable: bool = False  # the version has no reference: nothing to check against
    seen: int = 0
    pending: list[np.ndarray] = field(default_factory=list)
    pending_times: list[float] = field(default_factory=list)
    rows: int = 0  # rows handed to the detectors since they were fitted
    times: deque = field(default_factory=lambda: deque(maxlen=_TIMES))  # their arrival times
    outputs: deque = field(default_factory=deque)  # latest sampled predictions (bounded)
    drift: AlertLatch = field(default_factory=AlertLatch)
    shift: AlertLatch = field(default_factory=AlertLatch)
    failed: AlertLatch = field(default_factory=lambda: AlertLatch(clear_after=1))

    def time_of(self, row: int | None) -> float | None:
        """Arrival time of detector row ``row`` (the oldest kept if it is older)."""
        if row is None or not self.times:
            return None
        return self.times[max(0, row - (self.rows - len(self.times)))]


class DriftWatcher(SampleConsumer):
    """Checks sampled windows for drift per served version; reports gauges and alerts.

    Parameters
    ----------
    spec : DriftWatchSpec
        Detectors, check cadence, ERT and warm-up.
    reporter : Reporter
        The replica's report path; its sinks (Prometheus, the MLflow monitoring run, the
        event store) get every gauge and alert the watcher reports.
    load : callable
        ``(model, version) -> Reference | None``; see :func:`mlflow_reference_loader`.
    app : str
        The Serve app, named in alert summaries.
    policy : DriftPolicy or None
        Results to decisions; default ``DriftPolicy()``.
    """

    def __init__(
        self,
        spec: DriftWatchSpec,
        reporter: Reporter,
        load: ReferenceLoader,
        app: str = "",
        policy: DriftPolicy | None = None,
    ) -> None:
        self.spec = spec
        self._reporter = reporter
        self._load = load
        self._app = app
        self._policy = policy or DriftPolicy()
        self.versions: dict[tuple[str, str], _Version] = {}
        self.checks = 0
        self._lock = threading.Lock()  # the sampler's thread and prepare() (a loading one)

    @classmethod
    def for_replica(cls, settings: Any, reporter: Reporter) -> DriftWatcher:
        """The watcher of a serving replica (``settings``: its HookSettings; ``reporter``:
        its report path, whose sinks the hooks wired)."""
        from engage.tracking.store import resolve_tracking_uri

        uri = settings.tracking_uri or resolve_tracking_uri(None, None, Path(settings.home))
        return cls(settings.drift, reporter, mlflow_reference_loader(uri), settings.app)

    def prepare(self, model: str, version: str) -> None:
        """Load the version's reference and fit its detectors now (a replica loading the
        version calls this before serving it), not on its first sampled request, where the
        few seconds of CPU it takes would compete with the requests."""
        with self._lock:
            self._version(model, version)

    def status(self, model: str, version: str) -> DriftStatus:
        """The input-drift state of a served version (not drifting if never sampled)."""
        with self._lock:
            state = self.versions.get((model, version))
        if state is None or not state.drift.firing:
            return DriftStatus(False, None, ())
        return DriftStatus(True, state.drift.since, state.drift.features)

    def renew(self, model: str, version: str, reference: Reference | None = None) -> None:
        """The user renewed the version's reference: refit its detectors on ``reference``
        (None: load it again) and resolve its open drift and prediction-shift alerts."""
        with self._lock:
            state = self._version(model, version)
            state.reference, state.detectors = reference, None
            self._fit(state)
            state.pending, state.pending_times = [], []
            state.outputs.clear()
            why = f"reference of {self._served(state)} renewed"
            for rule, latch in ((DRIFT_RULE, state.drift), (SHIFT_RULE, state.shift)):
                done = latch.renew()
                if done is not None:
                    self._alert(state, rule, done, "warning", why, 0.0)

    # -- the consumer ------------------------------------------------------------------------
    def consume(self, samples: Sequence[Sample]) -> None:
        """Take sampled windows (the sampler's thread); checks run every ``check_every``."""
        with self._lock:
            self._consume(samples)

    def _consume(self, samples: Sequence[Sample]) -> None:
        for s in samples:
            state = self._version(s.model, s.version)
            if state.unavailable:
                continue
            state.seen += 1
            state.pending.append(np.asarray(s.inputs, dtype=np.float64))
            state.pending_times.append(s.timestamp)
            if self.spec.prediction_shift:
                state.outputs.append(s.prediction)
            if len(state.pending) >= self.spec.check_every and state.seen >= self.spec.min_samples:
                windows, times = np.stack(state.pending), state.pending_times
                state.pending, state.pending_times = [], []
                self.check(state, windows, times)

    def _version(self, model: str, version: str) -> _Version:
        key = (model, version)
        state = self.versions.get(key)
        if state is None:
            window = self.spec.prediction_window
            state = self.versions[key] = _Version(model, version, outputs=deque(maxlen=window))
            self._fit(state)
        return state

    def _fit(self, state: _Version) -> None:
        """Load the reference and fit every detector once; a failure is kept, not raised."""
        try:
            if state.reference is None:
                state.reference = self._load(state.model, state.version)
            if state.reference is None:
                state.unavailable = True
                self._unavailable(state)
                return
            state.detectors = [
                self._make(name).fit(state.reference) for name in self.spec.detectors
            ]
            state.fit_error = None
            state.rows = 0  # the detectors count rows from their fit
            state.times.clear()
        except Exception as exc:
            state.detectors = None
            state.fit_error = f"{type(exc).__name__}: {exc}"
            _log.warning("drift detectors of %s/%s: %s", state.model, state.version, exc)

    def _make(self, name: str) -> DriftDetector:
        probe = make_detector(name)
        if "ert" in inspect.signature(type(probe).__init__).parameters:
            return make_detector(name, ert=self.spec.ert)
        return probe

    # -- one check ---------------------------------------------------------------------------
    def check(
        self, state: _Version, windows: np.ndarray, times: Sequence[float] | None = None
    ) -> DriftDecision:
        """Check ``windows`` ``(n, window, F)`` of one version, which arrived at ``times``
        (default: now); report and return the decision."""
        if state.detectors is None:
            self._fit(state)  # e.g. MLflow was unreachable at the first sample: try again
        if state.detectors is None:
            why = f"detectors not fitted: {state.fit_error}"
            results = [DriftResult.failed(name, why, len(windows)) for name in self.spec.detectors]
        else:
            results = [d.check(windows) for d in state.detectors]
            state.rows += len(windows)
            state.times.extend(times if times is not None else [time.time()] * len(windows))
        n_features = len(state.reference.features) if state.reference is not None else 0
        decision = self._policy.decide(results, n_features)
        proxy = self._proxy(state)
        self.checks += 1
        checked = [*results, *([proxy] if proxy is not None else [])]
        self._gauges(state, checked)
        self._failed(state, decision, checked)
        if not decision.is_error:  # no verdict: the drift state stays as it was
            self._drifted(state, decision, results)
        if proxy is not None and proxy.error is None:
            self._shifted(state, proxy)
        return decision

    def _proxy(self, state: _Version) -> DriftResult | None:
        """The label-free proxy over the latest sampled predictions; None: not checked now."""
        ref = state.reference.outputs if state.reference is not None else None
        if not self.spec.prediction_shift or ref is None:
            return None
        if len(state.outputs) < self.spec.prediction_window:
            return None
        try:
            outputs = np.asarray(list(state.outputs), dtype=np.float64)
            outputs = outputs.reshape(len(outputs), -1)
            if outputs.shape[1] != ref.shape[1]:
                raise ValueError(
                    f"predictions have {outputs.shape[1]} output(s), the reference {ref.shape[1]}"
                )
            if not np.isfinite(outputs).all():
                raise ValueError("non-finite values in the sampled predictions")
            task = "classification" if ref.shape[1] > 1 else "regression"
            p_val = self.spec.prediction_p_value
            result = prediction_shift(ref, outputs, task, p_val=p_val)
        except Exception as exc:
            return DriftResult.failed(PROXY, f"{type(exc).__name__}: {exc}", len(state.outputs))
        values = [result.statistic, *(v for f in result.features for v in (f.statistic, f.p_value))]
        if any(v is not None and not math.isfinite(v) for v in values):
            return DriftResult.failed(PROXY, "NaN p-value or statistic", result.n)
        return result

    def _gauges(self, state: _Version, results: Sequence[DriftResult]) -> None:
        base = {"model": state.model, "version": state.version}
        for r in results:
            labels = {**base, "detector": r.detector}
            if r.error is not None:
                self._metric("drift_detected", math.nan, labels)
                self._metric("drift_checks", 1.0, {**labels, "outcome": "error"})
                continue
            self._metric("drift_detected", 1.0 if drifting(r) else 0.0, labels)
            outcome = "drift" if drifting(r) else "ok"
            self._metric("drift_checks", 1.0, {**labels, "outcome": outcome})
            for f in r.features or (_all_features(r),):
                threshold = f.threshold if f.threshold is not None else r.threshold
                self._metric("drift_statistic", f.statistic, {**labels, "feature": f.feature})
                self._metric("drift_threshold", threshold, {**labels, "feature": f.feature})

    def _metric(self, name: str, value: float, labels: dict[str, str]) -> None:
        reporter = self._reporter.with_labels(**labels)
        reporter.metric(name, float(value))
        reporter.flush()

    # -- alerts: the policy decides, its latches give the hysteresis, events report ---------
    def _failed(
        self, state: _Version, decision: DriftDecision, checked: Sequence[DriftResult]
    ) -> None:
        """EngageDriftCheckFailed: fires when the inputs' or the proxy's check has no verdict,
        resolves when both have one again (``checked``: every result of this check)."""
        reasons = [decision.reason] if decision.is_error else []
        proxy = [r for r in checked if r.detector == PROXY and r.error is not None]
        reasons += [f"{PROXY}: {r.error}" for r in proxy]
        done = state.failed.update(bool(reasons), settled=True, since=time.time())
        if done is None:
            return
        if done.state == "firing":
            failed = sum(r.error is not None for r in checked) or len(checked)
            summary = f"drift check of {self._served(state)} failed: {'; '.join(reasons)}"
            self._alert(state, FAILED_RULE, done, "warning", summary, float(failed))
        else:
            summary = f"drift checks of {self._served(state)} run again"
            self._alert(state, FAILED_RULE, done, "warning", summary, 0.0)

    def _drifted(
        self, state: _Version, decision: DriftDecision, results: Sequence[DriftResult]
    ) -> None:
        """EngageDriftDetected: fires on drift (again when more features drift), dated at
        the change point; resolves when the stream is back in the reference regime."""
        since = (state.time_of(decision.since) or time.time()) if decision.alert else None
        done = state.drift.update(
            decision.alert, decision.features, settled=decision.settled, since=since
        )
        if done is None:
            return
        served = self._served(state)
        if done.state == "firing":
            where = f" in {', '.join(done.features)}" if done.features else ""
            summary = f"input drift{where} of {served} since {_when(done.since)}: {decision.reason}"
            value = max(r.statistic for r in results if drifting(r))
            self._alert(state, DRIFT_RULE, done, decision.severity, summary, value)
        elif done.returned:
            summary = f"no input drift of {served}: back in the reference regime"
            self._alert(state, DRIFT_RULE, done, "warning", summary, 0.0)
        else:
            summary = f"no input drift of {served} for {done.clean} checks"
            self._alert(state, DRIFT_RULE, done, "warning", summary, 0.0)

    def _shifted(self, state: _Version, result: DriftResult) -> None:
        """EngagePredictionShift: fires on a shift (again when more proxies move), resolves
        after ``CLEAR_AFTER_CHECKS`` clean checks in a row, like input drift."""
        decision = self._policy.decide([result])
        done = state.shift.update(decision.alert, decision.features, since=time.time())
        if done is None:
            return
        served = self._served(state)
        if done.state == "firing":
            summary = (
                f"prediction shift in {', '.join(done.features)} of {served}: "
                f"{_moved(result)} over the last {result.n} sampled predictions"
            )
            self._alert(state, SHIFT_RULE, done, decision.severity, summary, result.statistic)
        else:
            summary = f"no prediction shift of {served} for {done.clean} checks"
            self._alert(state, SHIFT_RULE, done, "warning", summary, 0.0)

    # -- events ------------------------------------------------------------------------------
    def _served(self, state: _Version) -> str:
        app = f" (app {self._app})" if self._app else ""
        return f"{state.model}/{state.version}{app}"

    def _alert(
        self,
        state: _Version,
        rule: str,
        done: Transition,
        severity: str,
        summary: str,
        value: float,
    ) -> None:
        """Report an alert transition as an ``alert`` lifecycle event on the report path."""
        data = {
            "rule": rule,
            "state": done.state,
            "severity": severity,
            "summary": summary,
            "features": list(done.features),
            "value": value if math.isfinite(value) else None,
            "labels": {"model": state.model, "version": state.version},
            "since": time.time(),  # when the alert entered this state, as every alert says
            "started": done.since,  # when the episode began (drift: the change point)
        }
        reporter = self._reporter.with_labels(model=state.model, version=state.version)
        reporter.lifecycle("alert", **data)
        reporter.flush()
        log = _log.warning if done.state == "firing" else _log.info
        log("%s %s: %s", rule, done.state, summary)

    def _unavailable(self, state: _Version) -> None:
        message = (
            f"no drift reference for {state.model}/{state.version}: its run logged none "
            "(train it with `engage run` to monitor it for drift)"
        )
        _log.warning(message)
        reporter = self._reporter.with_labels(model=state.model, version=state.version)
        reporter.lifecycle("drift_unavailable", message=message)
        reporter.flush()


def _when(at: float | None) -> str:
    """A Unix time as UTC ISO-8601 to the second, for alert summaries."""
    if at is None:
        return "now"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _moved(r: DriftResult) -> str:
    """Which proxies moved and by how much, for an alert summary."""
    parts = []
    for f in r.features:
        if not f.is_drift:
            continue
        if f.feature == "confidence_drop":
            parts.append(f"mean confidence fell by {f.statistic:.3f} (limit {f.threshold:g})")
        else:
            parts.append(f"{f.feature} distribution moved (p={f.p_value:.2g} < {f.threshold:g})")
    return "; ".join(parts)


def _all_features(r: DriftResult) -> FeatureDrift:
    """A multivariate result as one pseudo-feature ``all``."""
    return FeatureDrift("all", r.statistic, r.p_value, r.threshold, r.is_drift)
