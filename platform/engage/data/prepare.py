"""The data stage in one call: read, check, window, split, normalise, fingerprint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engage.data.checks import validate_frame
from engage.data.fingerprint import DatasetFingerprint, fingerprint
from engage.data.sources import describe_origin, load_frame
from engage.data.windowing import Normalization, Split, make_splits
from engage.spec.models import DataSpec


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

    @property
    def n_classes(self) -> int | None:
        """Number of classes, or ``None`` for regression."""
        return None if self.classes is None else len(self.classes)


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
    """
    base_dir = Path(base_dir)
    frame = validate_frame(load_frame(spec, base_dir), spec, describe_origin(spec, base_dir))
    splits, classes, norm = make_splits(frame, spec)
    return PreparedData(
        **splits,
        features=tuple(spec.features),
        target=spec.target,
        task=spec.task,
        classes=classes,
        normalization=norm,
        frame=frame,
        fingerprint=fingerprint(frame, spec, base_dir),
    )
