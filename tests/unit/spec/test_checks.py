"""Semantic checks: registered model builders, their parameters, and gate metrics."""

from __future__ import annotations

import pytest

from engage.spec.checks import check_gate, check_model, check_spec
from engage.spec.locate import Problem
from engage.spec.models import PipelineSpec
from engage.train.builders import MODEL_BUILDERS
from engage.train.metrics import task_metrics


def make_spec(model=None, task="classification", gate=None) -> PipelineSpec:
    registration = {"model_name": "m", **({"gate": gate} if gate else {})}
    return PipelineSpec.model_validate(
        {
            "name": "p",
            "data": {
                "source": {"type": "synthetic"},
                "features": ["co2"],
                "target": "y",
                "task": task,
            },
            "model": model or {"name": "mlp"},
            "tracking": {"registration": registration},
        }
    )


def test_sound_spec_has_no_problems():
    gate = {"metric": "val_accuracy", "threshold": 0.5, "direction": "maximize"}

    assert check_spec(make_spec(gate=gate)) == []


@pytest.mark.parametrize("name", sorted(MODEL_BUILDERS))
def test_every_registered_builder_accepts_its_defaults(name):
    assert check_model(make_spec({"name": name})) == []


def test_unknown_model_lists_registered_names():
    [problem] = check_model(make_spec({"name": "transformer"}))

    assert problem == Problem(
        ("model", "name"), "got 'transformer'; expected a registered model: cnn1d, gru, mlp"
    )


@pytest.mark.parametrize(
    ("params", "path", "text"),
    [
        ({"hidden": -1}, ("model", "params", "hidden"), "got -1; expected >= 1"),
        ({"hidden": "big"}, ("model", "params", "hidden"), "got 'big'; expected an integer"),
        ({"dropout": 1.0}, ("model", "params", "dropout"), "got 1.0; expected < 1"),
        (
            {"hiden": 8},
            ("model", "params", "hiden"),
            "unknown key; did you mean 'hidden'? valid keys: dropout, hidden, layers",
        ),
    ],
)
def test_bad_model_params_are_located_at_the_param(params, path, text):
    assert check_model(make_spec({"name": "mlp", "params": params})) == [Problem(path, text)]


def test_params_are_checked_against_the_named_builder():
    [problem] = check_model(make_spec({"name": "cnn1d", "params": {"hidden": 8}}))

    assert problem.path == ("model", "params", "hidden")
    assert "channels" in problem.text


def test_no_gate_is_fine():
    assert check_gate(make_spec()) == []


def test_gate_metric_must_be_produced_by_the_task():
    gate = {"metric": "val_accuracy", "threshold": 0.1, "direction": "minimize"}

    [problem] = check_gate(make_spec(task="regression", gate=gate))

    assert problem.path == ("tracking", "registration", "gate", "metric")
    assert problem.text.startswith("got 'val_accuracy'; expected a metric the regression task")
    assert ", ".join(sorted(task_metrics("regression"))) in problem.text


@pytest.mark.parametrize(
    ("task", "metric", "wrong", "natural", "moves"),
    [
        ("classification", "val_accuracy", "minimize", "maximize", "increases"),
        ("regression", "val_mae", "maximize", "minimize", "decreases"),
        ("regression", "test_r2", "minimize", "maximize", "increases"),
    ],
)
def test_gate_direction_must_match_the_metric(task, metric, wrong, natural, moves):
    gate = {"metric": metric, "threshold": 0.5, "direction": wrong}

    [problem] = check_gate(make_spec(task=task, gate=gate))

    assert problem == Problem(
        ("tracking", "registration", "gate", "direction"),
        f"got '{wrong}'; expected '{natural}': {metric} improves as it {moves}",
    )
