"""The synthetic smart-living generator: households with indoor sensors at 1-minute resolution.

Each household draws its own routine (residents, wake/leave/return/sleep times, weekday and
weekend habits, heating, appliances) from the seed. Sensors follow simple physical dynamics:
CO2 rises with the people present and decays towards outdoor air when the home is empty,
temperature tracks the thermostat, humidity jumps with showers and cooking. Occupancy is
therefore learnable from a window of readings but not from one reading alone: a sleeping
household makes no motion and draws base load only, like an empty one, yet keeps CO2 high.

Every array has shape (households, days, 1440) until the final frame is built, so the whole
generator is vectorised over households and minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MINUTES = 1440
OUTDOOR_CO2 = 420.0
COLUMNS = (
    "timestamp",
    "household",
    "temperature",
    "humidity",
    "co2",
    "motion",
    "power",
    "occupied",
)


@dataclass(frozen=True)
class _Day:
    """Per household and day (arrays of shape (H, D, 1)): when things happen, in minutes."""

    wake: np.ndarray
    sleep: np.ndarray
    away: np.ndarray
    leave: np.ndarray
    back: np.ndarray


def _recur(a: np.ndarray, b: np.ndarray, x0: np.ndarray, chunk: int = 480) -> np.ndarray:
    """Solve ``x[t] = a[t] * x[t-1] + b[t]`` along the last axis, vectorised.

    The closed form ``x = P * (x0 + cumsum(b / P))`` with ``P = cumprod(a)`` is evaluated in
    chunks because ``P`` underflows over long series; with ``a > 0.5`` a chunk of 480 stays
    far above the smallest float64.
    """
    out = np.empty_like(b)
    x = x0
    for s in range(0, b.shape[-1], chunk):
        p = np.cumprod(a[..., s : s + chunk], axis=-1)
        out[..., s : s + chunk] = p * (x[..., None] + np.cumsum(b[..., s : s + chunk] / p, axis=-1))
        x = out[..., min(s + chunk, b.shape[-1]) - 1]
    return out


def _household_params(rng: np.random.Generator, h: int) -> dict[str, np.ndarray]:
    """Draw each household's habits; every value has shape (H, 1, 1) to broadcast over days."""
    draws = {
        "residents": rng.integers(1, 5, h).astype(float),
        "commuter": rng.random(h) < 0.75,
        "wake": rng.normal(6.75 * 60, 30, h),
        "leave_delay": rng.uniform(40, 90, h),
        "back": rng.normal(17.5 * 60, 45, h),
        "sleep": rng.normal(23 * 60, 30, h),
        "weekend_shift": rng.uniform(60, 150, h),
        "setpoint": rng.uniform(19.5, 22.0, h),
        "night_drop": rng.uniform(1.0, 3.0, h),
        "setback": rng.uniform(15.0, 17.5, h),
        "base_load": rng.uniform(60, 200, h),
        "fridge": rng.uniform(40, 90, h),
        "appliance": rng.uniform(80, 350, h),
        "cook_power": rng.uniform(1500, 2800, h),
        "cook_prob": rng.uniform(0.6, 0.95, h),
        "motion_rate": rng.uniform(0.15, 0.4, h),
        "co2_rise": rng.uniform(250, 400, h),
        "ventilation": rng.uniform(1 / 150, 1 / 80, h),
        "humidity_base": rng.uniform(35, 50, h),
        "shower_prob": rng.uniform(0.5, 0.9, h),
    }
    return {k: v[:, None, None] for k, v in draws.items()}


def _schedule(rng: np.random.Generator, p: dict, dow: np.ndarray) -> _Day:
    """Draw each day's wake, leave, return and sleep times with day-to-day jitter."""
    shape = (p["wake"].shape[0], dow.shape[1], 1)
    weekday = dow < 5
    jitter = rng.normal(0, 20, (4, *shape))
    wake = p["wake"] + np.where(weekday, 0.0, p["weekend_shift"]) + jitter[0]
    late_night = (dow == 4) | (dow == 5)  # Friday and Saturday
    sleep = np.minimum(p["sleep"] + 45.0 * late_night + jitter[1], MINUTES - 1)
    works_out = weekday & p["commuter"]
    # Commuters miss a few workdays (sick, holiday); everyone else goes out on some days.
    away = np.where(works_out, rng.random(shape) < 0.93, rng.random(shape) < 0.5)
    outing_leave = rng.uniform(10 * 60, 14 * 60, shape)
    leave = np.where(works_out, wake + p["leave_delay"] + jitter[2], outing_leave)
    back = np.where(works_out, p["back"] + jitter[3], outing_leave + rng.uniform(90, 300, shape))
    leave = np.maximum(leave, wake + 15)
    back = np.clip(back, leave + 30, sleep - 30)
    return _Day(wake=wake, sleep=sleep, away=away & (back > leave), leave=leave, back=back)


