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


# -- change-point semantics: one alarm per change, a new regime, a return clears -------------
@pytest.fixture(scope="module")
def steady(pop):
    """A cusum with few false alarms, so that every alarm in these streams is a change."""
    return make_detector("cusum", ert=50_000, n_sims=100, sim_length=1000).fit(pop.reference)


def _stepped(pop, shifts: list[tuple[int, float]], n: int, seed: int = 21) -> np.ndarray:
    """No-drift rows with temperature moved by ``shift`` reference sds from row ``at`` on."""
    x = make_stream("no_drift", seed=seed, n=n, pop=pop).x.copy()
    sd = pop.reference.std[0]
    for at, shift in shifts:
        x[at:, 0] += shift * sd
    return x


def _feed(detector, x: np.ndarray, chunk: int = 50) -> tuple[list[int], list]:
    """Alarm rows of the stream (from ``extra["alarms"]``) and every check's result."""
    detector.reset()
    alarms, results = [], []
    for lo in range(0, len(x), chunk):
        r = detector.check(x[lo : lo + chunk])
        assert r.error is None, r.error
        alarms += [lo + i for i in r.extra["alarms"]]
        results.append(r)
    return alarms, results


def test_a_lasting_step_shift_gives_exactly_one_alarm_dated_at_its_start(pop, steady) -> None:
    x = _stepped(pop, [(300, 1.0)], n=3000)

    alarms, results = _feed(steady, x)

    assert len(alarms) == 1, alarms
    assert 300 <= alarms[0] < 400
    last = results[-1]
    assert last.is_drift
    assert last.regime.changed
    assert 280 <= last.regime.since <= alarms[0]
    assert "temperature" in last.regime.features
    assert all(r.is_drift for r in results[alarms[0] // 50 :])  # drifted from then on


def test_a_shift_back_returns_to_the_reference_regime(pop, steady) -> None:
    x = _stepped(pop, [(300, 1.5), (1300, -1.5)], n=2500)

    alarms, results = _feed(steady, x)

    assert len(alarms) == 1, alarms  # the return is not a new alarm
    assert results[1200 // 50].regime.changed
    last = results[-1]
    assert not last.regime.changed
    assert not last.is_drift
    assert last.regime.features == ()
    assert last.statistic < 1.0


@pytest.mark.parametrize("chunk", [50, 3000])
def test_the_alarm_does_not_depend_on_how_rows_are_chunked(pop, steady, chunk) -> None:
    x = _stepped(pop, [(300, 1.0)], n=3000)

    alarms, _ = _feed(steady, x, chunk)
    again, _ = _feed(steady, x, 50)

    assert alarms == again


def test_the_statistic_grows_with_the_shift_size(pop, steady) -> None:
    statistics = []
    for shift in (0.5, 1.0, 2.0):
        _, results = _feed(steady, _stepped(pop, [(100, shift)], n=800))
        (temperature,) = [f for f in results[-1].features if f.feature == "temperature"]
        statistics.append(temperature.statistic)

    assert statistics == sorted(statistics), statistics
    assert statistics[0] >= 1.0
    assert statistics[2] > 2 * statistics[0]


def test_reset_starts_a_new_stream_in_the_reference_regime(pop, steady) -> None:
    _feed(steady, _stepped(pop, [(0, 2.0)], n=300))
    steady.reset()

    result = steady.check(make_stream("no_drift", seed=4, n=50, pop=pop).x)

    assert not result.is_drift
    assert result.regime.changed is False
