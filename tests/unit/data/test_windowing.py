"""Windows, time split and normalisation: shapes, labels, no leakage, train-only statistics."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engage.data import make_splits, prepare, validate_frame
from engage.data.windowing import cut_times
from engage.errors import DataError

from ._builders import clean_table, file_spec, synthetic_spec

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def quickstart():
    return prepare(synthetic_spec(), Path("."))


def _validated(table: pd.DataFrame, **spec):
    spec = file_spec("unused.parquet", "parquet", **spec)
    return validate_frame(table, spec, "memory"), spec


def test_shapes_and_dtypes(quickstart) -> None:
    for name in SPLITS:
        split = getattr(quickstart, name)
        assert split.x.dtype == np.float32
        assert split.x.shape[1:] == (30, 5)
        assert split.y.dtype == np.int64
        assert split.times.dtype == np.dtype("datetime64[ns]")
        assert len(split.x) == len(split.y) == len(split.times) > 0
    assert quickstart.classes == (0, 1)
    assert quickstart.features == ("temperature", "humidity", "co2", "motion", "power")


def test_prepare_on_the_quickstart_size_is_fast() -> None:
    # CPU time, not wall: the claim is about the work, and a lane beside it can deschedule
    # this process for a second (a rehearsal at load 11 did: 1.003 s of wall).
    start = time.process_time()
    prepare(synthetic_spec(source={"type": "synthetic", "seed": 11}), Path("."))

    assert time.process_time() - start < 1.0


def test_no_sample_straddles_a_cut_and_splits_are_time_ordered(quickstart) -> None:
    window = np.timedelta64(29, "m")  # first row of a sample = label time - (window - 1)
    first = {n: getattr(quickstart, n).times - window for n in SPLITS}
    label = {n: getattr(quickstart, n).times for n in SPLITS}

    assert label["train"].max() < first["val"].min()
    assert label["val"].max() < first["test"].min()
    t1, t2 = cut_times(quickstart.frame["timestamp"].to_numpy(), synthetic_spec().split)
    assert label["train"].max() < t1 <= first["val"].min()
    assert label["val"].max() < t2 <= first["test"].min()


def test_each_sample_is_its_rows_and_the_label_horizon_rows_later() -> None:
    frame, spec = _validated(clean_table(100), window=4, horizon=2, stride=3, normalize=False)

    splits, _, _ = make_splits(frame, spec)

    train = splits["train"]
    # Group 'b' starts at frame row 100; its first sample starts there.
    rows = frame[["x1", "x2"]].to_numpy(dtype=np.float32)
    b_first = np.flatnonzero(train.x[:, 0, 0] == rows[100, 0])[0]
    np.testing.assert_array_equal(train.x[b_first], rows[100:104])
    assert train.y[b_first] == frame["label"].iloc[100 + 3 + 2]
    assert train.times[b_first] == frame["time"].iloc[105]
    assert train.x[1, 0, 0] == rows[3, 0]  # stride 3


def test_windows_never_span_two_groups() -> None:
    table = clean_table(60)
    table["x1"] = np.where(table["site"] == "a", 1.0, 2.0)
    frame, spec = _validated(table, window=6, normalize=False)

    splits, _, _ = make_splits(frame, spec)

    for name in SPLITS:
        x1 = splits[name].x[:, :, 0]
        assert (x1.min(axis=1) == x1.max(axis=1)).all()


def test_normalisation_uses_train_rows_only(quickstart) -> None:
    frame = quickstart.frame
    t1, _ = cut_times(frame["timestamp"].to_numpy(), synthetic_spec().split)
    train_rows = frame[frame["timestamp"] < t1][list(quickstart.features)].to_numpy()
    norm = quickstart.normalization

    np.testing.assert_allclose(norm.mean, train_rows.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.std, train_rows.std(0), rtol=1e-4)
    assert norm.mean.dtype == norm.std.dtype == np.float32
    assert abs(quickstart.train.x[..., 2].mean()) < 0.2


def test_changing_future_rows_leaves_the_statistics_alone() -> None:
    table = clean_table(100)
    frame, spec = _validated(table, window=5)
    _, _, before = make_splits(frame, spec)
    late = frame["time"] >= frame["time"].quantile(0.9)
    frame.loc[late, "x1"] = 1e6

    splits, _, after = make_splits(frame, spec)

    np.testing.assert_array_equal(before.mean, after.mean)
    np.testing.assert_array_equal(before.std, after.std)
    assert splits["test"].x[..., 0].max() > 1e3  # the change did reach the test split


def test_constant_feature_gets_unit_std_and_normalize_false_keeps_values() -> None:
    table = clean_table()
    table["x2"] = 3.0
    frame, spec = _validated(table)
    raw_frame, raw_spec = _validated(table, normalize=False)

    _, _, norm = make_splits(frame, spec)
    raw, _, none = make_splits(raw_frame, raw_spec)

    assert norm.std[1] == 1.0
    assert none is None
    assert (raw["train"].x[..., 1] == 3.0).all()


def test_string_classes_map_to_sorted_indices() -> None:
    table = clean_table()
    table["label"] = np.where(table["label"] == 1, "warm", "cold")
    frame, spec = _validated(table)

    splits, classes, _ = make_splits(frame, spec)

    assert classes == ("cold", "warm")
    expected = (frame["label"] == "warm").astype(int).to_numpy()
    assert set(np.unique(splits["train"].y)) == {0, 1}
    assert splits["train"].y[0] == expected[4]


def test_regression_target_is_float32() -> None:
    frame, spec = _validated(clean_table(), task="regression", target="x2", features=["x1"])

    splits, classes, _ = make_splits(frame, spec)

    val = splits["val"]
    label_row = frame.index[(frame["time"] == val.times[0]) & (frame["site"] == "a")][0]
    assert classes is None
    assert val.y.dtype == np.float32
    assert val.y[0] == np.float32(frame["x2"].iloc[label_row])


def test_empty_split_says_which_and_suggests_a_smaller_window() -> None:
    frame, spec = _validated(clean_table(), window=20)

    with pytest.raises(DataError) as caught:
        make_splits(frame, spec)

    assert "the val split has no samples" in str(caught.value)
    assert "smaller data.window (now 20)" in str(caught.value)


def test_one_class_in_train_is_an_error() -> None:
    table = clean_table(100)
    table["label"] = np.where(table.index % 100 < 80, 0, 1)
    frame, spec = _validated(table)

    with pytest.raises(DataError) as caught:
        make_splits(frame, spec)

    assert "train split has only one class (0)" in str(caught.value)
