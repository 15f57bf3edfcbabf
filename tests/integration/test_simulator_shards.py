"""A simulation written as Parquet shards by parallel Ray tasks, read back as a Ray Dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engage.data.simulator import COLUMNS, read_shards, simulate_block, write_shards
from engage.data.simulator.shards import MANIFEST


@pytest.mark.usefixtures("ray_local")
def test_ray_tasks_write_shards_that_read_back_as_one_dataset(tmp_path: Path) -> None:
    report = write_shards({"dropout_rate": 0.01}, tmp_path, households=6, days=2, seed=9,
                          households_per_shard=2, days_per_shard=1, max_in_flight=2)  # fmt: skip

    assert report.shards == 6
    assert report.rows == 6 * 2 * 1440
    dataset = read_shards(tmp_path)
    table = dataset.to_pandas()  # small here; a real set is streamed batch by batch
    assert len(table) == report.rows
    assert tuple(table.columns) == COLUMNS
    day0 = pd.to_datetime(table["timestamp"]) < pd.Timestamp("2026-01-06")
    first = table[(table["household"] == "h00") & day0]
    expected = simulate_block({"dropout_rate": 0.01}, seed=9, first_household=0, households=2,
                              first_day=0, days=1, total_households=6)  # fmt: skip
    pd.testing.assert_frame_equal(
        first.sort_values("timestamp").reset_index(drop=True),
        expected.iloc[:1440].reset_index(drop=True),
        check_dtype=False,
    )
    assert json.loads((tmp_path / MANIFEST).read_text())["rows"] == report.rows


@pytest.mark.usefixtures("ray_local")
def test_a_sharded_simulation_streams_to_the_trainer_as_its_in_memory_windows(
    tmp_path: Path,
) -> None:
    import numpy as np
    import ray.data

    from engage.data import prepare
    from engage.data.streaming import train_dataset
    from engage.spec.models import DataSpec

    def spec(streaming: bool) -> DataSpec:
        return DataSpec.model_validate({
            "source": {"type": "simulation", "households": 4, "days": 2, "seed": 6,
                       "scenario": {"dropout_rate": 0.05},
                       "shards": {"dir": "sim", "households_per_shard": 2}},
            "features": ["temperature", "co2", "motion", "power"], "target": "occupied",
            "task": "classification", "window": 30, "stride": 20, "streaming": streaming,
        })  # fmt: skip

    memory = prepare(spec(False), tmp_path)
    streamed = prepare(spec(True), tmp_path)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    rows = list(train_dataset(streamed.stream).iter_batches(batch_size=None))

    assert len(streamed.stream.plan.units) == 2  # what the trainer's Ray Data shard reads
    np.testing.assert_allclose(np.concatenate([b["x"] for b in rows]), memory.train.x, atol=1e-5)
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in rows]), memory.train.y)
