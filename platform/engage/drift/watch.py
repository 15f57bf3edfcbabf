"""Live drift detection on a serving replica: sampled windows -> detectors -> policy -> events.

A :class:`DriftWatcher` is one of the sampler's consumers, so it runs on the sampler's
thread, never on a request. On the first sample of a ``(model, version)`` it loads that
version's training reference (the run's ``reference/`` artifacts, through an explicit
``MlflowClient``) and fits the configured detectors once; every ``check_every`` sampled
windows it checks them (each window's last row, as the reference holds rows), lets a
:class:`~engage.drift.DriftPolicy` decide, and reports through the replica's
:class:`~engage.events.Reporter`: per detector and feature gauge events
(Prometheus, the MLflow monitoring run) and, on a change of state, an ``alert`` lifecycle
event (``EngageDriftDetected`` or ``EngageDriftCheckFailed``), which it also records in the
event store. A failed detector or a NaN p-value is a failed check, never "no drift": the
drift state is left as it was and ``EngageDriftCheckFailed`` fires.

Predictions get the same treatment (the label-free proxy of performance decay): the
latest ``prediction_window`` sampled outputs of a version are compared, at each check,
with the training outputs its reference holds
(:func:`~engage.drift.performance.prediction_shift`: predicted-class or value
shift, confidence drop), reported as detector ``prediction_shift`` and alerted as
``EngagePredictionShift``; a version whose reference has no outputs is checked on inputs
only.

Resolution has hysteresis: online detectors restart after an alarm, so one clean check in
the middle of a drift is expected; the alert resolves after ``CLEAR_AFTER_CHECKS`` clean
checks in a row.
"""

from __future__ import annotations

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

from engage.drift import DriftDecision, DriftPolicy, DriftResult, Reference, make_detector
from engage.drift.performance import prediction_shift
from engage.events import Event, Reporter
from engage.serve.sampling import Sample, SampleConsumer
from engage.spec.models import DriftWatchSpec

_log = logging.getLogger(__name__)

DRIFT_RULE = "EngageDriftDetected"
FAILED_RULE = "EngageDriftCheckFailed"
SHIFT_RULE = "EngagePredictionShift"
PROXY = "prediction_shift"  # the detector label of the proxy's gauges
CLEAR_AFTER_CHECKS = 3

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


@dataclass
class _Version:
    """What the watcher knows about one served version."""

    model: str
    version: str
    reference: Reference | None = None
    detectors: list[Any] | None = None
    fit_error: str | None = None
    unavailable: bool = False  # the version has no reference: nothing to check against
    seen: int = 0
    pending: list[np.ndarray] = field(default_factory=list)
    drifting: bool = False
    failed: bool = False
    clean: int = 0
    features: tuple[str, ...] = ()
    outputs: deque = field(default_factory=deque)  # latest sampled predictions (bounded)
    shifting: bool = False
    shift_clean: int = 0
    shift_features: tuple[str, ...] = ()


