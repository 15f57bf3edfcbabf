"""Spec checks of the job-kind sections: a ``tune`` space and metric checked when the spec
loads (so ``engage validate`` reports what ``engage run`` would), one kind section at most."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engage.cli.main import app
from engage.errors import SpecError
from engage.spec import load_spec, parse_spec
from engage.spec.checks import SECTION_KINDS, check_spec
from engage.spec.models import PipelineSpec

BASE = """\
name: tuned
data:
  source: {type: synthetic, households: 2, days: 2, seed: 1}
  features: [temperature, co2]
  target: occupied
  task: classification
  window: 10
  stride: 10
model: {name: mlp, params: {hidden: 8, layers: 1}}
train: {epochs: 3, batch_size: 32, num_workers: 1}
"""
TUNE = """\
tune:
  space:
    train.learning_rate: {type: uniform, low: 0.001, high: 0.01}
"""
FEDERATED = "federated: {rounds: 2}\n"
ADAPTIVE = "adaptive: {rounds: 1}\n"


def _validate(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["validate", str(path), "--no-data"], terminal_width=300)
    return result.exit_code, " ".join((result.stdout + result.stderr).split())


def test_validate_reports_a_bad_dotted_path_in_the_space_located_exit_2(
    write_spec: Callable[..., Path],
) -> None:
    path = write_spec(BASE + TUNE.replace("train.learning_rate", "train.lrr"))

    code, text = _validate(path)

    assert code == 2, text
    assert f"{path}:13: tune.space.train.lrr:" in text
    assert "train.lrr=0.001 is not a valid spec change" in text
    assert "unknown key" in text
    assert "learning_rate" in text  # the valid keys are listed
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("train.epochs: {type: int, low: 0, high: 4}", "expected >= 1"),
        ("model.params.hiden: {type: choice, values: [8, 16]}", "did you mean 'hidden'"),
        ("name: {type: choice, values: [a, b]}", "expected a field outside tune and name"),
        ("tune.num_samples: {type: int, low: 2, high: 4}", "expected a field outside tune"),
        ("federated.rounds: {type: int, low: 2, high: 4}", "got both federated and tune"),
    ],
)
def test_a_space_entry_the_spec_refuses_fails_the_load_at_its_line(entry: str, why: str) -> None:
    with pytest.raises(SpecError, match=why) as caught:
        parse_spec(BASE + "tune:\n  space:\n    " + entry + "\n", origin="tuned.yaml")

    assert "tuned.yaml:13: tune.space." in caught.value.message


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("{type: uniform, low: 0.2, high: 0.1}", "must be below high"),
        ("{type: loguniform, low: 0, high: 0.1}", "needs low > 0"),
        ("{type: choice, values: []}", "non-empty values"),
    ],
)
def test_validate_reports_a_malformed_range_located_exit_2(
    write_spec: Callable[..., Path], entry: str, why: str
) -> None:
    path = write_spec(BASE + "tune:\n  space:\n    train.learning_rate: " + entry + "\n")

    code, text = _validate(path)

    assert code == 2, text
    assert f"{path}:13: tune.space.train.learning_rate" in text
    assert why in text


def test_a_tune_metric_epochs_do_not_report_fails_the_load_with_the_valid_ones() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(BASE + TUNE + "  metric: test_accuracy\n", origin="tuned.yaml")

    message = caught.value.message
    assert "tuned.yaml:14: tune.metric: got 'test_accuracy'" in message
    assert "val_accuracy" in message


def test_a_sound_space_loads_and_a_trial_of_it_still_loads(write_spec) -> None:
    loaded = load_spec(write_spec(BASE + TUNE), ["train.learning_rate=0.005"])

    assert loaded.spec.tune is not None
    assert check_spec(loaded.spec) == []  # without the raw text: checked on its dump


@pytest.mark.parametrize(
    ("sections", "first", "second"),
    [
        (FEDERATED + TUNE, "federated", "tune"),
        (TUNE + ADAPTIVE, "tune", "adaptive"),
        (FEDERATED + ADAPTIVE, "federated", "adaptive"),
    ],
)
def test_two_kind_sections_are_refused_naming_both_and_the_kinds(
    write_spec: Callable[..., Path], sections: str, first: str, second: str
) -> None:
    path = write_spec(BASE + sections)

    code, text = _validate(path)

    assert code == 2, text
    assert f"{path}:" in text
    assert f"{second}: got both {first} and {second}" in text
    for section, kind in SECTION_KINDS:
        assert f"{kind} ({section}:)" in text
    assert "pipeline (none of them)" in text


def test_one_kind_section_is_accepted() -> None:
    spec = PipelineSpec.model_validate(
        {
            "name": "f",
            "data": {
                "source": {"type": "synthetic"},
                "features": ["co2"],
                "target": "occupied",
                "task": "classification",
            },
            "model": {"name": "mlp"},
            "federated": {"rounds": 2},
        }
    )

    assert check_spec(spec) == []
