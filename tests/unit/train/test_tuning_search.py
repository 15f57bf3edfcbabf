"""The tuning search space: dotted spec fields, checked like --set when the spec loads."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from engage.errors import SpecError
from engage.runtime.kinds import kind_of
from engage.spec import parse_spec
from engage.train.tuning.search import (
    corners,
    describe,
    epoch_metrics,
    max_epochs,
    objective,
    override_text,
    touches_data,
    trial_overrides,
    trial_spec,
)

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
tune:
  space:
"""


def _spec(space: str, extra: str = "", task: str = "classification"):
    text = BASE + space + extra
    if task != "classification":
        text = text.replace(
            "target: occupied\n  task: classification", f"target: power\n  task: {task}"
        )
    return parse_spec(text, origin="tuned.yaml")


@pytest.mark.parametrize("value", [1e-05, 0.001, 3, True, "adam", [16, 32], 2.5e20])
def test_an_override_text_gives_the_same_value_back_through_yaml(value) -> None:
    key, _, text = override_text("train.x", value).partition("=")

    assert key == "train.x"
    assert yaml.safe_load(text) == value


def test_numpy_scalars_become_plain_values() -> None:
    assert override_text("model.params.hidden", np.int64(32)) == "model.params.hidden=32"
    assert describe({"train.learning_rate": np.float64(0.000123456)}) == (
        "train.learning_rate=0.0001235"
    )


def test_a_trial_spec_is_the_spec_with_the_drawn_values() -> None:
    loaded = _spec("    train.learning_rate: {type: loguniform, low: 1.0e-4, high: 1.0e-2}\n")

    trial = trial_spec(loaded, {"train.learning_rate": 1e-05, "model.params.hidden": 64})

    assert trial.spec.train.learning_rate == pytest.approx(1e-05)
    assert trial.spec.model.params["hidden"] == 64
    assert trial.overrides == ("model.params.hidden=64", "train.learning_rate=1.0e-05")
    assert trial_overrides({"b": 1, "a": "x"}) == ["a=x", "b=1"]


def test_a_bad_path_in_the_space_is_the_set_error_located_at_its_entry() -> None:
    with pytest.raises(SpecError) as caught:
        _spec("    train.lrr: {type: uniform, low: 0.1, high: 0.2}\n")

    message = caught.value.message
    assert "tuned.yaml:13" in message
    assert "tune.space.train.lrr" in message
    assert "unknown key" in message
    assert "learning_rate" in message  # the valid keys are listed


def test_a_range_end_the_field_refuses_is_refused_before_any_run() -> None:
    with pytest.raises(SpecError) as caught:
        _spec("    train.epochs: {type: int, low: 0, high: 4}\n")

    assert "train.epochs=0" in caught.value.message
    assert "expected >= 1" in caught.value.message


def test_a_choice_of_an_unknown_builder_param_is_refused() -> None:
    with pytest.raises(SpecError, match="did you mean 'hidden'"):
        _spec("    model.params.hiden: {type: choice, values: [8, 16]}\n")


@pytest.mark.parametrize("key", ["tune.num_samples", "name"])
def test_the_space_may_not_change_the_search_itself(key: str) -> None:
    with pytest.raises(SpecError, match="expected a field outside tune and name"):
        _spec(f"    {key}: {{type: int, low: 2, high: 4}}\n")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("{type: uniform, low: 0.2, high: 0.1}", "must be below high"),
        ("{type: loguniform, low: 0, high: 0.1}", "needs low > 0"),
        ("{type: choice, values: []}", "non-empty values"),
        ("{type: int, low: 1.5, high: 4}", "whole-number"),
        ("{type: uniform, low: 0.1}", "needs both low and high"),
    ],
)
def test_a_malformed_range_is_a_located_spec_error(entry: str, why: str) -> None:
    with pytest.raises(SpecError, match=why) as caught:
        _spec(f"    train.learning_rate: {entry}\n")

    assert "tuned.yaml:13" in caught.value.message


def test_the_objective_defaults_to_val_loss_and_follows_the_metric_direction() -> None:
    space = "    train.learning_rate: {type: uniform, low: 0.001, high: 0.01}\n"

    assert objective(_spec(space)) == ("val_loss", "min")
    assert objective(_spec(space, "  metric: val_accuracy\n")) == ("val_accuracy", "max")
    assert objective(_spec(space, "  metric: val_f1\n  mode: min\n")) == ("val_f1", "min")


def test_a_metric_epochs_do_not_report_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(SpecError) as caught:
        _spec(
            "    train.learning_rate: {type: uniform, low: 0.001, high: 0.01}\n",
            "  metric: test_accuracy\n",
        )

    assert "tune.metric" in caught.value.message
    assert "val_accuracy" in caught.value.message
    assert epoch_metrics("regression") == ["train_loss", "val_loss", "val_mae", "val_rmse"]


def test_asha_max_t_and_data_dependence_follow_the_space() -> None:
    fixed = _spec("    train.learning_rate: {type: uniform, low: 0.001, high: 0.01}\n")
    ranged = _spec("    train.epochs: {type: choice, values: [2, 6, 4]}\n")

    assert max_epochs(fixed) == 3
    assert max_epochs(ranged) == 6
    assert corners(ranged.spec.tune.space["train.epochs"]) == [2, 6, 4]
    assert not touches_data(fixed.spec.tune.space)
    assert touches_data({"data.window": None})


def test_a_spec_with_a_tune_section_runs_as_the_tuning_kind() -> None:
    loaded = _spec("    train.learning_rate: {type: uniform, low: 0.001, high: 0.01}\n")

    assert kind_of(loaded.spec) == "tuning"
