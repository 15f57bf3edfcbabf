"""From points of the scenario space to training windows: simulate, fill gaps, window.

Each unit point becomes a :class:`~engage.data.simulator.Scenario`
(``Scenario.from_unit``), is simulated with its own seed, and is cut into windows of the
spec's features (``window`` rows, a new one every ``stride`` rows, labelled ``horizon``
rows after the last) per household. A faulty sensor's lost readings (NaN) are carried
forward within the household, then backward, then set to 0: the model sees what a
gateway holding the last value would give it. Windows remember which point they came
from (``groups``), so an acquisition can score each candidate, and the minute of the day
their label falls on (``minutes``), so it can score the hours of the day.
:func:`cut_spans` keeps a span of each simulated table (``adaptive.span_hours``): the
same rows the whole scenario has there, so a span is part of a scenario, not a variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from engage.data.fingerprint import table_digest
from engage.data.simulator import Scenario, simulate_block
from engage.spec.models import DataSpec


@dataclass(frozen=True)
class Windows:
    """Windows of simulated scenarios.

    Attributes
    ----------
    x:
        float32, shape ``(n, window, features)``, in sensor units (not standardised).
    y:
        Class index (int64) or target value (float32), shape ``(n,)``.
    groups:
        Shape ``(n,)``: the index of the unit point each window came from.
    rows:
        Sensor rows simulated (households x days x 1440 per point).
    digest:
        sha256 of the simulated tables, in point order (the round's data fingerprint).
    minutes:
        Shape ``(n,)``: the minute of the day (0..1439) of each window's label row.
    """

    x: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    rows: int
    digest: str
    minutes: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def merge(parts: list[Windows]) -> Windows:
    """Several batches of windows as one (groups renumbered to stay distinct)."""
    offsets = np.cumsum([0, *(int(p.groups.max()) + 1 if len(p) else 0 for p in parts)])
    return Windows(
        np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]),
        np.concatenate([p.groups + o for p, o in zip(parts, offsets, strict=False)]),
        sum(p.rows for p in parts),
        ",".join(p.digest for p in parts),
        np.concatenate([p.minutes for p in parts]),
    )


def simulate_frames(
    points: np.ndarray,
    *,
    households: int,
    days: int,
    seeds: np.ndarray,
    first_days: np.ndarray | None = None,
) -> list[pd.DataFrame]:
    """One simulated table per unit point of ``points`` (shape ``(n, d)``), each with its seed.

    ``first_days`` (default all 0) starts each point's period on a later day: the same
    point and seed with ``first_day = k`` are the same households (their habits and
    weather come from the seed) on days ``k .. k + days - 1``, so a scenario can be
    continued where its earlier simulation ended.
    """
    starts = np.zeros(len(points), dtype=int) if first_days is None else first_days
    return [
        simulate_block(
            Scenario.from_unit(point),
            seed=int(seed),
            first_household=0,
            households=households,
            first_day=int(first),
            days=days,
        )
        for point, seed, first in zip(points, seeds, starts, strict=True)
    ]


def windows_of(frames: list[pd.DataFrame], data: DataSpec, classes: tuple | None) -> Windows:
    """The windows of simulated tables, each table its own group.

    Raises
    ------
    DataError
        A label outside ``classes``.
    """
    xs, ys, groups, minutes = [], [], [], []
    for i, frame in enumerate(frames):
        x, y, m = _windows(frame, data)
        xs.append(x)
        ys.append(y)
        minutes.append(m)
        groups.append(np.full(len(y), i, dtype=np.int64))
    return Windows(
        np.concatenate(xs).astype(np.float32),
        encode(np.concatenate(ys), classes),
        np.concatenate(groups),
        sum(len(f) for f in frames),
        table_digest(pd.concat(frames, ignore_index=True)),
        np.concatenate(minutes),
    )


def simulate_windows(
    points: np.ndarray,
    data: DataSpec,
    *,
    households: int,
    days: int,
    seeds: np.ndarray,
    classes: tuple | None,
    first_days: np.ndarray | None = None,
) -> Windows:
    """Simulate every unit point of ``points`` and window the result (one group per point);
    ``first_days`` as in :func:`simulate_frames`.

    Raises
    ------
    DataError
        A label outside ``classes``.
    """
    frames = simulate_frames(
        points, households=households, days=days, seeds=seeds, first_days=first_days
    )
    return windows_of(frames, data, classes)


def encode(y: np.ndarray, classes: tuple | None) -> np.ndarray:
    """Class indices over ``classes`` (classification) or float32 values (regression).

    Raises
    ------
    DataError
        A label that is not one of ``classes``.
    """
    if classes is None:
        return y.astype(np.float32)
    from engage.errors import DataError

    known = np.asarray(classes)
    index = np.searchsorted(known, y)
    index = np.clip(index, 0, len(known) - 1)
    if not np.array_equal(known[index], y):
        raise DataError(
            f"simulated labels {sorted(set(y.tolist()) - set(classes))} are not in {classes}"
        )
    return index.astype(np.int64)


def _windows(frame: pd.DataFrame, data: DataSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All windows of one simulated table, per household, gaps filled, and the minute of
    the day of each window's label row."""
    reach = data.window - 1 + data.horizon
    xs, ys, ms = [], [], []
    for _, rows in frame.groupby("household", sort=False):
        values = rows[list(data.features)].ffill().bfill().fillna(0.0).to_numpy(np.float32)
        target = rows[data.target].to_numpy()
        stamps = rows["timestamp"].to_numpy().astype("datetime64[m]")
        minute = (stamps - stamps.astype("datetime64[D]")).astype(np.int64)
        starts = np.arange(0, len(rows) - reach, data.stride)
        if len(starts) == 0:  # a span shorter than a window and its horizon
            xs.append(np.empty((0, data.window, len(data.features)), dtype=np.float32))
            ys.append(target[:0])
            ms.append(minute[:0])
            continue
        view = sliding_window_view(values, data.window, axis=0)  # (rows-w+1, features, w)
        xs.append(view[starts].transpose(0, 2, 1))
        ys.append(target[starts + reach])
        ms.append(minute[starts + reach])
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ms)


