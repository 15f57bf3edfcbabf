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
