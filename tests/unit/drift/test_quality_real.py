"""``quality`` on sensor-like streams: robust ranges and learned constant spans.

A light sensor is dark (exactly 0) for 40 of every 96 rows: a reference captured from
rows in time order learns that span, so the next night is not "stuck", while a sensor
dark for a whole day is. One spike in training does not widen the in-range interval. A
quantised sensor (a thermometer reading in steps of 0.1 degrees, a slow room) repeats its
last reading by chance; the reference measures how often, and a run only that rate makes
unlikely is stuck (the real occupancy stream of TCPD showed this: temperature held for up
to 12 rows at night, read as a stuck sensor 13 times)."""

from __future__ import annotations

import numpy as np

from engage.drift import capture_reference, check_quality, make_detector
from engage.drift.quality import robust_range

DAY = 96


def _light(days: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(days * DAY)
    light = np.where(t % DAY < 40, 0.0, 300 + 100 * np.sin(2 * np.pi * t / DAY))
    light = np.where(light > 0, light + rng.normal(0, 5, len(t)), 0.0)
    temp = 21 + 2 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 0.2, len(t))
    return np.column_stack([temp, light])


def test_a_reference_of_rows_learns_the_nightly_constant_span():
    ref = capture_reference(_light(3, 0), None, ["temp", "light"])
    stats = ref.stats["light"]
    assert stats.longest_constant == 40
    assert stats.constant_window_rate > 0.3
    assert ref.stats["temp"].longest_constant == 1


def test_the_next_night_is_not_stuck_a_dark_day_is():
    ref = capture_reference(_light(3, 0), None, ["temp", "light"])
    det = make_detector("quality").fit(ref)
    live = _light(2, 1)
    results = [det.check(live[i : i + 16]) for i in range(0, len(live), 16)]
    assert not any(r.is_drift for r in results)
    dark = _light(2, 2)
    dark[:, 1] = 0.0  # the sensor died: dark all day
    results = [det.check(dark[i : i + 16]) for i in range(0, len(dark), 16)]
    stuck = [i for i, r in enumerate(results) if r.is_drift]
    assert stuck
    assert results[stuck[0]].drifted_features == ("light",)


def test_a_heavy_tailed_sensors_own_extremes_stay_in_range():
    rng = np.random.default_rng(3)
    power = rng.lognormal(3, 1, (5000, 1))
    ref = capture_reference(power, None, ["power"])
    low, high = robust_range(ref.stats["power"], 0.5)
    assert high >= ref.stats["power"].max
    assert low <= ref.stats["power"].min
    live = rng.lognormal(3, 1, (2000, 1))
    assert check_quality(live, ref).features[0].out_of_range_rate < 0.01
    live[:5, 0] = 100 * ref.stats["power"].max
    assert check_quality(live, ref).features[0].out_of_range_rate >= 0.0025


def test_a_daily_excursion_past_a_short_reference_is_in_range():
    x = _light(2, 4)
    ref = capture_reference(x[:DAY], None, ["temp", "light"])  # one day
    det = make_detector("quality").fit(ref)
    hotter = x[DAY:].copy()
    hotter[:, 0] += 0.5  # a warmer day: past yesterday's max, within the margin
    assert not det.check(hotter).is_drift


def _thermometer(rows: int, seed: int) -> np.ndarray:
    """A room's temperature read in 0.1-degree steps: its last reading repeats by chance
    about a third of the time."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    temp = 21 + 0.3 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 0.08, rows)
    return np.round(temp, 1)[:, None]


def test_the_repeat_rate_of_rows_is_measured():
    x = _thermometer(2000, 0)
    stats = capture_reference(x, None, ["temp"]).stats["temp"]
    assert stats.repeat_rate == np.mean(x[1:, 0] == x[:-1, 0])
    assert 0.2 < stats.repeat_rate < 0.5
    continuous = capture_reference(_light(3, 0), None, ["temp", "light"]).stats["temp"]
    assert continuous.repeat_rate == 0.0


def test_a_quantised_sensors_chance_repeats_are_not_stuck_a_dead_one_is():
    ref = capture_reference(_thermometer(50, 0), None, ["temp"])  # 50 rows: no run of 5
    assert ref.stats["temp"].constant_window_rate == 0.0
    det = make_detector("health").fit(ref)
    live = _thermometer(20 * DAY, 100)  # 19 runs of 5 or more equal readings
    alarms = sum(det.check(live[i : i + 16]).is_drift for i in range(0, len(live), 16))
    assert alarms == 0
    dead = _thermometer(2 * DAY, 7)
    dead[DAY:, 0] = dead[DAY, 0]  # the sensor froze at noon on day two
    results = [det.check(dead[i : i + 16]) for i in range(0, len(dead), 16)]
    stuck = [i * 16 for i, r in enumerate(results) if r.is_drift]
    assert stuck
    assert DAY <= stuck[0] <= DAY + 32
