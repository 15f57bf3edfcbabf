"""CUSUM and the quality check on the smart-living scenarios, at small size."""

from __future__ import annotations

import numpy as np
import pytest

from engage.drift import ErrorCusum, make_detector
from engage.drift.scenarios import SCENARIOS, make_stream


def _first_alarm(detectors, x: np.ndarray, chunk: int = 50) -> int | None:
    for d in detectors:
        d.reset()
    for lo in range(0, len(x), chunk):
        hits = [r.alarm_index for d in detectors if (r := d.check(x[lo : lo + chunk])).is_drift]
        if hits:
            return lo + min(hits)
    return None


@pytest.mark.parametrize("scenario", SCENARIOS[1:])
def test_every_scenario_is_detected_after_its_change(pop, cusum, quality, scenario) -> None:
    stream = make_stream(scenario, seed=3, n=1500, change_at=300, ramp=500, pop=pop)

    alarm = _first_alarm([cusum, quality], stream.x)

    assert alarm is not None
    assert 300 <= alarm < 1000, alarm


def test_a_stuck_sensor_is_flagged_within_one_window(pop, quality) -> None:
    stream = make_stream("stuck", seed=1, n=600, change_at=300, pop=pop)

    alarm = _first_alarm([quality], stream.x)

    assert alarm is not None
    assert 300 <= alarm < 300 + 10


def test_no_drift_raises_no_alert_over_many_windows_at_the_configured_ert(pop) -> None:
    detector = make_detector("cusum", ert=200_000, n_sims=100, sim_length=1000).fit(pop.reference)
    stream = make_stream("no_drift", seed=11, n=4000, pop=pop)

    results = [detector.check(stream.x[lo : lo + 50]) for lo in range(0, 4000, 50)]

    assert not any(r.is_drift for r in results)
    assert all(r.error is None for r in results)


def test_the_false_alarm_rate_matches_the_ert(pop, cusum) -> None:
    cusum.reset()
    x = make_stream("no_drift", seed=5, n=40_000, pop=pop).x

    alarms = cusum.check(x).extra["alarms"]

    assert 5 <= len(alarms) <= 45  # ERT 2000: 20 expected


def test_cusum_names_the_shifted_feature_and_the_kind_of_change(pop, cusum) -> None:
    cusum.reset()
    x = make_stream("variance", seed=2, n=800, change_at=100, pop=pop).x

    result = cusum.check(x)

    assert result.is_drift
    assert "power" in result.drifted_features
    assert result.extra["statistic_kind"]["power"] == "var_up"


def test_non_finite_input_is_an_error_for_cusum(pop, cusum) -> None:
    x = make_stream("no_drift", seed=2, n=10, pop=pop).x
    x[3, 0] = np.nan

    assert "non-finite" in cusum.check(x).error


def test_error_cusum_alarms_when_the_error_rate_rises() -> None:
    rng = np.random.default_rng(0)
    detector = ErrorCusum(rng.random(2000) < 0.1, ert=5000)

    quiet = detector.update(rng.random(2000) < 0.1)
    worse = detector.update(rng.random(1000) < 0.3)

    assert not quiet.is_drift
    assert worse.is_drift
    assert worse.alarm_index < 300


def test_threshold_scale_multiplies_the_calibrated_thresholds(pop, cusum) -> None:
    scaled = make_detector("cusum", ert=2000, n_sims=100, sim_length=1000, threshold_scale=1.5).fit(
        pop.reference
    )
    x = make_stream("no_drift", seed=5, n=40_000, pop=pop).x
    cusum.reset()

    np.testing.assert_allclose(scaled.h, 1.5 * cusum.h)
    assert len(scaled.check(x).extra["alarms"]) < len(cusum.check(x).extra["alarms"])


def test_threshold_scale_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold_scale > 0"):
        make_detector("cusum", threshold_scale=0.0)
