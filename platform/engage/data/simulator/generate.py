"""One simulation block: households ``first .. first + count - 1`` over a period of days.

:func:`simulate` is the whole simulation as one frame (for small sets and tests);
:func:`simulate_block` is the unit that :mod:`engage.data.simulator.shards` runs in
parallel. Household ``i`` keeps its habits in every block (its own seed), the weather is
the same for every block of a simulation, and the block's daily and per-minute draws come
from a generator seeded by ``(seed, first household, first day)``; so a block is
deterministic by (scenario, seed, its household range, its period).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from engage.data.simulator import faults, sensors, thermal, weather
from engage.data.simulator.labels import LABELS, labels
from engage.data.simulator.routines import MINUTES, household_habits, routine
from engage.data.simulator.space import Scenario

SENSORS = (
    "temperature", "humidity", "co2", "motion", "power",
    "light", "outdoor_temperature", "co2_bedroom", "humidity_bathroom",
    "motion_kitchen", "motion_bedroom", "door", "window",
    "power_fridge", "power_stove", "heating",
)  # fmt: skip
"""Sensor columns, the first five named and meant as in :mod:`engage.data.synthetic`."""
COLUMNS = ("timestamp", "household", *SENSORS, *LABELS)
"""Every column of a simulated frame, in order."""


def _as_scenario(scenario: Scenario | Mapping[str, float] | None) -> Scenario:
    return scenario if isinstance(scenario, Scenario) else Scenario(scenario or {})


def _readings(
    rng, sc: Scenario, seed: int, day0: pd.Timestamp, hb: dict, first_day: int, days: int
):
    """Noisy, faulty sensor readings and labels, each of shape (H, days * 1440)."""
    wx = weather.outdoor(sc, seed, day0, first_day, days)
    dates = pd.date_range(day0 + pd.Timedelta(days=first_day), periods=days, freq="D")
    rt = routine(rng, sc, hb, dates.dayofweek.to_numpy()[None, :, None])
    power = sensors.appliances(rng, sc, rt, hb)
    gains = 100.0 * rt.occupants + 0.5 * power["power"].reshape(rt.home.shape)
    temperature, heating = thermal.indoor(sc, rt, wx.temperature, gains)
    h = rt.home.shape[0]
    values = {
        "temperature": temperature,
        "outdoor_temperature": np.broadcast_to(wx.temperature, rt.home.shape).reshape(h, -1),
        "light": sensors.light(rt, wx.daylight),
        "heating": heating,
        **sensors.air(sc, rt, hb, wx.temperature),
        **power,
    }
    # Events are drawn before noise and faults, so a scenario that differs only in its
    # sensor quality or fault rates sees the same occupants and the same events.
    events = sensors.events(rng, hb, rt)
    sensors.add_noise(rng, values, sc["sensor_noise"])
    fault = faults.inject(rng, sc, values)
    return {**values, **events, **labels(rt, fault)}


def block_columns(
    scenario: Scenario | Mapping[str, float] | None,
    *,
    seed: int,
    first_household: int,
    households: int,
    first_day: int,
    days: int,
    start: str = "2026-01-05",
    total_households: int | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One block's columns as flat numpy arrays, and its household ids.

    Parameters are those of :func:`simulate_block`. The ``household`` column is returned as
    ``int32`` indices into the ids (household-major, ``days * 1440`` rows each), so a
    writer can store it dictionary-encoded without building a string per row.

    Raises
    ------
    ValueError
        On an invalid scenario, or a count below 1 or an index below 0.
    """
    sc = _as_scenario(scenario)
    if households < 1 or days < 1 or first_household < 0 or first_day < 0 or seed < 0:
        raise ValueError(
            "households and days must be >= 1, first_household, first_day and seed >= 0; got "
            f"households={households}, days={days}, first_household={first_household}, "
            f"first_day={first_day}, seed={seed}"
        )
    day0 = pd.Timestamp(start).normalize()
    hb = household_habits(sc, seed, first_household, households)
    rng = np.random.default_rng(np.random.SeedSequence([seed, first_household, first_day]))
    values = _readings(rng, sc, seed, day0, hb, first_day, days)
    n = days * MINUTES
    total = total_households or first_household + households
    width = max(2, len(str(total - 1)))
    ids = np.array([f"h{first_household + i:0{width}d}" for i in range(households)], dtype=object)
    stamps = pd.date_range(day0 + pd.Timedelta(days=first_day), periods=n, freq="min")
    columns = {
        "timestamp": np.tile(stamps.to_numpy(), households),
        "household": np.repeat(np.arange(households, dtype=np.int32), n),
        **{name: values[name].ravel() for name in COLUMNS[2:]},
    }
    return columns, ids


def simulate_block(
    scenario: Scenario | Mapping[str, float] | None,
    *,
    seed: int,
    first_household: int,
    households: int,
    first_day: int,
    days: int,
    start: str = "2026-01-05",
    total_households: int | None = None,
) -> pd.DataFrame:
    """Simulate one block of households and days as a frame of :data:`COLUMNS`.

    Parameters
    ----------
    scenario : Scenario or mapping
        The point of the scenario space (a mapping is checked as :class:`Scenario`).
    seed : int
        The simulation's seed.
    first_household, households : int
        Household indices ``first_household .. first_household + households - 1``.
    first_day, days : int
        Days ``first_day .. first_day + days - 1`` counted from ``start``.
    start : str
        Day 0 of the simulation, an ISO date.
    total_households : int, optional
        Households in the whole simulation: sets the width of household ids
        (``h007`` among 1000), so ids sort and match across blocks.

    Raises
    ------
    ValueError
        On an invalid scenario, or a count below 1 or an index below 0.
    """
    columns, ids = block_columns(
        scenario, seed=seed, first_household=first_household, households=households,
        first_day=first_day, days=days, start=start, total_households=total_households,
    )  # fmt: skip
    columns["household"] = ids[columns["household"]]
    return pd.DataFrame(columns)


def simulate(
    scenario: Scenario | Mapping[str, float] | None,
    *,
    households: int,
    days: int,
    seed: int,
    start: str = "2026-01-05",
) -> pd.DataFrame:
    """Simulate ``households`` homes for ``days`` days at 1-minute resolution.

    Parameters
    ----------
    scenario : Scenario or mapping
        The point of :data:`~engage.data.simulator.SCENARIO_SPACE` (a plain mapping is
        checked; ``None`` is the default scenario).
    households, days : int
        How many homes and days (from local midnight of ``start``).
    seed : int
        The same scenario and seed give an identical frame.
    start : str
        First simulated day, an ISO date.

    Returns
    -------
    pandas.DataFrame
        :data:`COLUMNS`, sorted by household then time, ``households * days * 1440`` rows.
        Float sensors may hold NaN where ``dropout_rate`` > 0.

    Raises
    ------
    ValueError
        On an unknown parameter, a value out of its range, or a count below 1.
    """
    return simulate_block(
        scenario, seed=seed, first_household=0, households=households, first_day=0,
        days=days, start=start,
    )  # fmt: skip
