"""The ``bocpd`` detector: one alarm per lasting change, dated at its start, attributed to
the features that moved; no alarm on stationary rows; a return to the reference clears."""

from __future__ import annotations

import numpy as np
import pytest

from engage.drift import capture_reference, detector_names, make_detector
from engage.drift.bocpd import effective_size

FEATURES = ("a", "b", "c")


@pytest.fixture(scope="module")
def reference():
    rng = np.random.default_rng(1)
    return capture_reference(rng.normal([0, 10, 100], [1, 2, 5], (400, 3)), None, FEATURES)


def _stream(rng, n, shift=(0.0, 0.0, 0.0)):
    return rng.normal(np.add([0, 10, 100], shift), [1, 2, 5], (n, 3))


def _run(det, x, batch=50):
    return [det.check(x[i : i + batch]) for i in range(0, len(x), batch)]


def test_registered_and_built_by_name():
    assert "bocpd" in detector_names()
    assert make_detector("bocpd").kind == "online"


def test_no_alarm_on_stationary_rows(reference):
    det = make_detector("bocpd").fit(reference)
    results = _run(det, _stream(np.random.default_rng(2), 3000))
    assert not any(r.extra["alarms"] for r in results)
    assert not results[-1].is_drift
    assert results[-1].regime.changed is False


def test_one_alarm_per_lasting_shift_dated_at_its_start(reference):
    rng = np.random.default_rng(3)
    x = np.concatenate([_stream(rng, 300), _stream(rng, 400, (0.0, 6.0, 0.0))])
    det = make_detector("bocpd").fit(reference)
    results = _run(det, x)
    alarms = [(i, a) for i, r in enumerate(results) for a in r.extra["alarms"]]
    assert len(alarms) == 1, alarms  # one change, signalled once (no re-alarm per row)
    last = results[-1]
    assert last.is_drift
    assert last.drifted_features == ("b",)
    assert abs(last.regime.since - 300) <= 5  # dated at the change, not at the alarm
    assert last.regime.features == ("b",)


def test_confirm_catches_a_change_that_firms_up_slowly(reference):
    rng = np.random.default_rng(3)
    x = np.concatenate([_stream(rng, 300), _stream(rng, 400, (0.0, 4.0, 0.0))])
    slow = make_detector("bocpd", confirm=0.99).fit(reference)
    assert _run(slow, x)[-1].drifted_features == ("b",)


def test_return_to_the_reference_clears(reference):
    rng = np.random.default_rng(4)
    x = np.concatenate([_stream(rng, 200), _stream(rng, 200, (2.0, 0.0, 0.0)), _stream(rng, 300)])
    det = make_detector("bocpd").fit(reference)
    results = _run(det, x)
    assert results[5].is_drift  # rows 250-300: in the shifted regime
    assert not results[-1].is_drift
    assert results[-1].regime.since is None


def test_a_stream_that_starts_shifted_changes_at_once(reference):
    det = make_detector("bocpd").fit(reference)
    result = det.check(_stream(np.random.default_rng(5), 100, (0.0, 0.0, -20.0)))
    assert result.is_drift
    assert result.regime.since <= 5
    assert result.drifted_features == ("c",)


def test_variance_change_is_a_change(reference):
    rng = np.random.default_rng(6)
    noisy = _stream(rng, 300)
    noisy[:, 0] = rng.normal(0, 4, 300)
    det = make_detector("bocpd").fit(reference)
    results = _run(det, np.concatenate([_stream(rng, 200), noisy]))
    assert results[-1].is_drift
    assert "a" in results[-1].drifted_features


def test_missing_values_are_skipped_not_alarmed(reference):
    x = _stream(np.random.default_rng(7), 400)
    x[::7, 1] = np.nan
    det = make_detector("bocpd").fit(reference)
    results = _run(det, x)
    assert all(r.error is None for r in results)
    assert not any(r.extra["alarms"] for r in results)


def test_reset_starts_a_new_stream_in_the_reference_regime(reference):
    det = make_detector("bocpd").fit(reference)
    det.check(_stream(np.random.default_rng(8), 100, (5.0, 0.0, 0.0)))
    det.reset()
    result = det.check(_stream(np.random.default_rng(9), 100))
    assert not result.is_drift
    assert result.extra["changes"] == []


def test_per_feature_rule_and_bad_options(reference):
    det = make_detector("bocpd", combine="any").fit(reference)
    rng = np.random.default_rng(10)
    results = _run(det, np.concatenate([_stream(rng, 200), _stream(rng, 200, (0, 0, 25))]))
    assert results[-1].drifted_features == ("c",)
    with pytest.raises(ValueError, match="combine"):
        make_detector("bocpd", combine="all")
    with pytest.raises(ValueError, match="threshold"):
        make_detector("bocpd", threshold=1.5)


def test_effective_size_shrinks_with_autocorrelation():
    rng = np.random.default_rng(11)
    white = rng.normal(size=2000)
    walk = np.cumsum(white) * 0.1 + white * 0.01
    assert effective_size(white) > 1500
    assert effective_size(walk) < 100


# -- the daily cycle (issue 12, item 3) ---------------------------------------------------------
PER_DAY = 288  # 5-minute rows
ROOM = ("temperature", "humidity", "light", "co2")


def _day(rng, shift_from: int | None = None, shift: float = 0.0) -> np.ndarray:
    """One day of a room, from midnight: temperature and humidity follow the sun smoothly,
    light is off (exactly 0) at night, CO2 is higher while people are up."""
    sun = np.sin(2 * np.pi * np.arange(PER_DAY) / PER_DAY - np.pi / 2)
    x = np.column_stack(
        [
            20 + 3 * sun + rng.normal(0, 0.3, PER_DAY),
            50 - 8 * sun + rng.normal(0, 1.0, PER_DAY),
            np.where(sun > -0.3, 400 + rng.normal(0, 20, PER_DAY), 0.0),
            450 + 150 * (sun > 0) + rng.normal(0, 15, PER_DAY),
        ]
    )
    if shift_from is not None:
        x[shift_from:, 0] += shift
    return x


@pytest.mark.parametrize("seed", [0, 3])
def test_a_reference_of_one_day_knows_the_next_days_cycle(seed):
    """``bocpd_daily`` fitted on one day, as the live watcher would (with ``health``): the
    next day's normal cycle raises nothing; a heater left on from noon (+4 degrees) is
    drift on temperature, dated at noon."""
    rng = np.random.default_rng(seed)
    reference = capture_reference(_day(rng), None, ROOM)
    detectors = [make_detector(n).fit(reference) for n in ("bocpd_daily", "health")]

    def watch(x):
        for d in detectors:
            d.reset()
        return [[d.check(x[i : i + 50]) for d in detectors] for i in range(0, len(x), 50)]

    normal = watch(_day(rng))
    assert not any(r.is_drift for checks in normal for r in checks)
    shifted = watch(_day(rng, shift_from=PER_DAY // 2, shift=4.0))
    assert not any(r.is_drift for checks in shifted[:2] for r in checks)  # not before it
    first = next(checks[0] for checks in shifted if checks[0].is_drift)
    assert first.drifted_features == ("temperature",)
    assert abs(first.regime.since - PER_DAY // 2) <= 20
    assert make_detector("bocpd_daily").cycle
    assert not make_detector("bocpd").cycle
