"""Shard layout and writing without Ray (the Ray path is tests/integration/test_simulator_shards.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engage.data.simulator import read_shards, simulate, simulate_block, write_shards
from engage.data.simulator.shards import MANIFEST, Block, plan


def test_plan_covers_every_household_and_day_once() -> None:
    blocks = plan(households=5, days=7, households_per_shard=2, days_per_shard=3)

    assert len(blocks) == 3 * 3
    cells = {(b.first_household + i, b.first_day + d) for b in blocks
             for i in range(b.households) for d in range(b.days)}  # fmt: skip
    assert cells == {(h, d) for h in range(5) for d in range(7)}
    assert [b.name for b in blocks] == sorted(b.name for b in blocks)
    assert plan(3, 4, 8, None) == [Block(0, 3, 0, 4)]


def test_plan_refuses_empty_sizes() -> None:
    with pytest.raises(ValueError, match="households_per_shard"):
        plan(households=4, days=2, households_per_shard=0, days_per_shard=None)


def test_write_shards_in_process_matches_the_blocks(tmp_path: Path) -> None:
    (tmp_path / "part-old.parquet").write_text("stale")

    report = write_shards({"household_size": 3}, tmp_path, households=3, days=2, seed=4,
                          households_per_shard=2, parallel=False)  # fmt: skip

    names = sorted(p.name for p in tmp_path.glob("part-*.parquet"))
    assert names == ["part-h0000000-d0000.parquet", "part-h0000002-d0000.parquet"]
    assert report.shards == 2
    assert report.rows == 3 * 2 * 1440
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["shards"] == names
    assert manifest["scenario"]["household_size"] == 3
    second = pd.read_parquet(tmp_path / names[1])
    expected = simulate_block({"household_size": 3}, seed=4, first_household=2, households=1,
                              first_day=0, days=2, total_households=3)  # fmt: skip
    pd.testing.assert_frame_equal(second, expected)
    first = pd.read_parquet(tmp_path / names[0])
    pd.testing.assert_frame_equal(
        first, simulate({"household_size": 3}, households=2, days=2, seed=4)
    )
    assert len(pd.read_parquet(tmp_path)) == report.rows  # the folder reads as one data set


def test_shards_of_one_simulation_share_ids_and_weather(tmp_path: Path) -> None:
    quiet = {"sensor_noise": 0.0}
    write_shards(quiet, tmp_path, households=2, days=2, seed=1, households_per_shard=1,
                 days_per_shard=1, parallel=False)  # fmt: skip
    whole = simulate(quiet, households=2, days=2, seed=1)
    later = pd.read_parquet(tmp_path / "part-h0000001-d0001.parquet")

    assert (later["household"] == "h01").all()
    assert later["timestamp"].iloc[0] == pd.Timestamp("2026-01-06")
    same_day = whole[(whole["household"] == "h01") & (whole["timestamp"] >= "2026-01-06")]
    assert (
        later["outdoor_temperature"].to_numpy() == same_day["outdoor_temperature"].to_numpy()
    ).all()


def test_read_shards_needs_a_finished_write(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=MANIFEST):
        read_shards(tmp_path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("pipelines/quickstart.yaml", "got a 'synthetic' source; expected type: simulation"),
        ("pipelines/missing.yaml", "no such file"),
    ],
)
def test_the_command_refuses_a_spec_without_shards(spec, message, capsys) -> None:
    from engage.data.simulator.__main__ import main

    root = Path(__file__).resolve().parents[3]

    assert main([str(root / spec)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
