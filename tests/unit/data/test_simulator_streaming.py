"""A simulation with shards streams (issue 17): written once, planned as its shard folder,
each unit's dropouts filled as the in-memory source fills them; no Ray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydantic
import pytest
import yaml

from engage.data import prepare
from engage.data.simulator import slice_note, validation_slice
from engage.data.sources import SIMULATION_NAME
from engage.data.stream_plan import plan_stream, should_stream
from engage.spec.models import DataSpec

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = {"dropout_rate": 0.05, "household_size": 3}


def _spec(streaming: object = True, **source: object) -> DataSpec:
    shards = {"dir": "sim", "households_per_shard": 2, "days_per_shard": 1}
    return DataSpec.model_validate(
        {
            "source": {
                "type": "simulation",
                "households": 5,
                "days": 2,
                "seed": 4,
                "scenario": SCENARIO,
                "shards": shards,
                **source,
            },
            "features": ["temperature", "humidity", "co2", "motion", "power"],
            "target": "occupied",
            "task": "classification",
            "window": 30,
            "stride": 15,
            "streaming": streaming,
            "shuffle_buffer": 10_000,
        }
    )


def test_the_plan_is_the_shard_folder_in_household_units(tmp_path: Path) -> None:
    plan = plan_stream(_spec(), tmp_path)

    names = [Path(f).name for f in plan.files]
    assert names == sorted(p.name for p in (tmp_path / "sim").glob("part-*.parquet"))
    assert len(names) == 3 * 2  # 3 shards of households x 2 days
    # A unit is one shard's households over both days: the two day-shards together.
    assert [[names[i][:13] for i in unit] for unit in plan.units] == [
        ["part-h0000000"] * 2, ["part-h0000002"] * 2, ["part-h0000004"] * 2
    ]  # fmt: skip
    assert plan.rows == 5 * 2 * 1440
    assert plan.origin == str((tmp_path / "sim").resolve())
    assert plan.fill_dropouts
    assert plan.name == SIMULATION_NAME
    assert plan.params["scenario"] == SCENARIO


def test_the_stream_gives_the_in_memory_windows_with_dropouts_filled(tmp_path: Path) -> None:
    memory = prepare(_spec(streaming=False), tmp_path)
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sim").glob("part-*")}
    streamed = prepare(_spec(), tmp_path)

    assert memory.stream is None
    assert streamed.stream is not None
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sim").glob("part-*")} == written
    assert memory.frame["co2"].notna().all()  # the shards hold dropouts; both paths fill them
    stream = streamed.stream
    blocks = [b for unit in range(len(stream.plan.units)) for b in stream.blocks(unit)]
    x = np.concatenate([b["x"] for b in blocks])
    y = np.concatenate([b["y"] for b in blocks])
    assert stream.n_train == len(memory.train.y) == len(y)
    np.testing.assert_allclose(x, memory.train.x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y, memory.train.y)
    np.testing.assert_allclose(streamed.normalization.mean, memory.normalization.mean, rtol=1e-5)
    np.testing.assert_array_equal(streamed.test.y, memory.test.y)  # small: the whole split
    assert streamed.fingerprint.name == SIMULATION_NAME
    assert streamed.fingerprint.rows == len(memory.frame)
    assert streamed.fingerprint.params == memory.fingerprint.params


def test_auto_streams_a_simulation_above_the_threshold(tmp_path: Path) -> None:
    assert not should_stream(_spec(streaming="auto"), tmp_path)  # under 512 MiB on disk
    assert should_stream(_spec(streaming="auto", seed=5).model_copy(
        update={"streaming_threshold_mb": 0.01}), tmp_path)  # fmt: skip
    assert not should_stream(_spec(streaming="auto", shards=None), tmp_path)


def test_streaming_true_needs_shards_on_a_simulation() -> None:
    with pytest.raises(pydantic.ValidationError, match="not a simulation without shards"):
        _spec(shards=None)
    with pytest.raises(pydantic.ValidationError, match="not 'synthetic'"):
        DataSpec.model_validate(
            {
                "source": {"type": "synthetic"},
                "features": ["co2"],
                "target": "occupied",
                "task": "classification",
                "streaming": True,
            }
        )


def test_the_large_spec_streams_and_validate_checks_a_slice_in_memory() -> None:
    raw = yaml.safe_load((ROOT / "pipelines" / "simulation_large.yaml").read_text())
    data = DataSpec.model_validate(raw["data"])
    sliced = validation_slice(data)

    assert data.streaming is True
    assert data.source.shards is not None
    assert sliced.source.shards is None
    assert sliced.source.households == 2
    assert not should_stream(sliced, ROOT / "pipelines")  # nothing is written to validate
    assert "streams the training split from them" in slice_note(sliced, data, 5760)