def split_prefix(
    frames: list[pd.DataFrame], data: DataSpec, classes: tuple | None, minutes: int
) -> tuple[Windows, list[Windows]]:
    """The windows of every table's first ``minutes`` per household, and of each table the
    windows that follow them.

    The first part is what a simulation stopped after ``minutes`` gives (a short probe);
    each table's second part is what continuing it to the end adds, windows across the cut
    included, so a probe and its continuation hold the same windows as the whole table.
    ``rows`` and ``digest`` of each part cover only its own rows.

    Raises
    ------
    DataError
        A label outside ``classes``.
    """
    heads = [f[_minute(f) < minutes] for f in frames]
    rest = []
    for frame in frames:
        whole = windows_of([frame], data, classes)
        tail = frame[_minute(frame) >= minutes]
        keep = ~_in_prefix(frame, data, minutes)
        rest.append(
            Windows(
                whole.x[keep],
                whole.y[keep],
                whole.groups[keep],
                len(tail),
                table_digest(tail.reset_index(drop=True)),
                whole.minutes[keep],
            )
        )
    return windows_of(heads, data, classes), rest


def _minute(frame: pd.DataFrame) -> np.ndarray:
    """Each row's minute since its household's first row."""
    return frame.groupby("household", sort=False).cumcount().to_numpy()


def _in_prefix(frame: pd.DataFrame, data: DataSpec, minutes: int) -> np.ndarray:
    """Which of a table's windows (in :func:`_windows` order) end, label row included,
    within each household's first ``minutes`` rows."""
    reach = data.window - 1 + data.horizon
    marks = []
    for _, rows in frame.groupby("household", sort=False):
        starts = np.arange(0, len(rows) - reach, data.stride)
        marks.append(starts + reach < minutes)
    return np.concatenate(marks)


def cut_spans(frames: list[pd.DataFrame], starts: np.ndarray, minutes: int) -> list[pd.DataFrame]:
    """Each simulated table's rows ``starts[i] .. starts[i] + minutes - 1`` (minutes since
    its first row), for every household.

    A span is row for row the whole table there (the simulator still computes the whole
    scenario: its draws are vectorised per day and its thermal and air states run from
    the first minute); the loop keeps, trains on and counts only the span's rows."""
    cut = []
    for frame, start in zip(frames, starts, strict=True):
        minute = _minute(frame)
        keep = (minute >= start) & (minute < start + minutes)
        cut.append(frame[keep].reset_index(drop=True))
    return cut
