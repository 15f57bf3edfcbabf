"""Streaming ingest without Ray: the streamed windows, statistics and batches equal the
in-memory path's, and bad shards fail before training with a located error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from engage.data import prepare
from engage.data.batch_order import epoch_order, shuffled_batches
from engage.data.stream_plan import plan_stream, should_stream
from engage.data.stream_units import Moments, merge_moments
from engage.errors import DataError
from tests.unit.data._builders import clean_table, file_spec

GROUPS = tuple("abcdef")


def _shards(folder: Path, kind: str = "parquet", per_shard: int = 2) -> pd.DataFrame:
    """The clean table, ``per_shard`` whole groups per shard, plus one group split in two."""
    table = clean_table(rows_per_group=80, groups=GROUPS)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(GROUPS), per_shard):
        part = table[table.site.isin(GROUPS[i : i + per_shard])]
        if i == 0:  # group "a" spans two shards: they must form one unit
            part.iloc[:40].to_parquet(folder / "part-00a.parquet", index=False)
            part = part.iloc[40:]
        name = folder / f"part-{i:02d}.{kind}"
        part.to_parquet(name, index=False) if kind == "parquet" else part.to_csv(name, index=False)
    return table


def _both(tmp_path: Path, **overrides: object) -> tuple:
    _shards(tmp_path / "s")
    memory = prepare(file_spec("s", "parquet", streaming=False, **overrides), tmp_path)
    streamed = prepare(file_spec("s", "parquet", streaming=True, **overrides), tmp_path)
    return memory, streamed


def _stream_blocks(streamed, sizes=(7, 1, 33)) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The training windows as a Ray Data shard would yield them, in irregular blocks."""
    blocks = []
    for unit in range(len(streamed.stream.plan.units)):
        for block in streamed.stream.blocks(unit):
            x, y, i = torch.from_numpy(block["x"]), torch.from_numpy(block["y"]), 0
            while i < len(y):
                step = sizes[len(blocks) % len(sizes)]
                blocks.append((x[i : i + step], y[i : i + step]))
                i += step
    return blocks


def test_units_hold_whole_groups_in_group_order(tmp_path: Path) -> None:
    _shards(tmp_path / "s")

    plan = plan_stream(file_spec("s", "parquet"), tmp_path)

    names = [[Path(plan.files[i]).name for i in unit] for unit in plan.units]
    assert names == [
        ["part-00.parquet", "part-00a.parquet"],
        ["part-02.parquet"],
        ["part-04.parquet"],
    ]
    assert plan.rows == 80 * len(GROUPS)


def test_streaming_pass_statistics_equal_the_in_memory_ones(tmp_path: Path) -> None:
    memory, streamed = _both(tmp_path)

    np.testing.assert_allclose(streamed.normalization.mean, memory.normalization.mean, rtol=1e-6)
    np.testing.assert_allclose(streamed.normalization.std, memory.normalization.std, rtol=1e-6)
    assert streamed.classes == memory.classes
    assert streamed.train_windows == memory.train_windows


def test_moments_merge_to_the_whole_rows_moments() -> None:
    rows = np.random.default_rng(1).normal(5, 3, (1000, 3))

    merged = merge_moments([Moments.of(rows[a:b]) for a, b in [(0, 1), (1, 400), (400, 1000)]])

    np.testing.assert_allclose(merged.mean, rows.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(merged.std(), rows.std(axis=0), rtol=1e-12)


def test_small_val_and_test_are_the_whole_in_memory_splits(tmp_path: Path) -> None:
    memory, streamed = _both(tmp_path)

    for name in ("val", "test"):
        np.testing.assert_allclose(getattr(streamed, name).x, getattr(memory, name).x, atol=1e-6)
        np.testing.assert_array_equal(getattr(streamed, name).y, getattr(memory, name).y)
        np.testing.assert_array_equal(getattr(streamed, name).times, getattr(memory, name).times)


@pytest.mark.parametrize("buffer", [10_000, 64, 7])
def test_both_paths_give_the_same_batches_for_the_same_seed(tmp_path: Path, buffer: int) -> None:
    memory, streamed = _both(tmp_path)
    x, y = torch.from_numpy(memory.train.x), torch.from_numpy(memory.train.y)
    n, batch = len(y), 16

    for epoch in (1, 2):
        order = epoch_order(n, seed=3, epoch=epoch, buffer=buffer)
        expected = [(x[order[i : i + batch]], y[order[i : i + batch]]) for i in range(0, n, batch)]
        got = list(
            shuffled_batches(
                _stream_blocks(streamed), seed=3, epoch=epoch, buffer=buffer, batch=batch, limit=n
            )
        )

        assert len(got) == len(expected) == -(-n // batch)
        for (gx, gy), (ex, ey) in zip(got, expected, strict=True):
            torch.testing.assert_close(gx, ex, rtol=0, atol=1e-6)
            assert torch.equal(gy, ey)


def test_a_whole_split_buffer_is_the_loops_historical_permutation() -> None:
    g = torch.Generator().manual_seed(3 * 1_000_003 + 2)

    assert torch.equal(
        epoch_order(500, seed=3, epoch=2, buffer=500), torch.randperm(500, generator=g)
    )


def test_auto_streams_only_above_the_threshold(tmp_path: Path) -> None:
    _shards(tmp_path / "s")

    assert not should_stream(file_spec("s", "parquet"), tmp_path)
    assert should_stream(file_spec("s", "parquet", streaming_threshold_mb=1e-4), tmp_path)


def test_a_shard_with_another_column_type_names_the_file_and_column(tmp_path: Path) -> None:
    table = _shards(tmp_path / "s")
    bad = table[table.site == "f"].head(20).assign(x1=lambda f: f.x1.astype(str))
    bad.to_parquet(tmp_path / "s" / "part-99.parquet", index=False)

    with pytest.raises(
        DataError, match=r"shard .*part-99\.parquet: column 'x1' is string"
    ) as caught:
        prepare(file_spec("s", "parquet", streaming=True), tmp_path)
    assert caught.value.exit_code == 3


def test_an_unreadable_shard_names_the_file(tmp_path: Path) -> None:
    _shards(tmp_path / "s")
    (tmp_path / "s" / "part-50.parquet").write_bytes(b"PAR1 not really")

    with pytest.raises(DataError, match=r"data file .*part-50\.parquet is not readable as Parquet"):
        prepare(file_spec("s", "parquet", streaming=True), tmp_path)


def test_a_glob_matching_nothing_is_located(tmp_path: Path) -> None:
    _shards(tmp_path / "s")

    with pytest.raises(DataError, match=r"data glob .*/s/none-\*\.parquet matches no file"):
        prepare(file_spec("s/none-*.parquet", "parquet", streaming=True), tmp_path)


def test_a_missing_feature_column_is_named_before_any_read(tmp_path: Path) -> None:
    _shards(tmp_path / "s")

    with pytest.raises(DataError, match=r"no column 'x9'"):
        prepare(file_spec("s", "parquet", streaming=True, features=["x1", "x9"]), tmp_path)