def _cooking(rng: np.random.Generator, p: dict, day: _Day, home: np.ndarray) -> np.ndarray:
    """Minutes with the stove on: breakfast after waking, dinner after coming back."""
    m = np.arange(MINUTES)
    shape = day.wake.shape
    breakfast = rng.random(shape) < 0.7
    b_start = day.wake + rng.uniform(10, 25, shape)
    dinner = rng.random(shape) < p["cook_prob"]
    d_start = np.where(day.away, day.back, 18 * 60) + rng.uniform(20, 60, shape)
    d_len = rng.uniform(25, 50, shape)
    on = (breakfast & (m >= b_start) & (m < b_start + 12)) | (
        dinner & (m >= d_start) & (m < d_start + d_len)
    )
    return on & home


@dataclass(frozen=True)
class _State:
    """Per household and minute (arrays of shape (H, D, 1440)): who is home, awake, cooking."""

    home: np.ndarray
    awake: np.ndarray
    cooking: np.ndarray


Rng = np.random.Generator
Params = dict[str, np.ndarray]


def _co2(p: Params, st: _State) -> np.ndarray:
    """First-order mass balance: per-person source, ventilation towards outdoor air."""
    people = p["residents"] * st.home * np.where(st.awake, 1.0, 0.75)  # sleepers breathe less
    k = p["ventilation"][:, :, 0]
    flat = people.reshape(people.shape[0], -1)
    a = np.broadcast_to(1.0 - k, flat.shape)
    b = k * (OUTDOOR_CO2 + p["co2_rise"][:, :, 0] * flat)
    return _recur(a, b, b[:, 0] / k[:, 0])


def _temperature(rng: Rng, p: Params, st: _State, outdoor: np.ndarray) -> np.ndarray:
    """Thermostat: fast to the setpoint when home, slow drift to the setback when away."""
    night = p["setpoint"] - p["night_drop"]
    goal = np.where(st.awake, p["setpoint"], np.where(st.home, night, p["setback"]))
    goal = goal + 0.08 * (outdoor - 5.0) + 0.6 * st.cooking
    k = np.where(st.home, 1 / 25, 1 / 150)
    h = goal.shape[0]
    a, b = (1.0 - k).reshape(h, -1), (k * goal).reshape(h, -1)
    return _recur(a, b, goal[:, 0, 0] + rng.normal(0, 0.3, h))


def _humidity(rng: Rng, p: Params, day: _Day, st: _State) -> np.ndarray:
    """Relative humidity relaxing to a base level, with shower and cooking spikes."""
    m = np.arange(MINUTES)
    shape = day.wake.shape
    shower_start = day.wake + rng.uniform(5, 20, shape)
    shower = (rng.random(shape) < p["shower_prob"]) & (m >= shower_start) & (m < shower_start + 10)
    k = 1 / 45
    source = 0.9 * (shower & st.awake) + 0.15 * st.cooking
    goal = p["humidity_base"] + 1.5 * p["residents"] * st.awake
    h = goal.shape[0]
    b = (k * goal + source).reshape(h, -1)
    return _recur(np.full_like(b, 1.0 - k), b, p["humidity_base"][:, 0, 0])


def _power(rng: Rng, p: Params, st: _State) -> np.ndarray:
    """Base load with a cycling fridge, appliances while awake at home, stove peaks."""
    shape = st.awake.shape
    m = np.arange(shape[1] * MINUTES).reshape(1, -1, MINUTES)
    phase = rng.integers(0, 40, (shape[0], 1, 1))
    fridge = p["fridge"] * (((m + phase) % 40) < 15)
    use = p["appliance"] * rng.lognormal(0.0, 0.5, shape) * st.awake
    stove = p["cook_power"] * rng.uniform(0.7, 1.0, shape) * st.cooking
    return (p["base_load"] + fridge + use + stove).reshape(shape[0], -1)


