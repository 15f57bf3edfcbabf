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
state (statistics merged across blocks) and run in the Ray Data readers on the CPU up to
the first augmentation; the worker runs the rest on each block as it arrives, drawing per
chunk of the whole split and per epoch (:func:`epoch_blocks`), so every epoch's batches
equal the in-memory ones.
An operator whose fit needs every training window at once (``clip`` by ``quantile``) is
refused, naming its field.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
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
AUGMENT_CONFIG = "engage.augment"
"""The key of a streamed split's per-epoch augmentation in its Ray Dataset's context
(``DataContext.get_config``): the workers read it from their shard and run it on every
block with the epoch's draws (:func:`epoch_blocks`)."""
STREAM_CONFIG = "engage.stream"
"""The key of the :class:`StreamedTrain` in its Ray Dataset's context, from which
:class:`engage.data.stream_ingest.StreamIngest` builds each worker's dataset."""
SPAN_CONFIG = "engage.span"
"""The key of a worker's dataset's span (:func:`rank_span`) in its context; None: the
dataset is the whole split (or Ray Data's streaming split of it)."""


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
        The window operators fitted in the streaming passes: the readers run them on every
        block up to the first augmentation, the workers the rest (:attr:`augment`).
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

    @property
    def augment(self) -> FittedPreprocess | None:
        """The steps a worker runs on every block it reads, with the epoch's draws: the first
        augmentation and every step after it (None without augmentation)."""
        if self.preprocess is None or not self.preprocess.augments:
            return None
        return self.preprocess.split_for_cache()[1]

    def units_in(self, span: tuple[int, int] | None = None) -> list[int]:
        """The units holding training windows ``[lo, hi)`` of the split (all for None)."""
        if span is None:
            return list(range(len(self.plan.units)))
        lo, hi = span
        ends = [*self.offsets[1:], self.n_train]
        return [
            u for u, (a, b) in enumerate(zip(self.offsets, ends, strict=True)) if a < hi and lo < b
        ]

    def blocks(
        self, unit: int, span: tuple[int, int] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """The training windows of ``unit`` in canonical order, as ``{"x", "y", "i"}`` blocks.

        With window operators, ``x`` is computed on this process's CPU: the whole model
        input without augmentation, else the fitted operators before the first augmentation
        (:meth:`FittedPreprocess.split_for_cache`), which :func:`epoch_blocks` completes
        with the epoch's draws where the block is trained on. ``i`` is each window's index
        in the whole split (where its augmentation draws come from). With ``span``, only
        the windows whose index is in ``[lo, hi)`` (one worker's share, :func:`rank_span`).
        """
        at = self.offsets[unit] if self.offsets else 0
        lo, hi = (0, self.n_train) if span is None else span
        steps = self.preprocess
        if steps is not None and steps.augments:
            steps = steps.split_for_cache()[0]
        for x, y in iter_split(self.plan, unit, "train", self.normalization, BLOCK_WINDOWS):
            a, b = max(lo, at) - at, min(hi, at + len(y)) - at  # the block's part in the span
            if a < b:
                part = (
                    x[a:b]
                    if steps is None or not steps.steps
                    else steps.transform(x[a:b], False)[0]
                )
                i = np.arange(at + a, at + b, dtype=np.int64)
                yield {"x": part, "y": self.encode(y[a:b]), "i": i}
            at += len(y)
            if at >= hi:
                break

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


def rank_span(n: int, world: int, rank: int, buffer: int) -> tuple[int, int]:
    """The windows ``[lo, hi)`` of a split of ``n`` that worker ``rank`` of ``world`` reads.

    In memory, a worker trains on positions ``[rank * n // world, (rank + 1) * n // world)``
    of the epoch's order (:func:`engage.data.batch_order.epoch_order`), which permutes
    chunks of ``buffer`` windows: the worker needs every chunk those positions fall in,
    whole, to draw the same permutation. ``lo`` is thus a multiple of ``buffer`` and
    neighbouring workers' spans share at most one chunk (all of a split within one buffer).
    """
    per = n // world
    if per == 0:
        return 0, 0
    first, end = rank * per, (rank + 1) * per
    return first // buffer * buffer, min(n, -(-end // buffer) * buffer)


def train_dataset(
    stream: StreamedTrain, span: tuple[int, int] | None = None, reader_cpus: float | None = None
) -> Any:
    """The training split as a lazy Ray Dataset of ``{"x", "y", "i"}`` blocks, one read per unit.

    Each unit is read, checked, normalised, windowed and preprocessed (the fitted window
    operators of ``stream.preprocess`` up to the first augmentation, on the CPU) by a Ray
    Data task; blocks come in canonical order when the dataset runs with ``preserve_order``
    (the train stage sets it), so :func:`epoch_blocks` (the epoch's augmentation, found in
    the dataset's context under :data:`AUGMENT_CONFIG`) then
    :func:`engage.data.batch_order.shuffled_batches` give the in-memory batches.

    With ``span`` (:func:`rank_span`), only the units and windows of that range: one
    worker's dataset (:class:`engage.data.stream_ingest.StreamIngest`), whose context
    holds the span under :data:`SPAN_CONFIG`. With ``reader_cpus``, its reads run one at a
    time, each reserving that many CPUs (Ray Data's default: as many one-CPU reads at once
    as its budget allows).
    """
    import ray.data  # only here: importing engage.data never imports Ray

    units = stream.units_in(span)
    items = ray.data.from_items(
        [{"unit": i} for i in units], override_num_blocks=max(1, len(units))
    )
    limits: dict[str, Any] = {}
    if reader_cpus is not None:
        limits = {"num_cpus": reader_cpus, "compute": ray.data.TaskPoolStrategy(size=1)}
    reader = _UnitReader(stream, span)
    dataset = items.map_batches(reader, batch_size=1, batch_format="numpy", **limits)
    # Ray Data's 128 MiB default would coalesce the readers' blocks into blocks a worker
    # then holds (and prefetches) whole; small blocks keep a worker's memory flat.
    dataset.context.target_max_block_size = BLOCK_BYTES
    # Ray Train iterates the shard once per epoch without telling the readers which epoch:
    # the augmentation travels with the dataset to the workers, which run it on arrival.
    dataset.context.set_config(AUGMENT_CONFIG, stream.augment)
    dataset.context.set_config(STREAM_CONFIG, stream)
    dataset.context.set_config(SPAN_CONFIG, span)
    return dataset


class _UnitReader:
    """Ray Data's map over unit ids: yields each unit's training windows block by block."""

    def __init__(self, stream: StreamedTrain, span: tuple[int, int] | None = None) -> None:
        self.stream = stream
        self.span = span

    def __call__(self, batch: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        for unit in batch["unit"].tolist():
            yield from self.stream.blocks(unit, self.span)


def epoch_blocks(
    blocks: Iterable[Mapping[str, torch.Tensor]],
    augment: FittedPreprocess | None,
    epoch: int,
    total: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(x, y)`` of each block a worker reads, augmented with epoch ``epoch``'s draws.

    The readers stop before the first augmentation (:meth:`StreamedTrain.blocks`); here
    ``augment`` (:attr:`StreamedTrain.augment`) runs on each block's windows on the CPU,
    drawing per chunk of the whole split from the block's indices ``i``, exactly as the
    in-memory path augments the whole split at the start of the epoch: the same windows for
    the same seed and epoch, new ones every epoch, with nothing held beyond the block.

    Parameters
    ----------
    blocks : iterable of mappings
        ``{"x", "y", "i"}`` tensors as Ray Data hands them (``i`` is only read when
        augmenting; a block may join runs of windows that are not contiguous in the split).
    augment : FittedPreprocess or None
        None: the blocks are the model inputs as they are.
    epoch : int
        The 1-based epoch whose draws to take.
    total : int
        Windows in the whole training split.
    """
    import torch

    for block in blocks:
        x, y = block["x"], block["y"]
        if augment is not None and len(y):
            index = block["i"].cpu().numpy()
            source = x.cpu().numpy()
            cuts = [0, *(np.flatnonzero(np.diff(index) != 1) + 1).tolist(), len(index)]
            runs = [
                augment.transform(
                    source[lo:hi], train=True, start=int(index[lo]), total=total, epoch=epoch
                )[0]
                for lo, hi in itertools.pairwise(cuts)
            ]
            x = torch.from_numpy(runs[0] if len(runs) == 1 else np.concatenate(runs)).to(x.device)
        yield x, y
