"""``engage plan``: option parsing, bad input (one message, exit 2), and a whole plan printed
and saved with the calibration replaced by fixed figures (no timing, no Ray, no MLflow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engage.cli.main import app
from engage.train.scaling import (
    PlanInputError,
    parse_bandwidth,
    parse_duration,
    parse_workers,
    resolve_device,
)
from engage.train.scaling.calibrate import Calibration
from engage.train.scaling.model import StepProfile

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "pipelines" / "quickstart.yaml"


def test_bandwidth_units() -> None:
    assert parse_bandwidth("100Gbps") == pytest.approx(12.5e9)
    assert parse_bandwidth("12.5GB/s") == pytest.approx(12.5e9)
    assert parse_bandwidth("25 gbps") == pytest.approx(3.125e9)


def test_durations_and_worker_ranges() -> None:
    assert parse_duration("90m") == 5400
    assert parse_duration("2") == 7200  # bare number: hours
    assert parse_workers("1..256") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_workers("3..10") == [3, 4, 8, 10]
    assert parse_workers("1,2,8") == [1, 2, 8]


def test_device_profile_or_speed_factor() -> None:
    assert resolve_device("A100")[0].name == "a100"
    assert resolve_device("2.5") == (resolve_device("cpu")[0], 2.5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0..8"], "--workers '0..8' is not a worker range"),
        (["--workers", "8..2"], "--workers '8..2' is not a worker range"),
        (["--bandwidth", "fast"], "--bandwidth 'fast' is not a bandwidth"),
        (["--bandwidth", "-3Gbps"], "--bandwidth '-3Gbps' is not a bandwidth"),
        (["--device", "tpu9"], "unknown device profile 'tpu9'"),
        (["--device", "0"], "a speed factor must be > 0"),
        (["--deadline", "soon"], "--deadline 'soon' is not a duration"),
        (["--overlap", "1.5"], "--overlap must be in 0..1"),
        (["--scaling", "diagonal"], "--scaling must be weak or strong"),
    ],
)
def test_bad_option_is_one_message_and_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["plan", str(QUICKSTART), *args], terminal_width=200)

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "invalid plan option" in result.output
    assert "Traceback" not in result.output


def test_parse_errors_are_plan_input_errors() -> None:
    with pytest.raises(PlanInputError, match=r"use one of: .*a100"):
        resolve_device("tpu9")


FIXED = Calibration(
    step=StepProfile(2e-5, 1e-3, 0.3, 55_816.0),
    params=13_954,
    param_shapes=((64, 150), (64,), (64, 64), (64,), (2, 64), (2,)),
    flops_per_sample=63_744.0,
    batch=128,
    threads=1,
)


def test_a_whole_plan_is_printed_and_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engage.train.scaling.planner.calibrate", lambda job, batch: FIXED)
    args = ["plan", str(QUICKSTART), "--bandwidth", "100Gbps", "--device", "a100"]
    args += ["--deadline", "1h", "--no-track", "--output", str(tmp_path), "--samples", "10000000"]

    result = CliRunner().invoke(app, args, terminal_width=200)

    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "cheapest configuration that meets the deadline" in text
    assert "memory per worker at batch 128" in text
    assert "PowerSGD rank 1" in text
    assert "train.strategy auto, the spec's 2 worker(s) here: ddp:" in text
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [r["workers"] for r in plan["plan"]["rows"]] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert plan["sources"]["network"] == "given"
    assert plan["auto"]["strategy"] == "ddp"
    assert plan["auto"]["batch_size"] == 256
    assert (tmp_path / "plan.svg").read_text().startswith("<svg")