class DriftWatcher(SampleConsumer):
    """Checks sampled windows for drift per served version; reports gauges and alerts.

    Parameters
    ----------
    spec : DriftWatchSpec
        Detectors, check cadence, ERT and warm-up.
    reporter : Reporter
        The replica's report path (Prometheus gauges, the MLflow monitoring run).
    load : callable
        ``(model, version) -> Reference | None``; see :func:`mlflow_reference_loader`.
    store : StoreSink or None
        Where alert events are recorded (the event store); None: not recorded.
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
        store: Any = None,
        app: str = "",
        policy: DriftPolicy | None = None,
    ) -> None:
        self.spec = spec
        self._reporter = reporter
        self._load = load
        self._store = store
        self._app = app
        self._policy = policy or DriftPolicy()
        self.versions: dict[tuple[str, str], _Version] = {}
        self.checks = 0
        self._lock = threading.Lock()  # the sampler's thread and prepare() (a loading one)

    @classmethod
    def for_replica(cls, settings: Any, reporter: Reporter) -> DriftWatcher:
        """The watcher of a serving replica (``settings``: its HookSettings)."""
        from engage.monitor.store import EventStore
        from engage.monitor.store_sink import StoreSink
        from engage.tracking.store import resolve_tracking_uri

        home = Path(settings.home)
        uri = settings.tracking_uri or resolve_tracking_uri(None, None, home)
        store = StoreSink(EventStore.open(home), f"serve-{settings.app}", settings.run_id)
        return cls(settings.drift, reporter, mlflow_reference_loader(uri), store, settings.app)

    def prepare(self, model: str, version: str) -> None:
        """Load the version's reference and fit its detectors now (a replica loading the
        version calls this before serving it), not on its first sampled request, where the
        few seconds of CPU it takes would compete with the requests."""
        with self._lock:
            self._version(model, version)

    # -- the consumer ------------------------------------------------------------------------
    def consume(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            self._consume(samples)

    def _consume(self, samples: Sequence[Sample]) -> None:
        for s in samples:
            state = self._version(s.model, s.version)
            if state.unavailable:
                continue
            state.seen += 1
            state.pending.append(np.asarray(s.inputs, dtype=np.float64))
            if self.spec.prediction_shift:
                state.outputs.append(s.prediction)
            if len(state.pending) >= self.spec.check_every and state.seen >= self.spec.min_samples:
                windows, state.pending = state.pending, []
                self.check(state, np.stack(windows))

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
        except Exception as exc:
            state.detectors = None
            state.fit_error = f"{type(exc).__name__}: {exc}"
            _log.warning("drift detectors of %s/%s: %s", state.model, state.version, exc)

    def _make(self, name: str):
        import inspect

        probe = make_detector(name)
        if "ert" in inspect.signature(type(probe).__init__).parameters:
            return make_detector(name, ert=self.spec.ert)
        return probe

    # -- one check ---------------------------------------------------------------------------
    def check(self, state: _Version, windows: np.ndarray) -> DriftDecision:
        """Check ``windows`` ``(n, window, F)`` of one version; report and return the decision."""
        if state.detectors is None:
            self._fit(state)  # e.g. MLflow was unreachable at the first sample: try again
        if state.detectors is None:
            why = f"detectors not fitted: {state.fit_error}"
            results = [DriftResult.failed(name, why, len(windows)) for name in self.spec.detectors]
        else:
            results = [d.check(windows) for d in state.detectors]
        n_features = len(state.reference.features) if state.reference is not None else 0
        decision = self._policy.decide(results, n_features)
        proxy = self._proxy(state)
        self.checks += 1
        checked = [*results, *([proxy] if proxy is not None else [])]
        self._gauges(state, checked)
        self._failed(state, decision, checked)
        if not decision.is_error:  # no verdict: the drift state stays as it was
            self._transition(state, decision, results)
        if proxy is not None and proxy.error is None:
            self._shift(state, proxy)
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
            self._metric("drift_detected", 1.0 if r.is_drift else 0.0, labels)
            outcome = "drift" if r.is_drift else "ok"
            self._metric("drift_checks", 1.0, {**labels, "outcome": outcome})
            for f in r.features or (_all_features(r),):
                threshold = f.threshold if f.threshold is not None else r.threshold
                self._metric("drift_statistic", f.statistic, {**labels, "feature": f.feature})
                self._metric("drift_threshold", threshold, {**labels, "feature": f.feature})

    def _metric(self, name: str, value: float, labels: dict[str, str]) -> None:
        reporter = self._reporter.with_labels(**labels)
        reporter.metric(name, float(value))
        reporter.flush()

    def _failed(
        self, state: _Version, decision: DriftDecision, checked: Sequence[DriftResult]
    ) -> None:
        """EngageDriftCheckFailed: fires when the inputs' or the proxy's check has no verdict,
        resolves when both have one again (``checked``: every result of this check)."""
        reasons = [decision.reason] if decision.is_error else []
        proxy = [r for r in checked if r.detector == PROXY and r.error is not None]
        reasons += [f"{PROXY}: {r.error}" for r in proxy]
        if reasons:
            if not state.failed:
                failed = sum(r.error is not None for r in checked) or len(checked)
                summary = f"drift check of {self._served(state)} failed: {'; '.join(reasons)}"
                self._alert(state, FAILED_RULE, "firing", "warning", summary, (), float(failed))
            state.failed = True
        elif state.failed:
            summary = f"drift checks of {self._served(state)} run again"
            self._alert(state, FAILED_RULE, "resolved", "warning", summary, (), 0.0)
            state.failed = False

    def _transition(
        self, state: _Version, decision: DriftDecision, results: Sequence[DriftResult]
    ) -> None:
        if decision.alert:
            state.clean = 0
            new = tuple(sorted(set(state.features) | set(decision.features)))
            if not state.drifting or new != state.features:
                state.drifting, state.features = True, new
                where = f" in {', '.join(new)}" if new else ""
                summary = f"input drift{where} of {self._served(state)}: {decision.reason}"
                value = max(r.statistic for r in results if r.is_drift)
                self._alert(state, DRIFT_RULE, "firing", decision.severity, summary, new, value)
            return
        if state.drifting:
            state.clean += 1
            if state.clean >= CLEAR_AFTER_CHECKS:
                summary = f"no input drift of {self._served(state)} for {state.clean} checks"
                self._alert(state, DRIFT_RULE, "resolved", "warning", summary, state.features, 0.0)
                state.drifting, state.features, state.clean = False, (), 0

    def _shift(self, state: _Version, result: DriftResult) -> None:
        """EngagePredictionShift: fires on a shift (or when other proxies move too), resolves
        after ``CLEAR_AFTER_CHECKS`` clean checks in a row, like input drift."""
        if result.is_drift:
            state.shift_clean = 0
            new = tuple(sorted(set(state.shift_features) | set(result.drifted_features)))
            if not state.shifting or new != state.shift_features:
                state.shifting, state.shift_features = True, new
                summary = (
                    f"prediction shift in {', '.join(new)} of {self._served(state)}: "
                    f"{_moved(result)} over the last {result.n} sampled predictions"
                )
                self._alert(state, SHIFT_RULE, "firing", "warning", summary, new, result.statistic)
            return
        if state.shifting:
            state.shift_clean += 1
            if state.shift_clean >= CLEAR_AFTER_CHECKS:
                summary = (
                    f"no prediction shift of {self._served(state)} for {state.shift_clean} checks"
                )
                features = state.shift_features
                self._alert(state, SHIFT_RULE, "resolved", "warning", summary, features, 0.0)
                state.shifting, state.shift_features, state.shift_clean = False, (), 0

    # -- events ------------------------------------------------------------------------------
    def _served(self, state: _Version) -> str:
        app = f" (app {self._app})" if self._app else ""
        return f"{state.model}/{state.version}{app}"

    def _alert(
        self,
        state: _Version,
        rule: str,
        status: str,
        severity: str,
        summary: str,
        features: tuple[str, ...],
        value: float,
    ) -> None:
        data = {
            "rule": rule,
            "state": status,
            "severity": severity,
            "summary": summary,
            "features": list(features),
            "value": value if math.isfinite(value) else None,
            "labels": {"model": state.model, "version": state.version},
            "since": time.time(),
        }
        reporter = self._reporter.with_labels(model=state.model, version=state.version)
        reporter.lifecycle("alert", **data)
        reporter.flush()
        self._record(Event("lifecycle", "alert", data=data))
        log = _log.warning if status == "firing" else _log.info
        log("%s %s: %s", rule, status, summary)

    def _unavailable(self, state: _Version) -> None:
        message = (
            f"no drift reference for {state.model}/{state.version}: its run logged none "
            "(train it with `engage run` to monitor it for drift)"
        )
        _log.warning(message)
        self._record(Event("lifecycle", "drift_unavailable", data={"message": message}))

    def _record(self, event: Event) -> None:
        if self._store is not None:
            self._store.emit([event])


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


def _all_features(r: DriftResult):
    """A multivariate result as one pseudo-feature ``all``."""
    from engage.drift import FeatureDrift

    return FeatureDrift("all", r.statistic, r.p_value, r.threshold, r.is_drift)
