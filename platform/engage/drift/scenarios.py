"""Drift scenarios with known change points, built from the synthetic smart-living generator.

One population of households is simulated once (:func:`population`); its rows are split at
random into a reference half (captured like training data, windows in time order) and a
stream half. Each scenario draws ``n`` rows i.i.d. from the stream half with its own seed
and changes them from ``change_at`` on; the change is in units of the reference standard
deviation ``sd`` of a feature:

========== ==========================================================================
no_drift   nothing changes
sudden     temperature + 1 sd (a sensor offset)
gradual    CO2 ramps linearly from + 0 to + 2 sd over ``ramp`` rows
variance   power's deviations from its median doubled
stuck      humidity repeats its last reading (a stuck sensor)
seasonal   temperature - 0.75 sd and humidity + 0.75 sd (heating season)
covariate  rows drawn with weight exp(0.75 z_co2): more occupied-looking minutes, the
           labels' dependence on the inputs unchanged (selection on x only)
========== ==========================================================================

:func:`shifted_windows` builds served-shaped windows from a model's own reference, shifted
the way a miscalibrated or relocated sensor would be: what ``engage quickstart``'s live
drift demonstration sends to a served model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engage.drift.reference import Reference, capture_reference

FEATURES = ("temperature", "humidity", "co2", "power")
SCENARIOS = ("no_drift", "sudden", "gradual", "variance", "stuck", "seasonal", "covariate")


@dataclass(frozen=True)
class Stream:
    """Rows ``x`` ``(n, F)`` in arrival order, labels ``y``, the change point (None: none)."""

    name: str
    x: np.ndarray
    y: np.ndarray
    change_at: int | None


@dataclass(frozen=True)
class Population:
    """The simulated population: the reference half and the pool the streams draw from."""

    reference: Reference
    pool_x: np.ndarray
    pool_y: np.ndarray


@lru_cache(maxsize=4)
def population(households: int = 12, days: int = 4, seed: int = 0, window: int = 10) -> Population:
    """Simulate once; half the rows (at random) become the reference, half the stream pool."""
    from engage.data.synthetic import generate_smart_living

    frame = generate_smart_living(households, days, seed, "2026-01-05", 1.0)
    x = frame[list(FEATURES)].to_numpy(np.float64)
    y = frame["occupied"].to_numpy()
    in_ref = np.random.default_rng(seed).random(len(x)) < 0.5
    ref_rows = x[in_ref]  # still in household, time order
    windows = sliding_window_view(ref_rows, window, axis=0).transpose(0, 2, 1)[::window]
    reference = capture_reference(windows, None, FEATURES, max_rows=5000, seed=seed)
    return Population(reference, x[~in_ref], y[~in_ref])


def make_stream(
    name: str,
    seed: int,
    n: int = 2500,
    change_at: int = 500,
    ramp: int = 1000,
    pop: Population | None = None,
) -> Stream:
    """One scenario stream; the same ``(name, seed)`` gives the same rows."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")
    pop = pop or population()
    rng = np.random.default_rng(seed)
    sd = pop.reference.std
    j = {f: i for i, f in enumerate(FEATURES)}
    idx = rng.integers(0, len(pop.pool_x), n)
    if name == "covariate":
        z = (pop.pool_x[:, j["co2"]] - pop.reference.mean[j["co2"]]) / sd[j["co2"]]
        w = np.exp(0.75 * z)
        idx[change_at:] = rng.choice(len(w), n - change_at, p=w / w.sum())
    x, y = pop.pool_x[idx].copy(), pop.pool_y[idx].copy()
    after = slice(change_at, None)
    if name == "sudden":
        x[after, j["temperature"]] += sd[j["temperature"]]
    elif name == "gradual":
        steps = np.minimum(np.arange(n - change_at) / ramp, 1.0)
        x[after, j["co2"]] += 2 * sd[j["co2"]] * steps
    elif name == "variance":
        med = np.median(pop.reference.rows[:, j["power"]])
        x[after, j["power"]] = med + 2 * (x[after, j["power"]] - med)
    elif name == "stuck":
        x[after, j["humidity"]] = x[change_at - 1, j["humidity"]]
    elif name == "seasonal":
        x[after, j["temperature"]] -= 0.75 * sd[j["temperature"]]
        x[after, j["humidity"]] += 0.75 * sd[j["humidity"]]
    return Stream(name, x, y, None if name == "no_drift" else change_at)


def shifted_windows(reference: Reference, window: int, n: int, seed: int = 0) -> np.ndarray:
    """``n`` windows ``(n, window, F)`` of ``reference`` rows, shifted like a faulty sensor.

    Runs of rows are taken in time order (the reference keeps its windows' rows in order),
    then shifted: temperature + 6 °C and CO2 x 1.6 where the reference has those features,
    else the first feature + 3 reference standard deviations. float32, rounded to 3 places,
    as a client would send them.
    """
    rows = reference.rows.astype(np.float64)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, max(1, len(rows) - window), n)
    x = np.stack([rows[s : s + window] for s in starts])
    if x.shape[1] < window:  # a reference shorter than one window: repeat its rows
        x = np.resize(x, (n, window, rows.shape[1]))
    names = list(reference.features)
    if "temperature" in names or "co2" in names:
        if "temperature" in names:
            x[..., names.index("temperature")] += 6.0
        if "co2" in names:
            x[..., names.index("co2")] *= 1.6
    else:
        x[..., 0] += 3.0 * reference.std[0]
    return x.astype(np.float32).round(3)
