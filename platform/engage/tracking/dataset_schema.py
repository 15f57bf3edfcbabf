"""The schema MLflow records for a run's dataset input, found in one vectorised pass.

``mlflow.data.from_pandas(frame)`` infers each column's type and whether it may hold missing
values by calling Python functions on every value: about 0.6 s of CPU for the quickstart's
80,640 rows, on every run, and linear in the rows (a 10-million-row table: over a minute
before training starts). The same schema comes from MLflow's own inference on a few rows
(the first non-missing value of each column fixes its type when the column holds one kind
of value) plus ``isna`` over the whole frame for the missing values. A column that holds
several kinds of Python object is left to MLflow's inference on the whole frame, which
decides what such a column gets.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

_MIXED = "mixed"  # pandas.api.types.infer_dtype's prefix for columns of several kinds


def dataset_schema_json(frame: pd.DataFrame, source: str) -> str | None:
    """The ``schema`` field of ``mlflow.data.from_pandas(frame, source=source)``'s entity.

    The JSON ``{"mlflow_colspec": [...]}`` MLflow stores with a dataset input (each column's
    type, name and ``required``), equal to MLflow's own inference over every row; None where
    MLflow cannot infer a schema for the frame (it records none then either). ``source`` is
    the dataset's source, as given to ``from_pandas``.
    """
    import numpy as np
    from mlflow.types import ColSpec, Schema
    from pandas.api.types import infer_dtype

    objects = [c for c in frame.columns if frame[c].dtype == object]
    if any(infer_dtype(frame[c], skipna=True).startswith(_MIXED) for c in objects):
        return _as_json(_inferred_schema(frame, source))
    present = frame.notna().to_numpy()
    # Row 0 and each column's first non-missing row: what MLflow's per-value type inference
    # would find in a column of one kind of value.
    firsts = {int(np.argmax(column)) for column in present.T if column.any()}
    sample = _inferred_schema(frame.iloc[sorted({0} | firsts)] if len(frame) else frame, source)
    if sample is None:
        return None
    required = present.all(axis=0)
    return _as_json(
        Schema(
            [
                ColSpec(type=spec.type, name=spec.name, required=bool(required[j]))
                for j, spec in enumerate(sample.inputs)
            ]
        )
    )


def _inferred_schema(frame: pd.DataFrame, source: str):
    """MLflow's own inference of ``frame``'s schema (a ``Schema``), or None where it fails."""
    import mlflow.data

    # A digest is given so that MLflow does not hash the rows.
    return mlflow.data.from_pandas(frame, source=source, digest="-").schema


def _as_json(schema) -> str | None:
    """A ``Schema`` as the dataset entity stores it; None for None."""
    return json.dumps({"mlflow_colspec": schema.to_dict()}) if schema else None
