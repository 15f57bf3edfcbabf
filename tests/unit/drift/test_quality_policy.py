"""Data-quality checks and the policy that turns results into decisions."""

from __future__ import annotations

import numpy as np
import pytest

from engage.drift import (
    DriftPolicy,
    DriftResult,
    FeatureDrift,
    check_quality,
    make_detector,
)


def _rows(n: int = 200) -> np.ndarray:
    return np.random.default_rng(1).normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(n, 3))


def test_clean_rows_pass(gaussian_reference) -> None:
    result = make_detector("quality").fit(gaussian_reference).check(_rows())

    assert not result.is_drift
    assert result.alarm_index is None


def test_nan_inf_and_out_of_range_rates_are_measured(gaussian_reference) -> None:
    x = _rows(100)
    x[:3, 0] = np.nan
    x[5, 1] = np.inf
    x[10:12, 2] = 1e6

    report = check_quality(x, gaussian_reference)
    a, b, c = report.features

    assert (a.nan_rate, b.inf_rate, c.out_of_range_rate) == (0.03, 0.01, 0.02)
    assert a.first_bad_row == 0
    assert c.first_bad_row == 10


def test_a_missing_feature_is_reported(gaussian_reference) -> None:
    x = _rows(50)
    x[:, 1] = np.nan

    report = check_quality(x, gaussian_reference, missing=("b",))

    assert report.missing == ("b",)


def test_a_stuck_window_spanning_two_batches_is_found(gaussian_reference) -> None:
    detector = make_detector("quality", window=8).fit(gaussian_reference)
    first, second = _rows(100), _rows(100)
    first[96:, 2] = 101.0
    second[:4, 2] = 101.0

    assert not detector.check(first).is_drift
    result = detector.check(second)

    assert result.is_drift
    assert result.alarm_index == 3
    assert result.drifted_features == ("c",)


def test_a_feature_constant_in_training_is_not_called_stuck() -> None:
    from engage.drift import capture_reference

    x = np.random.default_rng(0).normal(size=(100, 6, 2))
    x[::2, :, 1] = 0.0  # a motion sensor: idle half the time
    reference = capture_reference(x, None, ["t", "motion"])
    live = np.random.default_rng(2).normal(size=(50, 2))
    live[:, 1] = 0.0

    assert check_quality(live, reference, window=6).features[1].stuck_windows == 0


def _result(name: str, drift: bool, features=(), error=None) -> DriftResult:
    feats = tuple(FeatureDrift(f, 1.0, 0.001, 0.05, True) for f in features)
    return DriftResult(name, 1.0, 0.05, 0.001, drift, feats, 100, error=error)


def test_no_drift_is_no_alert() -> None:
    decision = DriftPolicy().decide([_result("ks", False)], n_features=3)

    assert (decision.alert, decision.severity) == (False, "none")


def test_a_detector_error_is_an_error_decision_never_no_drift() -> None:
    decision = DriftPolicy().decide([_result("ks", False, error="NaN p-value")], n_features=3)

    assert decision.alert
    assert decision.is_error
    assert "NaN p-value" in decision.reason


def test_no_results_is_an_error() -> None:
    assert DriftPolicy().decide([]).is_error


@pytest.mark.parametrize(
    ("results", "severity", "features"),
    [
        ([_result("ks", True, ["a"])], "warning", ("a",)),
        ([_result("ks", True, ["a", "b"])], "critical", ("a", "b")),
        ([_result("quality", True, ["c"])], "critical", ("c",)),
    ],
)
def test_drift_severity(results, severity, features) -> None:
    decision = DriftPolicy().decide(results, n_features=3)

    assert decision.alert
    assert decision.severity == severity
    assert decision.features == features


def test_min_detectors_needs_agreement() -> None:
    policy = DriftPolicy(min_detectors=2)

    assert not policy.decide([_result("ks", True, ["a"]), _result("cusum", False)], 3).alert
    assert policy.decide([_result("ks", True, ["a"]), _result("cusum", True, ["a"])], 3).alert


# -- regimes and the alert hysteresis (AlertLatch): written once, used for every alert ------
def _in_regime(changed: bool, since: int | None = None, features=()) -> DriftResult:
    from engage.drift import Regime

    return DriftResult(
        "cusum", 2.0 if changed else 0.3, 1.0, regime=Regime(changed, since, features)
    )


def test_a_detector_still_in_a_changed_regime_drifts_and_dates_the_change() -> None:
    decision = DriftPolicy().decide([_in_regime(True, 120, ("b",))], n_features=3)

    assert decision.alert
    assert decision.features == ("b",)
    assert decision.since == 120
    assert decision.settled


def test_no_drift_is_settled_only_when_every_detector_keeps_regimes() -> None:
    policy = DriftPolicy()

    assert policy.decide([_in_regime(False)], 3).settled
    assert not policy.decide([_in_regime(False), _result("quality", False)], 3).settled


def test_the_latch_fires_once_and_again_only_when_features_grow() -> None:
    from engage.drift import AlertLatch

    latch = AlertLatch()

    first = latch.update(True, ["a"], since=10.0)
    same = latch.update(True, ["a"], since=20.0)
    grown = latch.update(True, ["b"], since=30.0)

    assert (first.state, first.features, first.since) == ("firing", ("a",), 10.0)
    assert same is None
    assert (grown.state, grown.features, grown.since) == ("firing", ("a", "b"), 10.0)


def test_the_latch_resolves_after_clean_checks_or_at_once_when_settled() -> None:
    from engage.drift import AlertLatch

    slow, fast = AlertLatch(clear_after=3), AlertLatch(clear_after=3)
    for latch in (slow, fast):
        latch.update(True, ["a"])

    steps = [slow.update(False) for _ in range(3)]
    at_once = fast.update(False, settled=True)

    assert steps[:2] == [None, None]
    assert (steps[2].state, steps[2].clean, steps[2].features) == ("resolved", 3, ("a",))
    assert (at_once.state, at_once.returned) == ("resolved", True)
    assert not slow.firing
    assert not fast.firing


def test_a_drifting_check_restarts_the_count_of_clean_ones() -> None:
    from engage.drift import AlertLatch

    latch = AlertLatch(clear_after=2)
    latch.update(True, ["a"])

    assert latch.update(False) is None
    assert latch.update(True, ["a"]) is None
    assert latch.update(False) is None
    assert latch.update(False).state == "resolved"


def test_renewing_resolves_a_firing_latch_and_nothing_else() -> None:
    from engage.drift import AlertLatch

    latch = AlertLatch()

    assert latch.renew() is None
    latch.update(True, ["a"])
    assert latch.renew().state == "resolved"
    assert latch.update(False) is None
