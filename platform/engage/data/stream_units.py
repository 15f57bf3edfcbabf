"""One unit of a streamed data set: read, checked, windowed; and the streaming statistics.

A unit (:mod:`engage.data.stream_plan`) holds whole groups, so it is checked and windowed
exactly as the in-memory path checks and windows the whole table (after the same row
operators, :func:`unit_rows`), with the plan's global cut times: its windows are the in-memory windows of its groups, in the same order, and
none crosses a group or a split boundary. :func:`scan_unit` is one step of the streaming
pass over the data: the training rows' feature moments, the windows per split, the labels
seen and the content digest; :func:`merge_moments` combines the moments of all units into
the statistics the in-memory path computes on the whole training split.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engage.data.checks import validate_frame
from engage.data.fingerprint import table_digest
from engage.data.preprocess import apply_rows, build_operators
from engage.data.simulator import fill_dropouts
from engage.data.sources import key_columns
from engage.data.stream_plan import StreamPlan, read_columns
from engage.data.windowing import SPLITS, Normalization, _group_bounds, sample_starts


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (per column), combinable across units."""

    n: int
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        """The moments of ``values`` (rows along axis 0), in float64."""
        rows = values.astype(np.float64)
        mean = rows.mean(axis=0) if len(rows) else np.zeros(rows.shape[1:])
        return cls(len(rows), mean, ((rows - mean) ** 2).sum(axis=0))

    def std(self) -> np.ndarray:
        """Population standard deviation (``numpy.std``'s default)."""
        return np.sqrt(self.m2 / max(self.n, 1))


def merge_moments(parts: list[Moments]) -> Moments:
    """Chan's pairwise combination: the moments of all the rows of ``parts`` together."""
    total = parts[0]
    for part in parts[1:]:
        n = total.n + part.n
        if n == 0:
            continue
        delta = part.mean - total.mean
        mean = total.mean + delta * (part.n / n)
        m2 = total.m2 + part.m2 + delta**2 * (total.n * part.n / n)
        total = Moments(n, mean, m2)
    return total


def normalization_of(moments: Moments) -> Normalization:
    """The :class:`Normalization` the in-memory path fits on the same rows (zero std -> 1)."""
    std = moments.std()
    std[std == 0] = 1.0
    return Normalization(mean=moments.mean.astype(np.float32), std=std.astype(np.float32))


def read_unit(plan: StreamPlan, unit: int) -> pd.DataFrame:
    """The validated table of unit ``unit``: its shards' needed columns, sorted by group, time.

    Raises
    ------
    DataError
        As :func:`engage.data.validate_frame`, the message naming the unit's shards.
    """
    spec = plan.spec
    time, group = key_columns(spec)
    columns = list(dict.fromkeys([time, *([group] if group else []), *spec.features, spec.target]))
    paths = [Path(plan.files[i]) for i in plan.units[unit]]
    frames = [read_columns(p, spec.source.type, columns) for p in paths]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if plan.fill_dropouts:  # a unit holds whole households: the in-memory source's fill
        frame = fill_dropouts(frame, group)
    names = ", ".join(p.name for p in paths)
    return validate_frame(frame, spec, f"{plan.origin} (shards {names})")


@dataclass(frozen=True)
class UnitWindows:
    """The windows of one unit: features, the first row of each split's windows, labels."""

    features: np.ndarray  # float32 (rows, n_features), not normalised
    starts: list[np.ndarray]  # first-row index of each split's windows
    labels: np.ndarray  # the target column, as validated
    split_of: np.ndarray  # 0, 1, 2: the split of each row
    reach: int  # rows from a window's first row to its label row


def unit_windows(plan: StreamPlan, frame: pd.DataFrame) -> UnitWindows:
    """Where the windows of a validated unit table start, split by the plan's cut times."""
    spec = plan.spec
    time, group = key_columns(spec)
    times = frame[time].to_numpy(dtype="datetime64[ns]")
    split_of = np.searchsorted(np.array(plan.cuts), times, side="right")
    starts = sample_starts(_group_bounds(frame, group), split_of, spec)
    return UnitWindows(
        features=frame[list(spec.features)].to_numpy(dtype=np.float32),
        starts=starts,
        labels=frame[spec.target].to_numpy(),
        split_of=split_of,
        reach=spec.window - 1 + spec.horizon,
    )


def window_rows(
    w: UnitWindows, starts: np.ndarray, norm: Normalization | None, window: int
) -> np.ndarray:
    """The windows starting at ``starts``, ``(n, window, n_features)`` float32, normalised."""
    index = starts[:, None] + np.arange(window)[None, :]
    x = w.features[index]
    return x if norm is None else norm.apply(x)


def unit_rows(plan: StreamPlan, frame: pd.DataFrame) -> pd.DataFrame:
    """A validated unit table after the spec's row operators (``resample``), as in memory.

    A unit holds whole groups, and row operators work group by group, so the unit's rows
    are those of its groups in the in-memory table.
    """
    return apply_rows(frame, build_operators(plan.spec.preprocess), plan.spec)


def iter_split(
    plan: StreamPlan, unit: int, split: str, norm: Normalization | None, rows: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The ``split`` windows of unit ``unit`` and their raw labels, ``rows`` at a time.

    The windows are those of the unit's rows after the row operators, normalised by
    ``norm``; window operators are the caller's.
    """
    w = unit_windows(plan, unit_rows(plan, read_unit(plan, unit)))
    starts = w.starts[SPLITS.index(split)]
    for lo in range(0, len(starts), rows):
        part = starts[lo : lo + rows]
        yield window_rows(w, part, norm, plan.spec.window), w.labels[part + w.reach]


@dataclass(frozen=True)
class UnitScan:
    """What the streaming pass learns from one unit."""

    moments: Moments  # of the training rows' features
    counts: tuple[int, int, int]  # windows in train, val, test
    labels: np.ndarray  # distinct target values (classification) or empty
    train_labels: np.ndarray  # distinct labels of the training windows (classification)
    target: Moments | None  # of the training windows' labels (regression)
    digest: str
    rows: int


def scan_unit(w: UnitWindows, frame: pd.DataFrame, task: str) -> UnitScan:
    """The statistics of one unit's windows (see :class:`UnitScan`)."""
    train_labels = w.labels[w.starts[0] + w.reach]
    regression = task == "regression"
    return UnitScan(
        moments=Moments.of(w.features[w.split_of == 0]),
        counts=tuple(len(s) for s in w.starts),
        labels=np.empty(0) if regression else np.unique(w.labels),
        train_labels=np.empty(0) if regression else np.unique(train_labels),
        target=Moments.of(train_labels.astype(np.float32)[:, None]) if regression else None,
        digest=table_digest(frame),
        rows=len(frame),
    )
