"""The slow-drift arm of ``bocpd``: it signals a sustained ramp early, stays quiet on
stationary rows and on a smooth daily cycle, and its threshold inverts Siegmund's ARL."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engage.drift import capture_reference, make_detector
from engage.drift.bocpd import RAMP_REFERENCE, NormalScore, robust_scale
from engage.drift.ramp import RampArm, cusum_threshold

FEATURES = ("a", "b", "c")
RAMP_FROM, RAMP_ROWS = 100, 400  # feature "a" climbs 0 -> 2 sd over RAMP_ROWS rows


def _stationary(rng, n):
    return rng.normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], (n, 3))


def _ramp(rng, n=RAMP_FROM + RAMP_ROWS):
    x = _stationary(rng, n)
    x[RAMP_FROM:, 0] += 2.0 * np.arange(n - RAMP_FROM) / RAMP_ROWS
    return x


def _scores(reference_rows, x):
    _, scale = robust_scale(reference_rows)
    score = NormalScore(reference_rows, scale)
    return score(reference_rows), score(x)


def _first_signal(arm, z):
    for t, row in enumerate(z):
        hit = arm.step(row, t)
        if hit is not None:
            return t, hit
    return None, None


@pytest.fixture(scope="module")
def reference_rows():
    return _stationary(np.random.default_rng(0), 2000)


def test_threshold_inverts_siegmunds_arl():
    h = cusum_threshold(0.5, 370.0)
    b = 2 * 0.5 * (h + 1.166)
    assert math.isclose((math.exp(b) - b - 1) / (2 * 0.25), 370.0, rel_tol=1e-6)
    assert cusum_threshold(0.15, 80_000) > cusum_threshold(0.15, 8_000) > 0
    with pytest.raises(ValueError, match="k > 0"):
        cusum_threshold(0.0, 100.0)
    with pytest.raises(ValueError, match="ramp arm"):
        RampArm(max_rho=1.0)


def test_signals_a_ramp_on_its_feature_dated_near_the_start(reference_rows):
    z_ref, z = _scores(reference_rows, _ramp(np.random.default_rng(3)))
    arm = RampArm().fit(z_ref)
    t, (crossed, since) = _first_signal(arm, z)
    assert RAMP_FROM < t < RAMP_FROM + RAMP_ROWS // 2  # before the ramp reaches 1 sd
    assert crossed.tolist() == [True, False, False]
    assert RAMP_FROM - 60 <= since < t


def test_quiet_on_stationary_rows(reference_rows):
    z_ref, z = _scores(reference_rows, _stationary(np.random.default_rng(2), 3000))
    assert _first_signal(RampArm().fit(z_ref), z) == (None, None)


def test_quiet_on_a_smooth_daily_cycle():
    """Serially dependent rows: a new day's swing climbs the CUSUMs, but the arm holds its
    signal (the rows' lag-1 autocorrelation is far above ``max_rho``)."""
    rng = np.random.default_rng(3)
    day = np.sin(2 * np.pi * np.arange(2 * 288) / 288)[:, None] * [3.0, -8.0, 50.0]
    x = day + rng.normal(0, [0.3, 1.0, 5.0], day.shape) + [20.0, 50.0, 500.0]
    z_ref, z = _scores(x[:144], x[144:])  # reference: half a day, the night
    arm = RampArm().fit(z_ref)
    assert _first_signal(arm, z) == (None, None)
    assert arm.rho().min() > 0.9


def test_a_stream_that_starts_at_another_known_level_is_watched_from_it(reference_rows):
    """Rows that sit 1.5 sd off the reference's mean from the start (a regime the
    reference holds, such as the night) are the level the arm watches, not drift."""
    x = _stationary(np.random.default_rng(4), 2000)
    x[:, 1] += 1.5 * 2.0
    z_ref, z = _scores(reference_rows, x)
    assert _first_signal(RampArm().fit(z_ref), z) == (None, None)


def test_bocpd_signals_a_ramp_once_through_its_arm(reference_rows):
    """Within ``bocpd`` (a reference of 1,000 rows arms it): the ramp is drift on "a",
    signalled once and dated near its start, listed among the changes. A reference of a
    few hundred rows, or a cyclic one, does not arm it."""
    reference = capture_reference(reference_rows[:RAMP_REFERENCE], None, FEATURES)
    x = _ramp(np.random.default_rng(3))
    det = make_detector("bocpd").fit(reference)
    results = [det.check(x[i : i + 50]) for i in range(0, len(x), 50)]
    assert sum(len(r.extra["alarms"]) for r in results) == 1
    assert results[-1].is_drift
    assert results[-1].drifted_features == ("a",)
    assert RAMP_FROM - 60 <= results[-1].regime.since < RAMP_FROM + RAMP_ROWS // 2
    assert results[-1].regime.since in {start for _, start in results[-1].extra["changes"]}
    small = capture_reference(reference_rows[:400], None, FEATURES)
    assert not make_detector("bocpd").fit(small).armed
    assert not make_detector("bocpd", ramp=False).fit(reference).armed