def _motion(rng: Rng, p: Params, st: _State) -> np.ndarray:
    """PIR events: only while someone is awake at home, more likely with more people."""
    rate = 1.0 - (1.0 - p["motion_rate"]) ** p["residents"]
    rate = np.where(st.cooking, 0.8, rate)
    return (rng.random(st.awake.shape) < rate) & st.awake


def _simulate(rng: Rng, days: int, day0: pd.Timestamp, households: int) -> dict[str, np.ndarray]:
    """Noiseless sensors and labels, each of shape (households, days * 1440)."""
    dow = pd.date_range(day0, periods=days, freq="D").dayofweek.to_numpy()[None, :, None]
    p = _household_params(rng, households)
    day = _schedule(rng, p, dow)
    m = np.arange(MINUTES)
    home = ~(day.away & (m >= day.leave) & (m < day.back))
    awake = home & (m >= day.wake) & (m < day.sleep)
    st = _State(home=home, awake=awake, cooking=_cooking(rng, p, day, home))
    # The same weather for every household: a daily mean and a cycle peaking mid-afternoon.
    outdoor = rng.normal(3.0, 2.0, (1, days, 1)) + 4.0 * np.sin(2 * np.pi * (m / 60 - 9) / 24)
    flat = (households, days * MINUTES)
    return {
        "temperature": _temperature(rng, p, st, outdoor),
        "humidity": _humidity(rng, p, day, st),
        "co2": _co2(p, st),
        "motion": _motion(rng, p, st).reshape(flat).astype(np.int64),
        "power": _power(rng, p, st),
        "occupied": np.broadcast_to(home, awake.shape).reshape(flat).astype(np.int64),
    }


# Sensor: (noise sd at noise=1, decimals the sensor reports, lowest and highest reading).
_SENSORS = {
    "temperature": (0.1, 2, -50.0, 60.0),
    "humidity": (1.0, 1, 5.0, 100.0),
    "co2": (12.0, 0, 0.0, None),
    "power": (6.0, 1, 0.0, None),
}


def _add_noise(rng: Rng, sensors: dict[str, np.ndarray], noise: float) -> None:
    """Gaussian sensor noise and the resolution a real sensor reports, in place."""
    for name, (sd, digits, low, high) in _SENSORS.items():
        noisy = sensors[name] + rng.normal(0.0, sd * noise, sensors[name].shape)
        sensors[name] = np.clip(np.round(noisy, digits), low, high)


def generate_smart_living(
    households: int, days: int, seed: int, start: str, noise: float
) -> pd.DataFrame:
    """Simulate households' indoor sensors and occupancy at 1-minute resolution.

    Parameters
    ----------
    households : int
        Number of households, each with its own routine drawn from ``seed``.
    days : int
        Days simulated per household, from local midnight of ``start``.
    seed : int
        Generator seed: the same arguments give an identical frame.
    start : str
        First simulated day, an ISO date such as ``"2026-01-05"``.
    noise : float
        Multiplier on sensor noise (0 gives noiseless sensors).

    Returns
    -------
    pandas.DataFrame
        Columns ``timestamp, household, temperature, humidity, co2, motion, power,
        occupied``, sorted by household then time; ``households * days * 1440`` rows.
    """
    rng = np.random.default_rng(seed)
    day0 = pd.Timestamp(start).normalize()
    sensors = _simulate(rng, days, day0, households)
    _add_noise(rng, sensors, noise)
    n = days * MINUTES
    width = max(2, len(str(households - 1)))
    ids = np.array([f"h{i:0{width}d}" for i in range(households)], dtype=object)
    columns = {
        "timestamp": np.tile(pd.date_range(day0, periods=n, freq="min").to_numpy(), households),
        "household": np.repeat(ids, n),
        **{name: sensors[name].ravel() for name in COLUMNS[2:]},
    }
    return pd.DataFrame(columns)
