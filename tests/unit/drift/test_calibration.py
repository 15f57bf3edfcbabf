"""False-alarm calibration (engage.drift.calibration): renewal rates, the level chosen for a
target rate, and the common rate of detector sets with ceilings and floors."""

from __future__ import annotations

import numpy as np
import pytest

from engage.drift.calibration import common_target, pick_level, renewal_rates


def test_renewal_rates_count_first_crossings_over_rows_exposed():
    # Episode 1 reaches 1.0 at row 3 (4 rows exposed), episode 2 never does (censored, 5).
    maxima = [np.array([0.2, 0.5, 0.9, 1.0]), np.array([0.1, 0.2, 0.3, 0.4, 0.5])]
    rates = renewal_rates(maxima, np.array([0.5, 1.0, 2.0]))
    # level 0.5: both reach it, at rows 1 and 4 -> 2 alarms / (2 + 5) rows
    assert rates == pytest.approx([2 / 7, 1 / 9, 0 / 9])


def test_renewal_rates_fall_as_the_level_rises():
    rng = np.random.default_rng(0)
    maxima = [np.maximum.accumulate(rng.exponential(0.3, 200)) for _ in range(50)]
    rates = renewal_rates(maxima, np.linspace(0.3, 2.0, 50))
    assert np.all(np.diff(rates) <= 0)
    assert rates[0] > rates[-1]


def test_pick_level_takes_the_most_sensitive_level_at_the_target():
    # cusum-style: scale c from sensitive (low) to strict (high)
    assert pick_level([0.8, 1.0, 1.2, 1.4], [40.0, 20.0, 9.0, 3.0], 10.0) == 1.2
    assert pick_level([0.8, 1.0], [40.0, 20.0], 20.0) == 1.0  # at the target counts


def test_pick_level_does_not_let_a_lucky_noisy_level_through():
    # bocpd thresholds 0.3 .. 0.9: 0.3 measured low by chance, but 0.5 is above the target
    assert pick_level([0.3, 0.5, 0.7, 0.9], [1.0, 3.0, 1.5, 1.0], 1.5) == 0.7


def test_pick_level_none_when_even_the_strictest_is_too_high():
    assert pick_level([0.5, 0.9], [5.0, 4.0], 1.0) is None
    with pytest.raises(ValueError, match="one rate per level"):
        pick_level([0.5, 0.9], [5.0], 1.0)


def test_common_target_is_the_lowest_ceiling_below_the_nominal_rate():
    assert common_target(20.0) == (20.0, "nominal")
    target, by = common_target(20.0, {"live default": 1.5, "daily": 3.0})
    assert (target, by) == (1.5, "live default")
    assert common_target(1.0, {"live default": 1.5}) == (1.0, "nominal")


def test_common_target_refuses_a_rate_below_a_floor_or_zero():
    assert common_target(20.0, {"live": 1.5}, {"0.x default": 0.3})[0] == 1.5
    with pytest.raises(ValueError, match=r"floor of 0\.x default \(2\)"):
        common_target(20.0, {"live": 1.5}, {"0.x default": 2.0})
    with pytest.raises(ValueError, match="no common false-alarm rate"):
        common_target(20.0, {"daily": 0.0})
