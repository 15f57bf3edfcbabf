"""The pipeline's evaluate and register stages log the baseline and warn about a loser.

No Ray: the "trained" model is a freshly built one (target statistics fitted, weights
random), which is worse than repeating the last CO2 value, as the CO2 forecast of issue 13
was. The data are the built-in synthetic homes, whose CO2 sits in the hundreds of ppm.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from engage.events import Event, Reporter
from engage.runtime import stages
from engage.spec import parse_spec
from engage.train.baseline import WARNING_TAG
from engage.train.builders import ModelShape
from engage.train.evaluate import accumulate, finalize
from engage.train.loop import TrainJob, build_model
from engage.train.trainer import TrainOutcome

SPEC = """\
name: co2-forecast
data:
  source: {type: synthetic, households: 1, days: 3}
  features: [co2, temperature]
  target: co2
  task: regression
  window: 8
  horizon: 1
model: {name: mlp, params: {hidden: 8, layers: 1}}
train: {epochs: 1, num_workers: 1, batch_size: 64}
tracking:
  registration: {model_name: co2-forecast%s}
export: {formats: []}
"""


class _Keep:
    """A transport that keeps every event it is sent."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, events: list[Event], wait: bool = False) -> None:
        self.events.extend(events)


class _Run:
    """Records what the register stage asks of the tracked run."""

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.registered: list[str] = []

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags |= tags

    def register(self, name: str, seq: int, tags: dict[str, str]) -> int:
        self.registered.append(name)
        return 2

    def log_model(self, *args: Any, **kwargs: Any) -> int:
        return 1

    def __getattr__(self, name: str) -> Any:  # log_dict, log_artifacts: nothing to keep
        return lambda *args, **kwargs: None


@pytest.fixture(scope="module")
def untrained() -> tuple[Any, Any, TrainOutcome]:
    loaded = parse_spec(SPEC % "")
    data = stages.prepare_data(loaded)
    spec = loaded.spec
    model = build_model(
        TrainJob(
            spec.train,
            spec.model,
            "regression",
            ModelShape(*data.train.x.shape[1:], 1),
            None,
            None,
            "",
        )
    )
    model.fit(torch.from_numpy(data.train.y))
    val = accumulate(
        model, torch.from_numpy(data.val.x), torch.from_numpy(data.val.y), "regression", 1, 512
    )
    state = {"model": model.state_dict(), "metrics": finalize(val, "regression", "val")}
    return loaded, data, TrainOutcome("", state, 0.0)


def test_evaluate_logs_the_baseline_beside_the_model_and_warns(untrained) -> None:
    loaded, data, outcome = untrained
    keep = _Keep()

    _, final = stages.evaluate(loaded, data, outcome, Reporter(keep))

    logged = {e.name for e in keep.events if e.kind == "metric"}
    assert {"test_r2", "baseline_test_r2", "baseline_val_mae", "baseline_test_mae"} <= logged
    assert final["baseline_val_mae"] < final["val_mae"]  # last value beats random weights
    # The loss is the training objective (standardised units), the errors are in ppm.
    std = float(data.train.y.std())
    assert final["test_rmse"] == pytest.approx(math.sqrt(final["test_loss"]) * std, rel=1e-3)
    warnings = [e for e in keep.events if e.kind == "lifecycle" and e.name == "baseline_warning"]
    assert len(warnings) == 1
    assert "val_mae" in warnings[0].data["message"]


def test_register_tags_the_warning_and_still_registers_without_a_relative_gate(untrained) -> None:
    loaded, data, outcome = untrained
    model, final = stages.evaluate(loaded, data, outcome, Reporter(_Keep()))
    run = _Run()

    logged = stages.log_and_register(loaded, data, run, model, final)

    assert run.tags["engage.baseline"] == "last observed value of 'co2'"
    assert "worse than its naive baseline" in run.tags[WARNING_TAG]
    assert run.registered == ["co2-forecast"]
    assert logged.register_seq == 2


def test_a_relative_gate_keeps_the_loser_out_of_the_registry(untrained) -> None:
    _, data, outcome = untrained
    gate = ", gate: {metric: test_mae, direction: minimize, min_over_baseline: 0.0}"
    loaded = parse_spec(SPEC % gate)
    model, final = stages.evaluate(loaded, data, outcome, Reporter(_Keep()))
    run = _Run()

    logged = stages.log_and_register(loaded, data, run, model, final)

    assert run.registered == []
    assert logged.register_seq is None
    assert WARNING_TAG not in run.tags
    assert run.tags["engage.gate"].startswith("gate failed: test_mae = ")
    assert "naive baseline" in run.tags["engage.gate"]
