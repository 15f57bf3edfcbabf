"""Sources and the schema checks every source's table goes through."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engage.data import (
    SOURCES,
    DataSource,
    get_source,
    load_frame,
    prepare,
    register_source,
    sources,
    validate_frame,
)
from engage.errors import DataError
from engage.registry import Registry
from engage.spec.models import DataSpec

from ._builders import clean_table, file_spec, synthetic_spec, write


@pytest.fixture(params=["csv", "parquet"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _line(kind: str, row: int) -> str:
    """What a message says about data row ``row``: CSV adds the file line."""
    return f"row {row} (file line {row + 1})" if kind == "csv" else f"row {row}"


def _prepare_error(frame: pd.DataFrame, folder: Path, kind: str, **spec) -> str:
    write(frame, folder, kind)
    with pytest.raises(DataError) as caught:
        prepare(file_spec(f"data.{kind}", kind, **spec), folder)
    return str(caught.value)


def test_registry_holds_every_spec_source_type() -> None:
    assert set(SOURCES) == {"synthetic", "simulation", "csv", "parquet"}
    for name, cls in SOURCES.items():
        assert issubclass(cls, DataSource)
        assert cls.name == name
        assert cls.__doc__


def test_unknown_source_lists_the_valid_ones() -> None:
    with pytest.raises(DataError) as caught:
        get_source("sql")

    assert "'sql'" in str(caught.value)
    assert "csv, parquet, simulation, synthetic" in str(caught.value)


def test_a_second_source_under_a_taken_name_is_refused() -> None:
    existing = SOURCES.get("csv")

    class AnotherCsv(DataSource):
        """A second class that claims the name ``csv``."""

        name = "csv"

        def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
            return pd.DataFrame()

    with pytest.raises(ValueError, match="data source 'csv' is already registered"):
        register_source(AnotherCsv)

    assert SOURCES.get("csv") is existing


def test_a_new_source_is_one_class_and_one_decorator(monkeypatch: pytest.MonkeyPatch) -> None:
    registry: Registry[type[DataSource]] = Registry("data source", DataError)
    for _, cls in SOURCES.items():
        registry.add(cls)
    monkeypatch.setattr(sources, "SOURCES", registry)

    @register_source
    class Constant(DataSource):
        """Three rows of one value (only for this test)."""

        name = "constant"

        def load(self, spec: DataSpec, base_dir: Path) -> pd.DataFrame:
            return pd.DataFrame({"x": [1.0, 1.0, 1.0]})

    frame = get_source("constant").load(synthetic_spec(), Path("."))

    assert frame["x"].tolist() == [1.0, 1.0, 1.0]
    assert registry.names() == ["constant", "csv", "parquet", "simulation", "synthetic"]
    assert "constant" not in SOURCES


def test_synthetic_source_uses_the_spec_parameters() -> None:
    spec = synthetic_spec(source={"type": "synthetic", "households": 2, "days": 1, "seed": 5})

    frame = load_frame(spec, Path("."))

    assert len(frame) == 2 * 1440
    assert set(frame["household"]) == {"h00", "h01"}


def test_file_is_read_relative_to_base_dir(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    write(table, tmp_path, kind)

    data = prepare(file_spec(f"data.{kind}", kind), tmp_path)

    assert len(data.frame) == len(table)
    assert data.frame.columns.tolist() == ["time", "site", "x1", "x2", "label"]
    assert data.fingerprint.source == str((tmp_path / f"data.{kind}").resolve())
    assert data.classes == (0, 1)


def test_absolute_path_and_no_group_make_one_series(tmp_path: Path, kind: str) -> None:
    path = write(clean_table(groups=("a",)).drop(columns="site"), tmp_path, kind)
    spec = file_spec(path, kind, source={"type": kind, "path": str(path), "timestamp": "time"})

    data = prepare(spec, Path("/"))

    assert data.frame.columns.tolist() == ["time", "x1", "x2", "label"]
    assert len(data.train) + len(data.val) + len(data.test) > 0


def test_missing_file_names_the_path(tmp_path: Path, kind: str) -> None:
    with pytest.raises(DataError) as caught:
        load_frame(file_spec("nope/absent." + kind, kind), tmp_path)

    assert str(tmp_path / "nope" / f"absent.{kind}") in str(caught.value)
    assert "does not exist" in str(caught.value)


def test_missing_column_lists_the_present_ones(tmp_path: Path, kind: str) -> None:
    message = _prepare_error(clean_table().drop(columns="x2"), tmp_path, kind)

    assert "missing column(s) 'x2'" in message
    assert "present: 'time', 'site', 'x1', 'label'" in message


def test_non_numeric_feature_names_column_row_and_value(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table["x2"] = table["x2"].astype(str)
    table.loc[[16, 40], "x2"] = "abc"

    message = _prepare_error(table, tmp_path, kind)

    assert f"column 'x2' is not numeric: {_line(kind, 17)} has 'abc' (2 rows in all)" in message


@pytest.mark.parametrize(("value", "word"), [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_non_finite_feature_names_column_and_row(tmp_path: Path, kind: str, value, word) -> None:
    table = clean_table()
    table.loc[[16, 29, 70], "x1"] = value

    message = _prepare_error(table, tmp_path, kind)

    assert f"column 'x1' has {word} at {_line(kind, 17)} (3 rows in all)" in message


def test_missing_target_label_names_the_row(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table["label"] = np.where(table["label"] == 1, "yes", "no").astype(object)
    table.loc[8, "label"] = None

    message = _prepare_error(table, tmp_path, kind)

    assert f"column 'label' has no label at {_line(kind, 9)}" in message


def test_regression_target_must_be_numeric(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table["label"] = np.where(table["label"] == 1, "yes", "no")

    message = _prepare_error(table, tmp_path, kind, task="regression")

    assert f"column 'label' is not numeric: {_line(kind, 1)} has " in message


def test_unparseable_timestamp_names_row_and_value(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table.loc[16, "time"] = "not a time"

    message = _prepare_error(table, tmp_path, kind)

    assert f"column 'time' has an unparseable time at {_line(kind, 17)}: 'not a time'" in message


def test_numeric_timestamps_are_refused(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table["time"] = np.arange(len(table))

    message = _prepare_error(table, tmp_path, kind)

    assert "column 'time' holds numbers, not times" in message


def test_duplicate_timestamp_in_a_group_names_both_rows(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table.loc[17, "time"] = table.loc[16, "time"]

    message = _prepare_error(table, tmp_path, kind)

    assert "duplicate timestamp 2026-01-05 00:16:00 in group 'a'" in message
    assert f"{_line(kind, 17)} and {_line(kind, 18)}" in message


def test_same_time_in_two_groups_is_not_a_duplicate(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    assert (table["time"][table["site"] == "a"].to_numpy() == table["time"][60:].to_numpy()).all()

    write(table, tmp_path, kind)
    data = prepare(file_spec(f"data.{kind}", kind), tmp_path)

    assert len(data.frame) == 120


def test_too_few_rows_names_the_group_and_the_numbers(tmp_path: Path, kind: str) -> None:
    table = pd.concat([clean_table(groups=("a",)), clean_table(6, groups=("b",))])

    message = _prepare_error(table, tmp_path, kind, window=5, horizon=2)

    assert "group 'b' has 6 rows, fewer than window + horizon = 5 + 2 = 7" in message


def test_header_only_table_is_refused(tmp_path: Path, kind: str) -> None:
    message = _prepare_error(clean_table().iloc[:0], tmp_path, kind)

    assert "the table has no data rows" in message


def test_missing_group_id_names_the_row(tmp_path: Path, kind: str) -> None:
    table = clean_table()
    table.loc[4, "site"] = None

    message = _prepare_error(table, tmp_path, kind)

    assert f"column 'site' (the group) is empty at {_line(kind, 5)}" in message


def test_validate_sorts_by_group_then_time_and_parses_times() -> None:
    table = clean_table().iloc[::-1].reset_index(drop=True)
    spec = file_spec("unused.parquet", "parquet")

    out = validate_frame(table, spec, "memory")

    assert out["time"].dtype == np.dtype("datetime64[ns]")
    assert out["site"].tolist() == ["a"] * 60 + ["b"] * 60
    assert out["time"].is_monotonic_increasing is False  # two groups restart the clock
    assert out[out["site"] == "a"]["time"].is_monotonic_increasing


def test_zone_aware_times_become_utc(tmp_path: Path) -> None:
    table = clean_table(groups=("a",)).drop(columns="site")
    table["time"] = pd.to_datetime(table["time"]).dt.tz_localize("Europe/Berlin").astype(str)
    spec = file_spec("unused.csv", "csv", source={"type": "csv", "path": "x", "timestamp": "time"})

    out = validate_frame(table, spec, "memory")

    assert out["time"].iloc[0] == pd.Timestamp("2026-01-04 23:00:00")
