"""Occupant routines: who is home, awake, cooking, showering or hosting guests, minute by minute.

Each household draws its habits from its own seed (household ``i`` is the same household in
every shard); each day draws jitter, holidays, outings, guests and meals. Everything is a
boolean or count array of shape (households, days, 1440), so the routine is vectorised over
households and minutes like :mod:`engage.data.synthetic`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engage.data.simulator.space import Scenario

MINUTES = 1440
ACTIVITIES = ("away", "asleep", "home", "cooking", "showering", "guests")
"""The ``activity`` label's codes: index in this tuple (showering > cooking > guests > home)."""

_M = np.arange(MINUTES)


def household_habits(
    scenario: Scenario, seed: int, first: int, count: int
) -> dict[str, np.ndarray]:
    """Each household's habits, arrays of shape (count, 1, 1), one seed per household."""
    names = ("wake", "leave_delay", "back", "sleep", "weekend_shift", "commuter", "base_load",
             "fridge", "fridge_phase", "appliance", "cook_power", "humidity_base", "shower_prob",
             "motion_rate", "co2_person", "window_minute")  # fmt: skip
    rows = np.empty((count, len(names)))
    for i in range(count):
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0CC, first + i]))
        rows[i] = (
            rng.normal(6.75 * 60, 30), rng.uniform(40, 90), rng.normal(17.5 * 60, 45),
            rng.normal(23 * 60, 30), rng.uniform(60, 150),
            rng.random() < scenario["commuter_share"], rng.uniform(60, 200), rng.uniform(40, 90),
            rng.integers(0, 40), rng.uniform(80, 350), rng.uniform(1500, 2800),
            rng.uniform(35, 50), rng.uniform(0.5, 0.9), rng.uniform(0.15, 0.4),
            rng.uniform(3.0, 4.5), rng.uniform(8 * 60, 20 * 60),
        )  # fmt: skip
    habits = {name: rows[:, j, None, None] for j, name in enumerate(names)}
    habits["commuter"] = habits["commuter"] > 0.5
    return habits


@dataclass(frozen=True)
class Routine:
    """Per household and minute (shape (H, D, 1440)): the occupants' state.

    Attributes
    ----------
    home, awake : numpy.ndarray of bool
        Residents at home; residents at home and awake.
    cooking, showering, window_open, door : numpy.ndarray of bool
        Stove on; shower running; a window open for airing; the front door opened.
    guests : numpy.ndarray of float
        Guests present (counted with ``occupants``).
    occupants : numpy.ndarray of float
        People at home: residents plus guests.
    """

    home: np.ndarray
    awake: np.ndarray
    cooking: np.ndarray
    showering: np.ndarray
    window_open: np.ndarray
    door: np.ndarray
    guests: np.ndarray
    occupants: np.ndarray

    def activity(self) -> np.ndarray:
        """The ``activity`` label: a code into :data:`ACTIVITIES` per minute (int8)."""
        code = np.where(self.home, np.where(self.awake, 2, 1), 0).astype(np.int8)
        code[(self.guests > 0) & self.awake] = 5
        code[self.cooking] = 3
        code[self.showering] = 4
        return code


def _days(rng: np.random.Generator, sc: Scenario, hb: dict, dow: np.ndarray) -> dict:
    """Per household and day (shape (H, D, 1)): wake, leave, back, sleep and who is away."""
    shape = (hb["wake"].shape[0], dow.shape[1], 1)
    weekday = dow < 5
    jitter = rng.normal(0, 20, (4, *shape))
    wake = hb["wake"] + np.where(weekday, 0.0, hb["weekend_shift"]) + jitter[0]
    late = (dow == 4) | (dow == 5)
    sleep = np.minimum(hb["sleep"] + 45.0 * late + jitter[1], MINUTES - 1)
    works = weekday & hb["commuter"]
    away = np.where(works, rng.random(shape) < 0.95, rng.random(shape) < 0.5)
    outing = rng.uniform(10 * 60, 14 * 60, shape)
    leave = np.maximum(np.where(works, wake + hb["leave_delay"] + jitter[2], outing), wake + 15)
    back = np.where(works, hb["back"] + jitter[3], outing + rng.uniform(90, 300, shape))
    back = np.clip(back, leave + 30, sleep - 30)
    holiday = rng.random(shape) < sc["holiday_rate"]
    return {"wake": wake, "sleep": sleep, "leave": leave, "back": back,
            "away": away & (back > leave), "holiday": holiday}  # fmt: skip


def _window(rng: np.random.Generator, sc: Scenario, hb: dict, day: dict, awake: np.ndarray):
    """Airing: on some days a window is open 10-30 minutes around the household's habit."""
    shape = day["wake"].shape
    opens = rng.random(shape) < sc["window_rate"]
    start = hb["window_minute"] + rng.normal(0, 60, shape)
    return opens & (start <= _M) & (start + rng.uniform(10, 30, shape) > _M) & awake


def _guests(rng: np.random.Generator, sc: Scenario, day: dict, home: np.ndarray) -> np.ndarray:
    """Evening visits: 1-4 guests for 2-5 hours from 18:00-20:00 on some days."""
    shape = day["wake"].shape
    visit = rng.random(shape) < sc["guest_rate"]
    arrive = rng.uniform(18 * 60, 20 * 60, shape)
    stay = (arrive <= _M) & (arrive + rng.uniform(120, 300, shape) > _M)
    count = rng.integers(1, 5, shape).astype(float)
    return np.where(visit & stay & home, count, 0.0)


def routine(rng: np.random.Generator, sc: Scenario, hb: dict, dow: np.ndarray) -> Routine:
    """Draw every household's day-by-day routine.

    Parameters
    ----------
    rng : numpy.random.Generator
        The block's generator (daily and per-minute draws).
    sc : Scenario
        Uses ``household_size``, ``holiday_rate``, ``guest_rate``, ``cooking_rate``,
        ``window_rate`` and ``commuter_share`` (through the habits).
    hb : dict
        :func:`household_habits` of the block's households.
    dow : numpy.ndarray
        Day of week of each day, shape (1, D, 1), Monday = 0.
    """
    day = _days(rng, sc, hb, dow)
    out = day["away"] & (day["leave"] <= _M) & (day["back"] > _M)
    home = ~(out | day["holiday"])
    awake = home & (day["wake"] <= _M) & (day["sleep"] > _M)
    shape = day["wake"].shape
    b_start = day["wake"] + rng.uniform(20, 35, shape)  # after the shower
    d_start = np.where(day["away"], day["back"], 18 * 60) + rng.uniform(20, 60, shape)
    cooking = home & (
        ((rng.random(shape) < 0.7) & (b_start <= _M) & (b_start + 12 > _M))
        | ((rng.random(shape) < sc["cooking_rate"]) & (d_start <= _M) & (d_start + 35 > _M))
    )
    s_start = day["wake"] + rng.uniform(2, 8, shape)
    showering = (
        awake & (rng.random(shape) < hb["shower_prob"]) & (s_start <= _M) & (s_start + 10 > _M)
    )
    guests = _guests(rng, sc, day, home)
    arrivals = np.diff(home.astype(np.int8), axis=-1, prepend=home[..., :1]) != 0
    visits = np.diff(guests, axis=-1, prepend=guests[..., :1]) != 0
    return Routine(
        home=home,
        awake=awake,
        cooking=cooking,
        showering=showering,
        window_open=_window(rng, sc, hb, day, awake),
        door=arrivals | visits,
        guests=guests,
        occupants=sc["household_size"] * home + guests,
    )
