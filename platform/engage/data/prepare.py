"""The data stage in one call: read, check, window, split, normalise, fingerprint.

A csv or parquet source streams instead (``data.streaming``, :mod:`engage.data.streaming`):
its training split then stays on disk until Ray Train workers read it, preprocessed by
the Ray Data readers (``data.preprocess`` fitted in the streaming passes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from engage.data.checks import validate_frame
from engage.data.fingerprint import DatasetFingerprint, fingerprint
from engage.data.preprocess import (
    FittedPreprocess,
    apply_rows,
    build_operators,
    fit_preprocess,
    resolve_device,
)
from engage.data.sources import describe_origin, load_frame
from engage.data.stream_plan import should_stream
from engage.data.streaming import StreamedTrain, prepare_stream
from engage.data.windowing import Normalization, Split, make_splits
from engage.spec.models import DataSpec

if TYPE_CHECKING:
    import torch

    from engage.data.preprocess import Operator


@dataclass(frozen=True)
class PreparedData:
    """Everything the train stage needs from the data stage.

    Attributes
    ----------
    train, val, test : Split
        Windowed samples, split by time (train earliest).
    features : tuple[str, ...]
        Feature columns, in the order of the last axis of ``x``.
    target : str
        The target column.
    task : str
        ``"classification"`` or ``"regression"``.
    classes : tuple or None
        Sorted original class labels; ``y == i`` means ``classes[i]``. ``None`` for
        regression.
    normalization : Normalization or None
        Train-split statistics already applied to every split's ``x``; apply the same to
        serving inputs. ``None`` when ``spec.normalize`` is false.
    frame : pandas.DataFrame
        The validated table: timestamp, group (if any), feature and target columns under
        their original names, sorted by group then time.
    fingerprint : DatasetFingerprint
        Source, schema and content digest of ``frame``.
    preprocess : FittedPreprocess or None
        The window operators of ``spec.preprocess`` fitted on the train split; ``None``
        without any. Serving applies them after the normalisation.
    inputs : dict of str to numpy.ndarray, or None
        The model inputs of each split (its windows after ``preprocess``, augmented for
        train); ``None`` when there is no window operator (the inputs are ``split.x``).
        With a stream, those of the samples; the readers preprocess the training split.
    stream : StreamedTrain or None
        Set when the training split streams (``data.streaming``): the splits above are
        then evenly spaced samples of about ``EVAL_BYTES`` each and ``frame`` is a
        preview of the first unit (:mod:`engage.data.streaming`).
    """

    train: Split
    val: Split
    test: Split
    features: tuple[str, ...]
    target: str
    task: str
    classes: tuple | None
    normalization: Normalization | None
    frame: pd.DataFrame
    fingerprint: DatasetFingerprint
    preprocess: FittedPreprocess | None = None
    inputs: dict[str, np.ndarray] | None = None
    stream: StreamedTrain | None = None

    @property
    def n_classes(self) -> int | None:
        """Number of classes, or ``None`` for regression."""
        return None if self.classes is None else len(self.classes)

    @property
    def train_windows(self) -> int:
        """Windows in the whole training split (streamed or in memory)."""
        return len(self.train.y) if self.stream is None else self.stream.n_train

    def model_inputs(self, split: str) -> np.ndarray:
        """The windows the model is trained or scored on for ``split`` (train, val or test).

        ``split.x`` (raw, standardised) unless window preprocessing is declared; then its
        output, with augmentation on train only.
        """
        if self.inputs is None:
            return getattr(self, split).x
        return self.inputs[split]


def prepare(spec: DataSpec, base_dir: Path) -> PreparedData:
    """Read the data of ``spec``, check it, and window it into time-ordered splits.

    Parameters
    ----------
    spec : DataSpec
        The data section of the pipeline spec.
    base_dir : Path
        Folder that relative file paths are resolved against (the spec file's folder).

    Returns
    -------
    PreparedData
        Train, val and test splits with their metadata, the validated table and its
        fingerprint.

    Raises
    ------
    DataError
        For any problem with the data, naming the column and row where there is one.
    SpecError
        For a preprocessing step with bad parameters (``data.preprocess[i]...``), or
        ``preprocess_device: gpu`` on a machine without one.
    """
    base_dir = Path(base_dir)
    if should_stream(spec, base_dir):
        return _prepare_stream(spec, base_dir)
    ops = build_operators(spec.preprocess)  # before reading: a bad step fails fast
    windowed = any(op.level == "window" for op in ops)
    device = resolve_device(spec.preprocess_device) if windowed else None
    frame = validate_frame(load_frame(spec, base_dir), spec, describe_origin(spec, base_dir))
    splits, classes, norm = make_splits(apply_rows(frame, ops, spec), spec)
    fitted, inputs = _preprocess(ops, splits, device) if windowed else (None, None)
    return PreparedData(
        **splits,
        features=tuple(spec.features),
        target=spec.target,
        task=spec.task,
        classes=classes,
        normalization=norm,
        frame=frame,
        fingerprint=fingerprint(frame, spec, base_dir),
        preprocess=fitted,
        inputs=inputs,
    )


def _prepare_stream(spec: DataSpec, base_dir: Path) -> PreparedData:
    """The streamed data stage (:func:`engage.data.streaming.prepare_stream`)."""
    got = prepare_stream(spec, base_dir)
    return PreparedData(
        **got.splits,
        features=tuple(spec.features),
        target=spec.target,
        task=spec.task,
        classes=got.classes,
        normalization=got.normalization,
        frame=got.frame,
        fingerprint=got.fingerprint,
        preprocess=got.stream.preprocess,
        inputs=got.inputs,
        stream=got.stream,
    )


def _preprocess(
    ops: list[Operator], splits: dict, device: torch.device
) -> tuple[FittedPreprocess, dict[str, np.ndarray]]:
    """Fit the window operators on train, then transform every split on ``device``."""
    fitted = fit_preprocess(ops, splits["train"].x, device)
    inputs, notes = {}, list(fitted.notes)
    for name, split in splits.items():
        inputs[name], said = fitted.transform(split.x, train=name == "train", device=device)
        notes += [n for n in said if n not in notes]
    return replace(fitted, notes=tuple(notes)), inputs
