"""``engage validate`` on a simulation checks the spec and a tiny in-memory slice of the
simulation: it generates no data set and writes no shard."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engage.cli.main import app
from engage.data.simulator import validation_slice
from engage.spec import parse_spec

SPEC = """\
name: big-simulation
data:
  source:
    type: simulation
    households: 256
    days: 28
    seed: 17
    scenario: {insulation: 0.3, sensor_noise: 1.5}
    shards: {dir: shards, households_per_shard: 8}
  features: [temperature, co2, motion, power]
  target: occupied
  task: classification
  window: 30
  stride: 30
model: {name: mlp, params: {hidden: 8}}
train: {epochs: 1, batch_size: 512, num_workers: 2}
"""


def _validate(tmp_path: Path, text: str) -> tuple[int, str, float]:
    (tmp_path / "spec.yaml").write_text(text)
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "spec.yaml")], terminal_width=300)
    elapsed = time.perf_counter() - started
    return result.exit_code, " ".join((result.stdout + result.stderr).split()), elapsed


def test_validate_writes_no_shards_and_returns_quickly(tmp_path: Path) -> None:
    code, text, elapsed = _validate(tmp_path, SPEC)

    assert code == 0, text
    assert not (tmp_path / "shards").exists()
    assert list(tmp_path.rglob("*.parquet")) == []
    assert elapsed < 10.0  # the whole set is 10 million rows; the slice is a few thousand
    assert "data OK on a slice simulated in memory (2 of 256 households x 2 of 28 days, " in text
    assert "engage run simulates the whole set" in text


def test_validate_still_finds_a_column_the_simulator_does_not_make(tmp_path: Path) -> None:
    code, text, _ = _validate(tmp_path, SPEC.replace("motion, power]", "motion, powr]"))

    assert code != 0
    assert "powr" in text
    assert not (tmp_path / "shards").exists()


@pytest.mark.parametrize(
    ("households", "days", "window", "expected"),
    [(256, 28, 30, (2, 2)), (1, 1, 30, (1, 1)), (4, 60, 1440, (2, 20))],
)
def test_the_slice_is_small_but_long_enough_for_the_window(
    households: int, days: int, window: int, expected: tuple[int, int]
) -> None:
    text = SPEC.replace("households: 256", f"households: {households}")
    text = text.replace("days: 28", f"days: {days}").replace("window: 30", f"window: {window}")
    data = parse_spec(text).spec.data

    sliced = validation_slice(data)

    assert (sliced.source.households, sliced.source.days) == expected
    assert sliced.source.shards is None
    assert sliced.source.scenario == data.source.scenario


def test_a_generator_that_writes_nothing_is_validated_whole() -> None:
    text = (
        SPEC.split("    seed: 17")[0].replace("simulation", "synthetic")
        + SPEC.split("households_per_shard: 8}\n")[1]
    )

    assert validation_slice(parse_spec(text).spec.data) is None
