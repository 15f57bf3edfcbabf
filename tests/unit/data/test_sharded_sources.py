"""File sources over shards: a folder or a glob reads as one table; bad shards are located."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from engage.data import load_frame, prepare
from engage.errors import DataError
from tests.unit.data._builders import clean_table, file_spec


def _write(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)


def _shards(folder: Path, kind: str, n: int = 3) -> pd.DataFrame:
    """The clean table cut into ``n`` shards ``part-<i>.<kind>`` under ``folder``."""
    table = clean_table(rows_per_group=60, groups=tuple("abcd"))
    step = -(-len(table) // n)
    for i in range(n):
        _write(table.iloc[i * step : (i + 1) * step], folder / f"part-{i}.{kind}")
    return table


@pytest.mark.parametrize("kind", ["csv", "parquet"])
@pytest.mark.parametrize("pattern", ["shards", "shards/part-*.{kind}", "shards/part-[0-2].{kind}"])
def test_a_folder_or_a_glob_reads_as_the_whole_table(
    tmp_path: Path, kind: str, pattern: str
) -> None:
    table = _shards(tmp_path / "shards", kind)
    (tmp_path / "shards" / "notes.txt").write_text("not a shard")

    frame = load_frame(file_spec(pattern.format(kind=kind), kind), tmp_path)

    pd.testing.assert_frame_equal(frame, table.reset_index(drop=True), check_dtype=False)


def test_shards_prepare_like_the_single_file(tmp_path: Path) -> None:
    table = _shards(tmp_path / "shards", "parquet")
    _write(table, tmp_path / "whole.parquet")

    sharded = prepare(file_spec("shards", "parquet"), tmp_path)
    single = prepare(file_spec("whole.parquet", "parquet"), tmp_path)

    assert (sharded.train.x == single.train.x).all()
    assert sharded.fingerprint.digest == single.fingerprint.digest


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("shards/nothing-*.csv", "data glob {root}/shards/nothing-*.csv matches no file"),
        ("empty", "data folder {root}/empty holds no .csv file"),
        ("absent.csv", "data file {root}/absent.csv does not exist"),
    ],
)
def test_nothing_to_read_is_a_located_data_error(tmp_path: Path, path: str, message: str) -> None:
    _shards(tmp_path / "shards", "csv")
    (tmp_path / "empty").mkdir()

    with pytest.raises(DataError) as caught:
        load_frame(file_spec(path), tmp_path)

    assert message.format(root=tmp_path.resolve()) in str(caught.value)
    assert caught.value.exit_code == 3


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_shard_missing_a_column_names_the_file_and_column(tmp_path: Path, kind: str) -> None:
    table = _shards(tmp_path / "s", kind)
    _write(table.drop(columns="x2").head(10), tmp_path / "s" / f"part-9.{kind}")

    with pytest.raises(DataError, match=rf"shard .*part-9\.{kind}: no column 'x2'"):
        load_frame(file_spec("s", kind), tmp_path)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_shard_with_a_text_column_names_the_file_and_column(tmp_path: Path, kind: str) -> None:
    table = _shards(tmp_path / "s", kind)
    _write(table.head(5).assign(x1="warm"), tmp_path / "s" / f"part-9.{kind}")

    with pytest.raises(DataError, match=rf"shard .*part-9\.{kind}: column 'x1' is object"):
        load_frame(file_spec("s", kind), tmp_path)


def test_a_parquet_shard_of_another_type_is_refused(tmp_path: Path) -> None:
    table = _shards(tmp_path / "s", "parquet")
    _write(table.head(5).astype({"label": "float64"}), tmp_path / "s" / "part-9.parquet")

    with pytest.raises(DataError, match=r"part-9\.parquet: column 'label' is float64, but int64"):
        load_frame(file_spec("s", "parquet"), tmp_path)


def test_an_unreadable_shard_names_the_file(tmp_path: Path) -> None:
    _shards(tmp_path / "s", "parquet")
    (tmp_path / "s" / "part-5.parquet").write_bytes(b"PAR1 truncated")

    with pytest.raises(DataError, match=r"data file .*part-5\.parquet is not readable as Parquet"):
        load_frame(file_spec("s", "parquet"), tmp_path)
