"""The dataset schema engage records equals MLflow's own inference over every row, quickly."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd
import pytest

from engage.tracking.dataset_schema import dataset_schema_json

SOURCE = "/data/sensors.csv"


def _mlflow_over_every_row(frame: pd.DataFrame) -> str | None:
    import mlflow.data

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(frame, source=SOURCE, digest="-").to_dict()["schema"]


def _ours(frame: pd.DataFrame) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return dataset_schema_json(frame, SOURCE)


N = 500
rng = np.random.default_rng(0)
FRAMES = {
    "sensor table": pd.DataFrame(
        {
            "timestamp": pd.date_range("2026-01-01", periods=N, freq="min"),
            "household": rng.choice(["a", "b"], N),
            "temperature": rng.normal(20, 1, N),
            "motion": rng.integers(0, 2, N),
            "occupied": rng.integers(0, 2, N).astype(bool),
        }
    ),
    "missing values late in each column": pd.DataFrame(
        {
            "timestamp": pd.Series(pd.date_range("2026-01-01", periods=N, freq="min")).where(
                np.arange(N) != N - 1
            ),
            "household": pd.Series(["a"] * N, dtype=object).where(np.arange(N) != N - 2),
            "temperature": np.where(np.arange(N) == N - 3, np.nan, 1.0),
            "f32": np.where(np.arange(N) == N - 4, np.nan, 1.0).astype(np.float32),
            "nullable": pd.array([1] * (N - 1) + [None], dtype="Int64"),
        }
    ),
    "missing values first": pd.DataFrame(
        {"s": [None, None, "x", "y"] * 5, "x": [np.nan, 1.0, 2.0, 3.0] * 5}
    ),
    "a column of several kinds": pd.DataFrame({"m": [1, "x", 2.5, None] * 5, "x": range(20)}),
    "an empty column of objects": pd.DataFrame({"e": [None] * 5, "x": range(5)}),
    "no rows": pd.DataFrame({"x": pd.Series([], dtype=float), "s": pd.Series([], dtype=object)}),
    "bytes and strings with a duplicate index": pd.DataFrame(
        {"b": [b"a", b"b", None], "s": ["x", None, "z"]}, index=[7, 7, 3]
    ),
}


@pytest.mark.parametrize("name", FRAMES)
def test_the_schema_equals_mlflows_inference_over_every_row(name: str) -> None:
    frame = FRAMES[name]

    assert _ours(frame) == _mlflow_over_every_row(frame)


def test_a_large_table_takes_a_fraction_of_mlflows_time() -> None:
    rows = 400_000
    frame = pd.DataFrame(
        {
            "timestamp": pd.date_range("2026-01-01", periods=rows, freq="s"),
            "household": np.where(np.arange(rows) % 2 == 0, "a", "b").astype(object),
            "temperature": rng.normal(20, 1, rows),
            "motion": rng.integers(0, 2, rows),
        }
    )

    start = time.process_time()
    ours = _ours(frame)
    ours_s = time.process_time() - start
    start = time.process_time()
    theirs = _mlflow_over_every_row(frame)
    theirs_s = time.process_time() - start

    assert ours == theirs
    assert ours_s < theirs_s / 5, (ours_s, theirs_s)
