"""Streaming ingest: a training split larger than memory, read shard by shard on Ray Data.

:func:`prepare_stream` is the data stage of a streamed source. It plans the shards
(:mod:`engage.data.stream_plan`), then makes one streaming pass over the units on the
driver, one unit in memory at a time: the training rows' standardisation statistics, the
windows per split, the class labels, the content digest, and a bounded, evenly spaced
sample of every split (about :data:`EVAL_BYTES` of windows each, at least
:data:`EVAL_MIN_WINDOWS`). Validation and test are scored on that sample; it is the whole
split whenever the split is that small. The training split itself is never materialised: the train stage
turns :class:`StreamedTrain` into a Ray Dataset (:func:`train_dataset`) that each Ray Train
worker reads as its dataset shard.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engage.data.fingerprint import DatasetFingerprint
from engage.data.sources import key_columns
from engage.data.stream_plan import StreamPlan, plan_stream
from engage.data.stream_units import (
    UnitScan,
    iter_split,
    merge_moments,
    normalization_of,
    read_unit,
    scan_unit,
    unit_windows,
    window_rows,
)
from engage.data.windowing import SPLITS, Normalization, Split, _check_classes, _check_split
from engage.spec.models import DataSpec

EVAL_BYTES = 32 * 2**20
"""About the most bytes of windows kept in memory per split (val and test are scored on them)."""
EVAL_MIN_WINDOWS = 2_000
"""The fewest windows kept per split, however large a window is."""

BLOCK_WINDOWS = 4096
"""Windows per block a streaming reader emits (bounds a reader's memory beyond its unit)."""
BLOCK_BYTES = 8 * 2**20
"""Ray Data's largest block for a streamed split (a worker prefetches a few of them)."""


@dataclass(frozen=True)
class StreamedTrain:
    """The training split as a stream: what the train stage needs to build its Ray Dataset.

    Attributes
    ----------
    plan : StreamPlan
        The shards and their units.
    normalization : Normalization or None
        Applied to every window read.
    classes : tuple or None
        Sorted class labels (labels are encoded as their index).
    n_train : int
        Training windows over all units.
    target_mean, target_std : float
        The training windows' label statistics (regression; 0 and 1 otherwise).
    """

    plan: StreamPlan
    normalization: Normalization | None
    classes: tuple | None
    n_train: int
    target_mean: float = 0.0
    target_std: float = 1.0

    def encode(self, labels: np.ndarray) -> np.ndarray:
        """Raw target values as the model's labels: class indices or float32 values."""
        if self.classes is None:
            return labels.astype(np.float32)
        return np.searchsorted(np.array(self.classes), labels).astype(np.int64)

    def blocks(self, unit: int) -> Iterator[dict[str, np.ndarray]]:
        """The training windows of ``unit`` in canonical order, as ``{"x", "y"}`` blocks."""
        for x, y in iter_split(self.plan, unit, "train", self.normalization, BLOCK_WINDOWS):
            yield {"x": x, "y": self.encode(y)}


@dataclass(frozen=True)
class StreamedData:
    """What :func:`prepare_stream` hands the data stage (see :class:`PreparedData`)."""

    splits: dict[str, Split]  # evenly spaced samples, about EVAL_BYTES each
    classes: tuple | None
    normalization: Normalization | None
    frame: pd.DataFrame  # the first unit's table: the schema and a preview for tracking
    fingerprint: DatasetFingerprint
    stream: StreamedTrain


def _every(plan: StreamPlan) -> list[int]:
    """Keep every k-th window of each split so that about EVAL_BYTES remain (from sizes)."""
    spec, fractions = plan.spec, plan.spec.split
    keep = max(EVAL_MIN_WINDOWS, EVAL_BYTES // (spec.window * len(spec.features) * 4))
    k = []
    for name in SPLITS:
        estimate = plan.rows * getattr(fractions, name) / spec.stride
        k.append(max(1, math.ceil(estimate / keep)))
    return k


def _scan(plan: StreamPlan) -> tuple[list[UnitScan], list[list[tuple]], pd.DataFrame]:
    """One pass over the units: per-unit statistics and the raw sample windows of each split."""
    time, _ = key_columns(plan.spec)
    every, seen = _every(plan), [0, 0, 0]
    scans: list[UnitScan] = []
    samples: list[list[tuple]] = [[] for _ in SPLITS]
    preview = None
    for unit in range(len(plan.units)):
        frame = read_unit(plan, unit)
        preview = frame.head(1000) if preview is None else preview
        w = unit_windows(plan, frame)
        scans.append(scan_unit(w, frame, plan.spec.task))
        times = frame[time].to_numpy(dtype="datetime64[ns]")
        for k, starts in enumerate(w.starts):
            keep = starts[(seen[k] + np.arange(len(starts))) % every[k] == 0]
            seen[k] += len(starts)
            x = window_rows(w, keep, None, plan.spec.window)
            samples[k].append((x, w.labels[keep + w.reach], times[keep + w.reach]))
    return scans, samples, preview


def _fingerprint(
    plan: StreamPlan, scans: list[UnitScan], frame: pd.DataFrame
) -> DatasetFingerprint:
    """Name, source, rows, schema, generator parameters and a digest over the units' digests."""
    digest = hashlib.sha256()
    for scan in scans:
        digest.update(scan.digest.encode())
    return DatasetFingerprint(
        name=plan.name,
        source=plan.origin,
        digest=digest.hexdigest(),
        rows=sum(s.rows for s in scans),
        schema={str(c): str(t) for c, t in frame.dtypes.items()},
        params=plan.params,
    )


def prepare_stream(spec: DataSpec, base_dir: Path) -> StreamedData:
    """Plan a streamed source and make the streaming pass over it (one unit at a time).

    Raises
    ------
    DataError
        A glob that matches nothing, an unreadable shard, a shard of another schema (each
        naming the file and the column), bad values (naming the unit's shards, column and
        row), a split without windows, or a train split with one class.
    """
    plan = plan_stream(spec, base_dir)
    scans, samples, frame = _scan(plan)
    counts = [sum(s.counts[k] for s in scans) for k in range(len(SPLITS))]
    for name, n in zip(SPLITS, counts, strict=True):
        _check_split(name, n, spec, *plan.cuts)
    norm = normalization_of(merge_moments([s.moments for s in scans])) if spec.normalize else None
    classes = None
    if spec.task == "classification":
        classes = tuple(np.unique(np.concatenate([s.labels for s in scans])).tolist())
    target = merge_moments([s.target for s in scans]) if spec.task == "regression" else None
    stream = StreamedTrain(
        plan, norm, classes, counts[0],
        *((float(target.mean[0]), float(target.std()[0] or 1.0)) if target else (0.0, 1.0)),
    )  # fmt: skip
    splits = {name: _split(parts, stream) for name, parts in zip(SPLITS, samples, strict=True)}
    if classes is not None:
        _check_classes(stream.encode(np.concatenate([s.train_labels for s in scans])), classes)
    return StreamedData(splits, classes, norm, frame, _fingerprint(plan, scans, frame), stream)


def _split(parts: list[tuple], stream: StreamedTrain) -> Split:
    """One split's sample windows, normalised in place (as ``Normalization.apply`` would)."""
    x = np.concatenate([p[0] for p in parts])
    y = stream.encode(np.concatenate([p[1] for p in parts]))
    times = np.concatenate([p[2] for p in parts]).astype("datetime64[ns]")
    parts.clear()  # the raw pieces go before the next split is built
    norm = stream.normalization
    if norm is not None:  # float32 in place: the same values, without three more copies
        x -= norm.mean
        x /= norm.std
    return Split(x=x, y=y, times=times)


def train_dataset(stream: StreamedTrain) -> Any:
    """The training split as a lazy Ray Dataset of ``{"x", "y"}`` blocks, one read per unit.

    Each unit is read, checked, normalised and windowed by a Ray Data task; blocks come
    in canonical order when the dataset runs with ``preserve_order`` (the train stage sets
    it), so :func:`engage.data.batch_order.shuffled_batches` gives the in-memory batches.
    """
    import ray.data  # only here: importing engage.data never imports Ray

    units = ray.data.from_items(
        [{"unit": i} for i in range(len(stream.plan.units))],
        override_num_blocks=len(stream.plan.units),
    )
    dataset = units.map_batches(_UnitReader(stream), batch_size=1, batch_format="numpy")
    # Ray Data's 128 MiB default would coalesce the readers' blocks into blocks a worker
    # then holds (and prefetches) whole; small blocks keep a worker's memory flat.
    dataset.context.target_max_block_size = BLOCK_BYTES
    return dataset


class _UnitReader:
    """Ray Data's map over unit ids: yields each unit's training windows block by block."""

    def __init__(self, stream: StreamedTrain) -> None:
        self.stream = stream

    def __call__(self, batch: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        for unit in batch["unit"].tolist():
            yield from self.stream.blocks(unit)
