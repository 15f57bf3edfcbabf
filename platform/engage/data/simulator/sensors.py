"""Room sensors: what each one would read without faults, then its noise and resolution.

Rooms and their sensors: the living room (temperature, humidity, CO2, light, PIR motion),
the kitchen (PIR motion, stove power), the bedroom (CO2, PIR motion), the bathroom
(humidity), the front door and a window (contacts), the meter (total power, fridge power),
the heating (thermal power) and a weather station (outdoor temperature). Air quality
follows first-order mass balances against outdoor air; every array here has shape
(H, D, 1440) or (H, D * 1440).
"""

from __future__ import annotations

import numpy as np

from engage.data.simulator.routines import MINUTES, Routine
from engage.data.simulator.space import Scenario
from engage.data.simulator.thermal import recur

OUTDOOR_CO2 = 420.0
# Sensor: (noise sd at sensor_noise = 1, decimals reported, lowest and highest reading).
RESOLUTION = {
    "temperature": (0.1, 2, -50.0, 60.0),
    "humidity": (0.3, 1, 5.0, 100.0),
    "co2": (12.0, 0, 0.0, 10_000.0),
    "light": (5.0, 0, 0.0, 100_000.0),
    "power": (6.0, 1, 0.0, None),
    "outdoor_temperature": (0.2, 1, -60.0, 60.0),
    "co2_bedroom": (12.0, 0, 0.0, 10_000.0),
    "humidity_bathroom": (0.3, 1, 5.0, 100.0),
    "power_fridge": (1.0, 1, 0.0, None),
    "power_stove": (5.0, 1, 0.0, None),
    "heating": (20.0, 0, 0.0, None),
}
EVENTS = ("motion", "motion_kitchen", "motion_bedroom", "door", "window")
"""Binary event sensors (0/1 per minute): never noisy, never dropped."""


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)


def air(scenario: Scenario, rt: Routine, hb: dict, outdoor: np.ndarray) -> dict[str, np.ndarray]:
    """CO2 (living room, bedroom) and relative humidity (living room, bathroom).

    Cold outdoor air holds little water, so heated rooms are drier in winter: the base
    humidity moves 1 point per degC of the day's mean outdoor temperature away from 10 degC.
    """
    vent = scenario["ventilation"] / 60.0 + 0.1 * rt.window_open  # per minute
    size = scenario["household_size"]
    living = rt.occupants * rt.awake + rt.guests * ~rt.awake
    asleep = size * (rt.home & ~rt.awake)
    x0 = np.full(rt.home.shape[0], OUTDOOR_CO2)
    co2 = recur(_flat(1.0 - vent), _flat(vent * OUTDOOR_CO2 + 0.5 * hb["co2_person"] * living), x0)
    # A closed bedroom is smaller than the living room: the same breath adds more ppm.
    bed = recur(_flat(1.0 - vent), _flat(vent * OUTDOOR_CO2 + hb["co2_person"] * asleep), x0)
    k = 1 / 45 + 0.05 * rt.window_open
    base = np.clip(hb["humidity_base"] + outdoor.mean(axis=-1, keepdims=True) - 10.0, 15.0, 70.0)
    goal = base + 1.2 * living
    start = base[:, 0, 0]
    hum = recur(_flat(1.0 - k), _flat(k * goal + 0.15 * rt.cooking), start)
    bath = recur(np.full((1, 1), 1.0 - 1 / 20), _flat(base / 20 + 3.0 * rt.showering), start)
    return {"co2": co2, "co2_bedroom": bed, "humidity": hum, "humidity_bathroom": bath}


def appliances(rng: np.random.Generator, scenario: Scenario, rt: Routine, hb: dict) -> dict:
    """Fridge cycling, stove, other appliances while awake, and the meter's total (W)."""
    shape = rt.home.shape
    m = np.arange(shape[1] * MINUTES).reshape(1, shape[1], MINUTES)
    scale = scenario["appliance_scale"]
    fridge = scale * hb["fridge"] * (((m + hb["fridge_phase"]) % 40) < 15)
    stove = scale * hb["cook_power"] * rng.uniform(0.7, 1.0, shape) * rt.cooking
    use = scale * hb["appliance"] * rng.lognormal(0.0, 0.5, shape) * rt.awake
    total = scale * hb["base_load"] + fridge + stove + use
    return {"power": _flat(total), "power_fridge": _flat(fridge), "power_stove": _flat(stove)}


def light(rt: Routine, daylight: np.ndarray) -> np.ndarray:
    """Living-room illuminance (lux): daylight through the windows, lamps when it is dark."""
    inside = 0.02 * daylight
    lamps = 300.0 * (rt.awake & (inside < 150.0))
    return _flat(inside + lamps)


def events(rng: np.random.Generator, hb: dict, rt: Routine) -> dict[str, np.ndarray]:
    """PIR motion per room and door/window contacts, each 0/1 per minute."""
    shape = rt.home.shape
    living = np.where(rt.cooking, 0.2, 1.0 - (1.0 - hb["motion_rate"]) ** rt.occupants)
    draws = rng.random((3, *shape))
    asleep = rt.home & ~rt.awake
    out = {
        "motion": (draws[0] < living) & rt.awake,
        "motion_kitchen": (draws[1] < np.where(rt.cooking, 0.8, 0.05)) & rt.awake,
        "motion_bedroom": (draws[2] < np.where(asleep, 0.03, 0.04)) & rt.home,
        "door": rt.door,
        "window": rt.window_open,
    }
    # motion is int64 as in engage.data.synthetic; the new event sensors are int8.
    return {k: _flat(v).astype(np.int64 if k == "motion" else np.int8) for k, v in out.items()}


def add_noise(rng: np.random.Generator, readings: dict[str, np.ndarray], level: float) -> None:
    """Gaussian noise scaled by ``level`` and each sensor's resolution and range, in place."""
    for name, (sd, digits, low, high) in RESOLUTION.items():
        noisy = readings[name]
        if level > 0:
            noisy = noisy + rng.normal(0.0, sd * level, noisy.shape)
        readings[name] = np.clip(np.round(noisy, digits), low, high)
