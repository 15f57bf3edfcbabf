"""The ``simulation`` source: spec validation, loading through the registry, fingerprints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pydantic
import pytest

from engage.data import load_frame, prepare
from engage.data.fingerprint import fingerprint
from engage.data.simulator import simulate
from engage.data.sources import SIMULATION_NAME, describe_origin, key_columns
from engage.spec.models import DataSpec


def _spec(**source: object) -> DataSpec:
    return DataSpec.model_validate(
        {
            "source": {"type": "simulation", "households": 2, "days": 2, **source},
            "features": ["temperature", "humidity", "co2", "motion", "power", "light"],
            "target": "occupied",
            "task": "classification",
            "window": 30,
            "stride": 15,
        }
    )


def test_spec_checks_scenario_names_and_ranges() -> None:
    assert _spec(scenario={"insulation": 0.9}).source.scenario == {"insulation": 0.9}
    with pytest.raises(pydantic.ValidationError, match=r"unknown scenario parameter.*'insulaton'"):
        _spec(scenario={"insulaton": 0.9})
    with pytest.raises(pydantic.ValidationError, match=r"'fault_rate' = 2.0 is outside its range"):
        _spec(scenario={"fault_rate": 2.0})


def test_load_is_the_simulation_with_dropouts_filled(tmp_path: Path) -> None:
    spec = _spec(scenario={"dropout_rate": 0.05}, seed=3)
    raw = simulate({"dropout_rate": 0.05}, households=2, days=2, seed=3)

    frame = load_frame(spec, tmp_path)

    assert raw["co2"].isna().any()
    assert not frame.isna().to_numpy().any()
    kept = raw["co2"].notna()
    np.testing.assert_array_equal(frame.loc[kept, "co2"], raw.loc[kept, "co2"])
    assert (frame["fault"] == raw["fault"]).all()
    unfilled = load_frame(
        _spec(scenario={"dropout_rate": 0.05}, seed=3, fill_dropouts=False), tmp_path
    )
    assert unfilled["co2"].isna().sum() == raw["co2"].isna().sum()


def test_prepare_and_fingerprint_name_the_simulation(tmp_path: Path) -> None:
    spec = _spec(scenario={"household_size": 3})

    data = prepare(spec, tmp_path)

    assert key_columns(spec) == ("timestamp", "household")
    assert describe_origin(spec, tmp_path) == "simulation"
    assert data.fingerprint == fingerprint(data.frame, spec, tmp_path)
    assert data.fingerprint.name == SIMULATION_NAME
    assert data.fingerprint.source == "simulation"
    assert data.fingerprint.params["scenario"] == {"household_size": 3}
    assert len(data.train.x) > 0


def test_a_source_with_shards_writes_them_once_and_reads_them_back(tmp_path: Path) -> None:
    spec = _spec(seed=2, shards={"dir": "shards", "households_per_shard": 1})

    first = load_frame(spec, tmp_path)
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "shards").glob("part-*")}
    again = load_frame(spec, tmp_path)

    assert len(written) == 2
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "shards").glob("part-*")} == written
    pd.testing.assert_frame_equal(first, again)
    # The first shard is simulate() of its households (later shards: their own blocks).
    alone = simulate(None, households=1, days=2, seed=2)
    pd.testing.assert_frame_equal(first.iloc[: len(alone)], alone)
    other = load_frame(_spec(seed=3, shards={"dir": "shards", "households_per_shard": 1}), tmp_path)
    assert not other["co2"].equals(first["co2"])  # another seed rewrites the folder
