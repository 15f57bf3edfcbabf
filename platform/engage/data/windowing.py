"""Windows over a validated table, split by time so that no sample sees the future.

Two global cut times divide the table's overall time range by the split fractions: train
is ``t < t1``, val ``t1 <= t < t2``, test ``t >= t2``. A sample is ``window`` consecutive
rows of one group and is labelled with the target ``horizon`` rows after its last row; it
belongs to a split only if its first row and its label row both fall in that split, so no
window straddles a cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from engage.data.sources import key_columns
from engage.errors import DataError
from engage.spec.models import DataSpec, SplitSpec

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Split:
    """The samples of one split.

    Attributes
    ----------
    x : numpy.ndarray
        float32, shape ``(n, window, n_features)``.
    y : numpy.ndarray
        int64 class index (classification) or float32 (regression), shape ``(n,)``.
    times : numpy.ndarray
        datetime64[ns] time of each sample's label row, shape ``(n,)``.
    """

    x: np.ndarray
    y: np.ndarray
    times: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Normalization:
    """Per-feature standardisation fitted on the train split's rows only.

    Attributes
    ----------
    mean : numpy.ndarray
        float32, shape ``(n_features,)``.
    std : numpy.ndarray
        float32, shape ``(n_features,)``; a zero std is replaced by 1.
    """

    mean: np.ndarray
    std: np.ndarray

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Standardise ``x`` (last axis = features) as float32."""
        return ((x - self.mean) / self.std).astype(np.float32)


def cut_times(times: np.ndarray, split: SplitSpec) -> tuple[np.datetime64, np.datetime64]:
    """The two cut times ``t1 < t2`` that divide the overall time range by fraction."""
    lo, hi = times.min(), times.max()
    span = (hi - lo).astype(np.int64)
    t1 = lo + np.timedelta64(round(span * split.train), "ns")
    t2 = lo + np.timedelta64(round(span * (split.train + split.val)), "ns")
    return t1, t2


def encode_target(values: pd.Series, task: str) -> tuple[np.ndarray, tuple | None]:
    """Class indices over sorted labels (classification) or float32 values (regression)."""
    if task == "regression":
        return values.to_numpy(dtype=np.float32), None
    classes, codes = np.unique(values.to_numpy(), return_inverse=True)
    return codes.astype(np.int64), tuple(classes.tolist())


def fit_normalization(features: np.ndarray, train_rows: np.ndarray) -> Normalization:
    """Mean and std of the rows where ``train_rows`` is true (float64 sums, float32 result)."""
    rows = features[train_rows].astype(np.float64)
    std = rows.std(axis=0)
    std[std == 0] = 1.0
    return Normalization(mean=rows.mean(axis=0).astype(np.float32), std=std.astype(np.float32))


def _group_bounds(frame: pd.DataFrame, group: str | None) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` of each group in a table sorted by group."""
    if group is None:
        return [(0, len(frame))]
    ids = pd.factorize(frame[group])[0]
    edges = np.flatnonzero(np.diff(ids)) + 1
    cuts = [0, *edges.tolist(), len(frame)]
    return list(pairwise(cuts))


def sample_starts(
    bounds: list[tuple[int, int]], split_of: np.ndarray, spec: DataSpec
) -> list[np.ndarray]:
    """First-row indices of the samples of each split, in group then time order."""
    reach = spec.window - 1 + spec.horizon
    chosen: list[list[np.ndarray]] = [[] for _ in SPLITS]
    for lo, hi in bounds:
        starts = np.arange(lo, hi - reach, spec.stride)
        first, label = split_of[starts], split_of[starts + reach]
        for k in range(len(SPLITS)):
            chosen[k].append(starts[(first == k) & (label == k)])
    return [np.concatenate(parts) if parts else np.empty(0, np.int64) for parts in chosen]


def _check_split(name: str, n: int, spec: DataSpec, t1: np.datetime64, t2: np.datetime64) -> None:
    if n == 0:
        t1, t2 = pd.Timestamp(t1), pd.Timestamp(t2)
        spans = {"train": f"before {t1}", "val": f"from {t1} to {t2}", "test": f"from {t2} on"}
        raise DataError(
            f"the {name} split has no samples: no window of {spec.window} rows plus horizon "
            f"{spec.horizon} fits in its time span ({spans[name]})",
            hint=f"use a smaller data.window (now {spec.window}) or data.horizon, "
            f"a larger data.split.{name}, or more data",
        )


def _check_classes(y: np.ndarray, classes: tuple) -> None:
    present = np.unique(y)
    if len(present) < 2:
        raise DataError(
            f"the train split has only one class ({classes[present[0]]!r}); a classifier "
            "needs at least 2",
            hint="use more data or a larger data.split.train so train covers every class",
        )


def make_splits(
    frame: pd.DataFrame, spec: DataSpec
) -> tuple[dict[str, Split], tuple | None, Normalization | None]:
    """Window a validated table into time-ordered train, val and test splits.

    Parameters
    ----------
    frame : pandas.DataFrame
        A table returned by :func:`engage.data.validate_frame` (sorted by group, time).
    spec : DataSpec
        Features, target, task, window, horizon, stride, split fractions, normalize.

    Returns
    -------
    splits : dict[str, Split]
        ``"train"``, ``"val"`` and ``"test"``.
    classes : tuple or None
        Sorted class labels for classification; ``None`` for regression.
    normalization : Normalization or None
        The train-only statistics applied to every split, when ``spec.normalize``.

    Raises
    ------
    DataError
        If a split has no samples, or train holds fewer than 2 classes.
    """
    time, group = key_columns(spec)
    times = frame[time].to_numpy(dtype="datetime64[ns]")
    t1, t2 = cut_times(times, spec.split)
    split_of = np.searchsorted(np.array([t1, t2]), times, side="right")
    features = frame[list(spec.features)].to_numpy(dtype=np.float32)
    norm = fit_normalization(features, split_of == 0) if spec.normalize else None
    if norm is not None:
        features = norm.apply(features)
    y_all, classes = encode_target(frame[spec.target], spec.task)
    # (rows - window + 1, n_features, window): a view, so only chosen windows are copied.
    views = sliding_window_view(features, spec.window, axis=0)
    starts = sample_starts(_group_bounds(frame, group), split_of, spec)
    reach = spec.window - 1 + spec.horizon
    splits = {}
    for name, first in zip(SPLITS, starts, strict=True):
        _check_split(name, len(first), spec, t1, t2)
        x = np.ascontiguousarray(views[first].transpose(0, 2, 1))
        splits[name] = Split(x=x, y=y_all[first + reach], times=times[first + reach])
    if classes is not None:
        _check_classes(splits["train"].y, classes)
    return splits, classes, norm
