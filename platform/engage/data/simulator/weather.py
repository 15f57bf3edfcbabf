"""Outdoor weather shared by every household of a simulation: seasons, days and fronts.

The daily mean follows a yearly cosine (coldest in mid-January) plus weather fronts, an
AR(1) anomaly from day to day; within a day a sine peaks mid-afternoon. Cloud cover comes
with the fronts (a cold front is cloudier), and daylight follows the season's day length.
The weather is drawn for absolute days counted from the simulation's start, so shards
covering different periods of one simulation see the same weather.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from engage.data.simulator.space import Scenario

MINUTES = 1440
_FRONT_MEMORY = 0.7  # AR(1) coefficient of the day-to-day anomaly: fronts last a few days


@dataclass(frozen=True)
class Weather:
    """Outdoor conditions, arrays of shape (1, days, 1440) to broadcast over households.

    Attributes
    ----------
    temperature : numpy.ndarray
        Outdoor air temperature, degC.
    daylight : numpy.ndarray
        Outdoor illuminance reaching a window, lux (0 at night).
    """

    temperature: np.ndarray
    daylight: np.ndarray


def _fronts(scenario: Scenario, seed: int, total_days: int) -> np.ndarray:
    """Daily anomalies of an AR(1) process whose stationary sd is ``front_sd``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x57EA]))
    shocks = rng.normal(0.0, scenario["front_sd"] * np.sqrt(1 - _FRONT_MEMORY**2), total_days)
    anomaly = np.empty(total_days)
    level = rng.normal(0.0, scenario["front_sd"])
    for day, shock in enumerate(shocks):  # a few hundred days at most: a plain loop is fine
        level = _FRONT_MEMORY * level + shock
        anomaly[day] = level
    return anomaly


def outdoor(
    scenario: Scenario, seed: int, start: pd.Timestamp, first_day: int, days: int
) -> Weather:
    """The weather of days ``first_day .. first_day + days - 1`` counted from ``start``.

    Parameters
    ----------
    scenario : Scenario
        Uses ``outdoor_mean``, ``seasonal_amplitude``, ``diurnal_amplitude``, ``front_sd``.
    seed : int
        The simulation seed; the weather depends on it and on nothing about households.
    start : pandas.Timestamp
        Midnight of day 0 of the simulation.
    first_day, days : int
        The period to return.
    """
    anomaly = _fronts(scenario, seed, first_day + days)[first_day:]
    dates = pd.date_range(start + pd.Timedelta(days=first_day), periods=days, freq="D")
    doy = dates.dayofyear.to_numpy(dtype=float)
    season = -np.cos(2 * np.pi * (doy - 15) / 365.25)  # -1 in mid-January, +1 mid-July
    daily = scenario["outdoor_mean"] + scenario["seasonal_amplitude"] * season + anomaly
    hours = np.arange(MINUTES) / 60.0
    diurnal = scenario["diurnal_amplitude"] * np.sin(2 * np.pi * (hours - 9.0) / 24.0)
    temperature = daily[None, :, None] + diurnal[None, None, :]
    # Day length from 8 h (winter) to 16 h (summer), centred on 12:30.
    half = (12.0 + 4.0 * season)[None, :, None] / 2.0
    sun = np.clip(np.cos(np.pi * (hours[None, None, :] - 12.5) / (2 * half)), 0.0, None)
    sun = np.where(np.abs(hours[None, None, :] - 12.5) < half, sun, 0.0)
    cloud = np.clip(0.5 - anomaly / (4.0 * max(scenario["front_sd"], 1.0)), 0.1, 0.9)
    daylight = 20_000.0 * (1.0 - 0.75 * cloud)[None, :, None] * sun
    return Weather(temperature=temperature, daylight=daylight)
