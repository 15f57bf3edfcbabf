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

``data.preprocess`` streams too: row operators run on each unit's table (a unit holds
whole groups), window operators are fitted in one more streaming pass per operator with
state (statistics merged across blocks) and run in the Ray Data readers on the CPU, with
augmentation drawn per chunk of the whole split, so the batches equal the in-memory ones.
An operator whose fit needs every training window at once (``clip`` by ``quantile``) is
refused, naming its field.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from engage.data.fingerprint import DatasetFingerprint
from engage.data.preprocess import (
    FittedPreprocess,
    build_operators,
    check_streamable,
    fit_in_parts,
    resolve_device,
)
from engage.data.sources import key_columns
from engage.data.stream_plan import StreamPlan, plan_stream
from engage.data.stream_units import (
    UnitScan,
    iter_split,
    merge_moments,
    normalization_of,
    read_unit,
    scan_unit,
    unit_rows,
    unit_windows,
    window_rows,
)
from engage.data.windowing import SPLITS, Normalization, Split, _check_classes, _check_split
from engage.spec.models import DataSpec

if TYPE_CHECKING:
    import torch

    from engage.data.preprocess import Operator

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
    preprocess : FittedPreprocess or None
        The window operators fitted in the streaming passes, applied to every block read.
    offsets : tuple of int
        Index of each unit's first training window in the whole split (where its
        augmentation draws start).
    """

    plan: StreamPlan
    normalization: Normalization | None
    classes: tuple | None
    n_train: int
    target_mean: float = 0.0
    target_std: float = 1.0
    preprocess: FittedPreprocess | None = None
    offsets: tuple[int, ...] = ()

    def encode(self, labels: np.ndarray) -> np.ndarray:
        """Raw target values as the model's labels: class indices or float32 values."""
        if self.classes is None:
            return labels.astype(np.float32)
        return np.searchsorted(np.array(self.classes), labels).astype(np.int64)

    def blocks(self, unit: int) -> Iterator[dict[str, np.ndarray]]:
        """The training windows of ``unit`` in canonical order, as ``{"x", "y"}`` blocks.

        With window operators, ``x`` is the model input, computed on this process's CPU:
        the fitted operators and the augmentation the whole split's window gets in memory.
        """
        at = self.offsets[unit] if self.offsets else 0
        for x, y in iter_split(self.plan, unit, "train", self.normalization, BLOCK_WINDOWS):
            if self.preprocess is not None:
                x, _ = self.preprocess.transform(x, train=True, start=at, total=self.n_train)
            at += len(y)
            yield {"x": x, "y": self.encode(y)}

    def raw_windows(self) -> Iterator[np.ndarray]:
        """Every unit's training windows, normalised, before window operators (a pass)."""
        for unit in range(len(self.plan.units)):
            for x, _ in iter_split(self.plan, unit, "train", self.normalization, BLOCK_WINDOWS):
                yield x


@dataclass(frozen=True)
class StreamedData:
    """What :func:`prepare_stream` hands the data stage (see :class:`PreparedData`)."""

    splits: dict[str, Split]  # evenly spaced samples, about EVAL_BYTES each
    classes: tuple | None
    normalization: Normalization | None
    frame: pd.DataFrame  # the first unit's table: the schema and a preview for tracking
    fingerprint: DatasetFingerprint
    stream: StreamedTrain
    inputs: dict[str, np.ndarray] | None = None  # the samples after window operators


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
        raw = read_unit(plan, unit)  # the content digest and preview are of the source's rows
        preview = raw.head(1000) if preview is None else preview
        frame = unit_rows(plan, raw)
        w = unit_windows(plan, frame)
        scans.append(scan_unit(w, raw, plan.spec.task))
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

    With ``data.preprocess``, row operators run on each unit's table; window operators
    are fitted on the training split in one more pass per operator with state, then
    applied to the samples here and to every training block read (:meth:`StreamedTrain.blocks`).

    Raises
    ------
    DataError
        A glob that matches nothing, an unreadable shard, a shard of another schema (each
        naming the file and the column), bad values (naming the unit's shards, column and
        row), a split without windows, or a train split with one class.
    SpecError
        A preprocessing step with bad parameters or one that cannot fit on a stream
        (naming its field), or ``preprocess_device: gpu`` on a machine without one.
    """
    ops = build_operators(spec.preprocess)  # before reading: a bad step fails fast
    check_streamable(ops)
    windowed = any(op.level == "window" for op in ops)
    device = resolve_device(spec.preprocess_device) if windowed else None
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
        offsets=tuple(np.cumsum([0] + [s.counts[0] for s in scans[:-1]]).tolist()),
    )  # fmt: skip
    splits = {name: _split(parts, stream) for name, parts in zip(SPLITS, samples, strict=True)}
    if classes is not None:
        _check_classes(stream.encode(np.concatenate([s.train_labels for s in scans])), classes)
    stream, inputs = _preprocessed(ops, stream, splits, device) if windowed else (stream, None)
    fingerprint = _fingerprint(plan, scans, frame)
    return StreamedData(splits, classes, norm, frame, fingerprint, stream, inputs)


def _preprocessed(
    ops: list[Operator], stream: StreamedTrain, splits: dict[str, Split], device: torch.device
) -> tuple[StreamedTrain, dict[str, np.ndarray]]:
    """Fit the window operators on the stream (a pass each), then transform the samples.

    The Ray Data readers transform the training blocks on their CPU whatever
    ``preprocess_device`` says: the workers' GPUs stay with training, and augmentation
    then draws what the in-memory path draws on the CPU.
    """
    fitted = fit_in_parts(ops, stream.raw_windows, device)
    inputs, notes = {}, list(fitted.notes)
    for name, split in splits.items():
        inputs[name], said = fitted.transform(split.x, train=name == "train", device=device)
        notes += [n for n in said if n not in notes]
    if device.type != "cpu":
        notes.append("the streamed training split is preprocessed on the CPU by its readers")
    return replace(stream, preprocess=replace(fitted, notes=tuple(notes))), inputs


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

    Each unit is read, checked, normalised, windowed and preprocessed (the fitted window
    operators of ``stream.preprocess``, on the CPU) by a Ray Data task; blocks come
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
