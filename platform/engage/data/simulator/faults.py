"""Sensor faults with labels: dropouts (NaN in bursts), slow drift and stuck-at readings.

Each (household, sensor) pair of a faulty-capable sensor fails with probability
``fault_rate`` over the simulated period, either drifting (an offset growing linearly from
a random minute) or stuck (repeating the reading of a random minute for 2-48 hours).
Dropouts are bursts of 5-30 minutes whose expected share of readings is ``dropout_rate``.
The ``fault`` label of a row is the code, in :data:`FAULTS`, of the most severe fault on
any of its sensors that minute. :func:`fill_dropouts` is how a reader repairs dropouts (the
``simulation`` source in memory, and each unit of a streamed simulation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engage.data.simulator.space import Scenario

if TYPE_CHECKING:  # only a frame's methods are used: importing faults never imports pandas
    import pandas as pd

FAULTS = ("none", "dropout", "drift", "stuck")
"""The ``fault`` label's codes: index in this tuple."""

# Sensor: drift per day at full speed (in the sensor's unit). Only these sensors fail.
DRIFT_PER_DAY = {
    "temperature": 0.5,
    "humidity": 3.0,
    "co2": 60.0,
    "light": 20.0,
    "co2_bedroom": 60.0,
    "humidity_bathroom": 3.0,
}


def _dropouts(rng: np.random.Generator, rate: float, shape: tuple[int, int]) -> np.ndarray:
    """Boolean (H, N): minutes lost in bursts of 5-30 minutes, ``rate`` of them on average."""
    length = rng.integers(5, 31, (shape[0], 1))
    starts = rng.random(shape) < rate / length
    t = np.arange(shape[1])
    last = np.maximum.accumulate(np.where(starts, t, -(10**9)), axis=1)
    return (t - last) < length


def _drift(rng: np.random.Generator, values: np.ndarray, per_day: float, onset, rows):
    """Add a linear drift from ``onset`` on the households ``rows``, in place; return its mask."""
    t = np.arange(values.shape[1])
    sign = rng.choice([-1.0, 1.0], (values.shape[0], 1))
    slope = per_day / 1440.0 * sign * rng.uniform(0.5, 1.5, (values.shape[0], 1))
    on = (t >= onset) & rows
    values += np.where(on, slope * (t - onset), 0.0)
    return on


def _stuck(rng: np.random.Generator, values: np.ndarray, onset, rows) -> np.ndarray:
    """Freeze readings of ``rows`` at their value at ``onset`` for 2-48 hours; return the mask."""
    t = np.arange(values.shape[1])
    end = onset + rng.integers(120, 48 * 60, onset.shape)
    on = (t >= onset) & (t < end) & rows
    frozen = np.take_along_axis(values, onset, axis=1)
    np.copyto(values, np.broadcast_to(frozen, values.shape), where=on)
    return on


def inject(
    rng: np.random.Generator, scenario: Scenario, readings: dict[str, np.ndarray]
) -> np.ndarray:
    """Apply faults and dropouts to ``readings`` in place; return the ``fault`` label (int8).

    Parameters
    ----------
    rng : numpy.random.Generator
        The block's generator.
    scenario : Scenario
        Uses ``fault_rate`` and ``dropout_rate``.
    readings : dict[str, numpy.ndarray]
        Noisy sensor readings of shape (H, N), changed in place; drift and stuck-at hit
        the sensors of :data:`DRIFT_PER_DAY`, dropouts every sensor given.
    """
    some = next(iter(readings.values()))
    label = np.zeros(some.shape, dtype=np.int8)
    h, n = some.shape
    for name, per_day in DRIFT_PER_DAY.items():
        broken = rng.random((h, 1)) < scenario["fault_rate"]
        drifts = rng.random((h, 1)) < 0.5
        onset = rng.integers(0, n, (h, 1))
        if (broken & drifts).any():
            on = _drift(rng, readings[name], per_day, onset, broken & drifts)
            np.maximum(label, 2 * on, out=label, casting="unsafe")
        if (broken & ~drifts).any():
            on = _stuck(rng, readings[name], onset, broken & ~drifts)
            np.maximum(label, 3 * on, out=label, casting="unsafe")
    if scenario["dropout_rate"] > 0:
        for values in readings.values():
            lost = _dropouts(rng, scenario["dropout_rate"], (h, n))
            values[lost] = np.nan
            np.maximum(label, lost, out=label, casting="unsafe")
    return label


def fill_dropouts(frame: pd.DataFrame, group: str = "household") -> pd.DataFrame:
    """Carry each group's last reading over its dropouts (NaN), in place; return ``frame``.

    Readings lost before a group's first one are filled backward. Only float columns
    change; rows are filled in the frame's order, so each group's rows must be in time
    order (as the simulator and its shards write them). A frame of whole groups gives
    the same values whether it is one shard set or the whole simulation.
    """
    floats = list(frame.select_dtypes("float").columns)
    if floats and frame[floats].isna().to_numpy().any():
        grouped = frame.groupby(group, sort=False)[floats]
        frame[floats] = grouped.ffill().fillna(grouped.bfill())
    return frame
