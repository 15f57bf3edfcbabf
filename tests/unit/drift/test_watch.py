"""DriftWatcher without Ray: scenario streams as served samples, a real metrics sink and store.

The watcher reports through its Reporter only; the tests wire the sinks the serving hooks
wire (Prometheus families, the event store), so alerts reach the store by the report path."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from prometheus_client import CollectorRegistry

from engage.drift import DriftResult, FeatureDrift
from engage.drift.samples import Sample
from engage.drift.scenarios import FEATURES, make_stream, population
from engage.drift.watch import DRIFT_RULE, FAILED_RULE, PROXY, SHIFT_RULE, DriftWatcher
from engage.events import FanOut, Reporter
from engage.monitor.serving import ServingMetrics
from engage.monitor.store import EventStore
from engage.monitor.store_sink import StoreSink
from engage.spec.models import DriftWatchSpec

MODEL = "occupancy"
WINDOW = 10
# The 0.x default set, pinned: these tests are about the watcher with cusum and quality.
SPEC = DriftWatchSpec(detectors=["cusum", "quality"], check_every=50, min_samples=50, ert=100_000.0)


class _Recorder:
    """An event sink that keeps everything (and feeds the real Prometheus families)."""

    def __init__(self, metrics: ServingMetrics) -> None:
        self.events: list = []
        self.metrics = metrics

    def emit(self, events) -> None:
        self.events.extend(events)
        self.metrics.observe(events)

    def alerts(self) -> list[dict]:
        return [dict(e.data) for e in self.events if e.kind == "lifecycle" and e.name == "alert"]


@pytest.fixture
def watched(tmp_path):
    registry = CollectorRegistry()
    recorder = _Recorder(ServingMetrics(registry, "app", "run1", "r0"))
    store = EventStore.open(tmp_path)
    loads: list[tuple[str, str]] = []

    def load(model: str, version: str):
        loads.append((model, version))
        return population().reference

    def make(spec: DriftWatchSpec = SPEC) -> DriftWatcher:
        sink = StoreSink(store, "serve-app", "run1")
        return DriftWatcher(spec, Reporter(FanOut([recorder, sink])), load, "app")

    return make, recorder, registry, store, loads


def _samples(x: np.ndarray, version: str = "1") -> list[Sample]:
    """Served windows whose last rows are ``x`` (a stream, in arrival order)."""
    padded = np.concatenate([np.repeat(x[:1], WINDOW - 1, axis=0), x])
    windows = sliding_window_view(padded, WINDOW, axis=0).transpose(0, 2, 1)
    return [
        Sample(f"r{i}", w.astype(np.float32), [0.1, 0.9], "home", MODEL, version, float(i))
        for i, w in enumerate(windows)
    ]


def _feed(watcher: DriftWatcher, samples: list[Sample], batch: int = 64) -> None:
    for i in range(0, len(samples), batch):  # as the sampler hands them over
        watcher.consume(samples[i : i + batch])


def _gauge(registry: CollectorRegistry, detector: str, version: str = "1") -> float | None:
    labels = {"job": "app", "run_id": "run1", "replica": "r0", "version": version}
    return registry.get_sample_value("engage_drift_detected", {**labels, "detector": detector})


def test_in_distribution_traffic_raises_no_alert_over_many_checks(watched):
    make, recorder, registry, store, loads = watched
    watcher = make()

    _feed(watcher, _samples(make_stream("no_drift", seed=3, n=2500).x))

    assert watcher.checks == 50
    assert recorder.alerts() == []
    assert store.open_alerts() == []
    assert _gauge(registry, "cusum") == 0.0
    assert loads == [(MODEL, "1")]  # reference loaded and detectors fitted once


def test_shifted_traffic_fires_an_alert_naming_the_shifted_features(watched):
    make, recorder, registry, store, _ = watched
    watcher = make()
    stream = make_stream("seasonal", seed=4, n=1500, change_at=500)

    _feed(watcher, _samples(stream.x))

    fired = [a for a in recorder.alerts() if a["rule"] == DRIFT_RULE and a["state"] == "firing"]
    assert fired, "no drift alert"
    assert {"temperature", "humidity"} <= set(fired[-1]["features"])
    assert set(fired[0]["features"]) <= {"temperature", "humidity"}
    assert "temperature" in fired[0]["summary"]
    assert _gauge(registry, "cusum") == 1.0
    (open_alert,) = store.open_alerts()
    assert (open_alert.rule, open_alert.job, open_alert.run_id) == (DRIFT_RULE, "serve-app", "run1")
    assert open_alert.labels == {"model": MODEL, "version": "1"}
    assert "temperature" in open_alert.summary
    statistic = registry.get_sample_value(
        "engage_drift_statistic",
        {"job": "app", "run_id": "run1", "replica": "r0", "version": "1"}
        | {"detector": "cusum", "feature": "temperature"},
    )
    assert statistic is not None
    assert statistic >= 1.0


def test_no_alert_before_the_change_point(watched):
    make, recorder, *_ = watched
    watcher = make()
    stream = make_stream("sudden", seed=5, n=1500, change_at=1000)

    _feed(watcher, _samples(stream.x[:1000]))
    before = recorder.alerts()
    _feed(watcher, _samples(stream.x[1000:]))

    assert before == []
    assert recorder.alerts()[0]["features"] == ["temperature"]


def test_drift_resolves_after_clean_checks(watched):
    make, recorder, _, store, _ = watched
    watcher = make()
    pop = population()
    shifted = make_stream("no_drift", seed=6, n=200).x.copy()
    shifted[:, FEATURES.index("co2")] += 3 * pop.reference.std[FEATURES.index("co2")]

    _feed(watcher, _samples(shifted))
    _feed(watcher, _samples(make_stream("no_drift", seed=7, n=500).x))

    states = [a["state"] for a in recorder.alerts() if a["rule"] == DRIFT_RULE]
    assert states == ["firing", "resolved"]
    assert store.open_alerts() == []


def test_a_nan_input_is_a_failed_check_never_no_drift(watched):
    make, recorder, registry, store, _ = watched
    watcher = make(DriftWatchSpec(detectors=["cusum"], check_every=50, min_samples=50))
    x = make_stream("no_drift", seed=8, n=100).x.copy()
    x[60, 0] = np.nan

    _feed(watcher, _samples(x))

    alerts = recorder.alerts()
    assert [(a["rule"], a["state"]) for a in alerts] == [(FAILED_RULE, "firing")]
    assert "non-finite" in alerts[0]["summary"]
    assert math.isnan(_gauge(registry, "cusum"))  # no verdict: not 0
    assert [a.rule for a in store.open_alerts()] == [FAILED_RULE]
    checks = {"job": "app", "run_id": "run1", "replica": "r0", "version": "1", "detector": "cusum"}
    assert registry.get_sample_value("engage_drift_checks_total", checks | {"outcome": "ok"}) == 1
    assert (
        registry.get_sample_value("engage_drift_checks_total", checks | {"outcome": "error"}) == 1
    )


def test_a_nan_p_value_during_drift_keeps_the_drift_alert_open(watched, monkeypatch):
    make, recorder, _, store, _ = watched
    watcher = make(DriftWatchSpec(detectors=["cusum"], check_every=50, min_samples=50))
    stream = make_stream("sudden", seed=9, n=300, change_at=0)
    _feed(watcher, _samples(stream.x[:100]))
    detector = watcher.versions[(MODEL, "1")].detectors[0]

    def nan_check(rows):  # what alibi-detect #221 returns: a NaN p-value, no exception
        nan = FeatureDrift("temperature", math.nan, math.nan, 1.0, False)
        return replace(DriftResult("cusum", math.nan, 1.0, math.nan), features=(nan,))

    monkeypatch.setattr(detector, "_check", nan_check)
    _feed(watcher, _samples(stream.x[100:300]))

    transitions = [(a["rule"], a["state"]) for a in recorder.alerts()]
    assert transitions == [(DRIFT_RULE, "firing"), (FAILED_RULE, "firing")]
    assert sorted(a.rule for a in store.open_alerts()) == sorted([DRIFT_RULE, FAILED_RULE])


def test_a_reference_that_does_not_fit_the_inputs_fails_the_checks(watched):
    make, recorder, *_ = watched
    watcher = make()
    x = make_stream("no_drift", seed=10, n=60).x[:, :3]  # 3 of the reference's 4 features

    _feed(watcher, _samples(x))

    (alert,) = recorder.alerts()
    assert (alert["rule"], alert["state"]) == (FAILED_RULE, "firing")
    assert "features" in alert["summary"]


def test_a_version_without_reference_is_skipped_with_one_event(tmp_path):
    store = EventStore.open(tmp_path)
    recorder = _Recorder(ServingMetrics(CollectorRegistry(), "app", "run1", "r0"))
    sink = StoreSink(store, "serve-app", "run1")
    watcher = DriftWatcher(SPEC, Reporter(FanOut([recorder, sink])), lambda m, v: None)

    _feed(watcher, _samples(make_stream("no_drift", seed=11, n=200).x))

    assert watcher.checks == 0
    assert recorder.alerts() == []
    (event,) = [e for e in store.events() if e.name == "drift_unavailable"]
    assert "no drift reference" in event.message


def test_each_version_gets_its_own_fitted_detectors(watched):
    make, _, _, _, loads = watched
    watcher = make()
    x = make_stream("no_drift", seed=12, n=120).x

    _feed(watcher, _samples(x, "1") + _samples(x, "2") + _samples(x, "1"))

    assert loads == [(MODEL, "1"), (MODEL, "2")]
    assert watcher.versions[(MODEL, "1")].detectors is not watcher.versions[(MODEL, "2")].detectors


def test_the_monitoring_run_gets_drift_metrics_and_an_alert_tag(watched):
    from engage.serve.hooks import _Aggregate

    class _Run:
        def __init__(self) -> None:
            self.metrics: dict[str, float] = {}
            self.tags: dict[str, str] = {}

        def log_metric_events(self, events) -> None:
            self.metrics |= {e.name: e.value for e in events}

        def set_tags(self, tags) -> None:
            self.tags |= tags

    make, recorder, *_ = watched
    run = _Run()
    aggregate = _Aggregate(run, every_s=3600, replica="r0")
    watcher = make()
    watcher._reporter = Reporter(FanOut([recorder, aggregate]))
    stream = make_stream("sudden", seed=13, n=300, change_at=100)

    _feed(watcher, _samples(stream.x))
    aggregate.stop()

    assert run.metrics["drift_detected_cusum"] == 1.0
    assert run.metrics["drift_checks_drift"] >= 1
    assert run.metrics["drift_statistic_cusum_temperature"] >= 1.0
    assert run.tags[f"engage.alert.{DRIFT_RULE}"].startswith("firing: input drift in temperature")


# -- the label-free proxy: sampled predictions against the reference's training outputs -----
def _logits(n: int, share_one: float, seed: int, margin: float = 2.0) -> np.ndarray:
    """Two-class logits: ``share_one`` of the rows predict class 1, by about ``margin``."""
    rng = np.random.default_rng(seed)
    ones = rng.random(n) < share_one
    gap = margin * np.exp(rng.normal(0.0, 0.25, n))  # > 0: the class is as drawn
    return np.stack([np.where(ones, 0.0, gap), np.where(ones, gap, 0.0)], axis=1)


def _with_predictions(samples: list[Sample], logits: np.ndarray) -> list[Sample]:
    return [
        replace(s, prediction=[float(v) for v in row])
        for s, row in zip(samples, logits, strict=True)
    ]


def _proxy_watcher(tmp_path, outputs: np.ndarray | None, spec: DriftWatchSpec = SPEC):
    registry = CollectorRegistry()
    recorder = _Recorder(ServingMetrics(registry, "app", "run1", "r0"))
    store = EventStore.open(tmp_path)
    reference = replace(population().reference, outputs=outputs)
    sink = StoreSink(store, "serve-app", "run1")
    reporter = Reporter(FanOut([recorder, sink]))
    watcher = DriftWatcher(spec, reporter, lambda m, v: reference, "app")
    return watcher, recorder, registry, store


def _shift_alerts(recorder: _Recorder) -> list[dict]:
    return [a for a in recorder.alerts() if a["rule"] == SHIFT_RULE]


def test_in_distribution_predictions_raise_no_prediction_shift(tmp_path):
    watcher, recorder, registry, store = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=20))
    x = make_stream("no_drift", seed=21, n=1500).x

    _feed(watcher, _with_predictions(_samples(x), _logits(1500, 0.3, seed=22)))

    assert watcher.checks == 30
    assert recorder.alerts() == []
    assert store.open_alerts() == []
    assert _gauge(registry, PROXY) == 0.0
    confidence = registry.get_sample_value(
        "engage_drift_statistic",
        {"job": "app", "run_id": "run1", "replica": "r0", "version": "1"}
        | {"detector": PROXY, "feature": "confidence_drop"},
    )
    assert confidence is not None
    assert abs(confidence) < 0.05


def test_a_shifted_predicted_class_fires_then_resolves_after_clean_checks(tmp_path):
    watcher, recorder, registry, store = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=23))
    x = make_stream("no_drift", seed=24, n=1600).x  # inputs unchanged: only predictions move
    logits = np.concatenate(
        [_logits(400, 0.3, seed=25), _logits(400, 0.9, seed=26), _logits(800, 0.3, seed=27)]
    )
    samples = _with_predictions(_samples(x), logits)

    _feed(watcher, samples[:800])
    fired = _shift_alerts(recorder)
    during = _gauge(registry, PROXY)
    (open_alert,) = store.open_alerts()
    _feed(watcher, samples[800:])

    assert [a["state"] for a in fired] == ["firing"]
    assert fired[0]["features"] == ["predicted_class"]
    assert f"{MODEL}/1" in fired[0]["summary"]
    assert "predicted_class" in fired[0]["summary"]
    assert fired[0]["labels"] == {"model": MODEL, "version": "1"}
    assert during == 1.0
    assert (open_alert.rule, open_alert.labels) == (SHIFT_RULE, {"model": MODEL, "version": "1"})
    assert [a["state"] for a in _shift_alerts(recorder)] == ["firing", "resolved"]
    assert [a for a in recorder.alerts() if a["rule"] != SHIFT_RULE] == []  # not input drift
    assert store.open_alerts() == []
    assert _gauge(registry, PROXY) == 0.0
    assert _gauge(registry, "cusum") == 0.0


def test_a_confidence_drop_alone_fires_naming_it(tmp_path):
    watcher, recorder, *_ = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=28))
    x = make_stream("no_drift", seed=29, n=400).x
    unsure = _logits(400, 0.3, seed=30, margin=0.3)  # same classes, far less confident

    _feed(watcher, _with_predictions(_samples(x), unsure))

    (alert,) = _shift_alerts(recorder)
    assert alert["features"] == ["confidence_drop"]
    assert "confidence fell" in alert["summary"]


def test_a_reference_without_outputs_skips_the_proxy_without_error(tmp_path):
    watcher, recorder, registry, store = _proxy_watcher(tmp_path, None)
    x = make_stream("no_drift", seed=31, n=500).x

    _feed(watcher, _with_predictions(_samples(x), _logits(500, 0.95, seed=32)))

    assert watcher.checks == 10
    assert recorder.alerts() == []
    assert store.open_alerts() == []
    assert _gauge(registry, PROXY) is None
    assert _gauge(registry, "cusum") == 0.0


def test_the_proxy_can_be_turned_off(tmp_path):
    spec = DriftWatchSpec(
        detectors=["cusum", "quality"],
        check_every=50,
        min_samples=50,
        ert=100_000.0,
        prediction_shift=False,
    )
    watcher, recorder, registry, _ = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=33), spec)
    x = make_stream("no_drift", seed=34, n=500).x

    _feed(watcher, _with_predictions(_samples(x), _logits(500, 0.95, seed=35)))

    assert recorder.alerts() == []
    assert _gauge(registry, PROXY) is None
    assert len(watcher.versions[(MODEL, "1")].outputs) == 0


def test_a_failing_proxy_is_a_failed_check_never_no_shift(tmp_path):
    watcher, recorder, registry, store = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=36))
    x = make_stream("no_drift", seed=37, n=300).x
    three = np.zeros((300, 3))  # three outputs per prediction; the reference has two

    _feed(watcher, _with_predictions(_samples(x), three))

    (alert,) = recorder.alerts()
    assert (alert["rule"], alert["state"]) == (FAILED_RULE, "firing")
    assert PROXY in alert["summary"]
    assert math.isnan(_gauge(registry, PROXY))
    assert _gauge(registry, "cusum") == 0.0
    assert [a.rule for a in store.open_alerts()] == [FAILED_RULE]


def test_the_monitoring_run_gets_the_proxy_metrics_and_its_alert_tag(tmp_path):
    from engage.serve.hooks import _Aggregate

    class _Run:
        def __init__(self) -> None:
            self.metrics: dict[str, float] = {}
            self.tags: dict[str, str] = {}

        def log_metric_events(self, events) -> None:
            self.metrics |= {e.name: e.value for e in events}

        def set_tags(self, tags) -> None:
            self.tags |= tags

    watcher, recorder, *_ = _proxy_watcher(tmp_path, _logits(2000, 0.3, seed=38))
    run = _Run()
    aggregate = _Aggregate(run, every_s=3600, replica="r0")
    watcher._reporter = Reporter(FanOut([recorder, aggregate]))
    x = make_stream("no_drift", seed=39, n=400).x

    _feed(watcher, _with_predictions(_samples(x), _logits(400, 0.9, seed=40)))
    aggregate.stop()

    assert run.metrics["drift_detected_prediction_shift"] == 1.0
    assert run.metrics["drift_statistic_prediction_shift_predicted_class"] > 0
    assert "drift_threshold_prediction_shift_confidence_drop" in run.metrics
    tag = run.tags[f"engage.alert.{SHIFT_RULE}"]
    assert tag.startswith("firing: prediction shift in predicted_class")


def test_a_single_output_model_is_checked_as_regression_on_its_values(tmp_path):
    rng = np.random.default_rng(41)
    watcher, recorder, registry, _ = _proxy_watcher(tmp_path, rng.normal(20.0, 2.0, (2000, 1)))
    x = make_stream("no_drift", seed=42, n=400).x
    values = rng.normal(23.0, 2.0, (400, 1))  # the predicted values moved up

    _feed(watcher, _with_predictions(_samples(x), values))

    (alert,) = _shift_alerts(recorder)
    assert alert["features"] == ["prediction"]
    assert _gauge(registry, PROXY) == 1.0


# -- change-point semantics: drifted since T, on these features, until the regime returns ---
CUSUM_ONLY = DriftWatchSpec(detectors=["cusum"], check_every=50, min_samples=50, ert=100_000.0)


def _drift_alerts(recorder: _Recorder) -> list[dict]:
    return [a for a in recorder.alerts() if a["rule"] == DRIFT_RULE]


def _stepped(shifts: list[tuple[int, float]], n: int, seed: int) -> np.ndarray:
    x = make_stream("no_drift", seed=seed, n=n).x.copy()
    sd = population().reference.std[0]
    for at, shift in shifts:
        x[at:, 0] += shift * sd
    return x


def test_a_lasting_shift_is_one_alert_dated_at_the_change_and_stays_drifted(watched):
    make, recorder, registry, store, _ = watched
    watcher = make(CUSUM_ONLY)
    gauges = []

    for lo in range(0, 3000, 100):  # the samples' timestamps are their row numbers
        x = _stepped([(500, 1.0)], n=3000, seed=50)
        _feed(watcher, _samples(x)[lo : lo + 100])
        gauges.append(_gauge(registry, "cusum"))

    (alert,) = _drift_alerts(recorder)
    assert alert["state"] == "firing"
    assert alert["features"] == ["temperature"]
    assert 470 <= alert["started"] <= 600
    assert "since 1970-01-01T00:0" in alert["summary"]
    status = watcher.status(MODEL, "1")
    assert (status.drifting, status.features, status.since) == (
        True,
        ("temperature",),
        alert["started"],
    )
    first = next(i for i, g in enumerate(gauges) if g == 1.0)
    assert all(g == 1.0 for g in gauges[first:])  # drifted from the change on, not now and then
    assert [a.rule for a in store.open_alerts()] == [DRIFT_RULE]


def test_the_alert_resolves_when_the_stream_is_back_in_the_reference_regime(watched):
    make, recorder, registry, store, _ = watched
    watcher = make(CUSUM_ONLY)

    _feed(watcher, _samples(_stepped([(300, 2.0), (1200, -2.0)], n=2000, seed=51)))

    alerts = _drift_alerts(recorder)
    assert [a["state"] for a in alerts] == ["firing", "resolved"]
    assert "back in the reference regime" in alerts[1]["summary"]
    assert watcher.status(MODEL, "1").drifting is False
    assert _gauge(registry, "cusum") == 0.0
    assert store.open_alerts() == []


def test_renewing_the_reference_resolves_the_drift(watched):
    make, recorder, _, store, loads = watched
    watcher = make(CUSUM_ONLY)
    _feed(watcher, _samples(_stepped([(100, 2.0)], n=400, seed=52)))

    watcher.renew(MODEL, "1")

    assert [a["state"] for a in _drift_alerts(recorder)] == ["firing", "resolved"]
    assert "renewed" in _drift_alerts(recorder)[1]["summary"]
    assert watcher.status(MODEL, "1").drifting is False
    assert store.open_alerts() == []
    assert loads == [(MODEL, "1"), (MODEL, "1")]  # loaded again and refitted


def test_without_a_store_sink_nothing_is_stored(tmp_path):
    store = EventStore.open(tmp_path)
    recorder = _Recorder(ServingMetrics(CollectorRegistry(), "app", "run1", "r0"))
    watcher = DriftWatcher(CUSUM_ONLY, Reporter(FanOut([recorder])), lambda m, v: None)

    _feed(watcher, _samples(make_stream("no_drift", seed=53, n=100).x))

    assert [e.name for e in recorder.events] == ["drift_unavailable"]  # one route: the reporter
    assert store.events() == []
