"""The registration gate's decision and model versions in a real SQLite registry."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from engage.errors import TrackingError
from engage.spec.models import GateSpec, RegistrationSpec
from engage.tracking import PipelineRun, decide, register
from engage.tracking.registry import CANDIDATE_ALIAS, GateDecision
from engage.tracking.run import LoggedModelRef
from engage.train.models import MLP

ACCURACY_GATE = RegistrationSpec(
    model_name="m", gate=GateSpec(metric="val_accuracy", threshold=0.8, direction="maximize")
)
LOSS_GATE = RegistrationSpec(
    model_name="m", gate=GateSpec(metric="val_loss", threshold=0.3, direction="minimize")
)


def test_decide_passes_a_metric_over_the_threshold() -> None:
    decision = decide(ACCURACY_GATE, {"val_accuracy": 0.91, "val_loss": 0.2})

    assert decision == GateDecision(True, "val_accuracy", 0.91, 0.8, "maximize")
    assert decision.explain() == "gate passed: val_accuracy = 0.91 (needs >= 0.8)"


def test_decide_fails_a_metric_on_the_wrong_side() -> None:
    decision = decide(LOSS_GATE, {"val_loss": 0.45})

    assert not decision.passed
    assert decision.explain() == "gate failed: val_loss = 0.45 (needs <= 0.3)"


def test_decide_without_a_gate_passes() -> None:
    decision = decide(RegistrationSpec(model_name="m"), {})

    assert decision.passed
    assert decision.metric is None
    assert decision.explain() == "no gate configured"


@pytest.mark.parametrize("metrics", [{}, {"val_accuracy": math.nan}], ids=["missing", "nan"])
def test_decide_fails_a_missing_or_nan_metric(metrics: dict[str, float]) -> None:
    decision = decide(ACCURACY_GATE, metrics)

    assert not decision.passed
    assert math.isnan(decision.value)
    assert decision.explain() == "gate failed: val_accuracy = nan (needs >= 0.8)"


@pytest.fixture(scope="module")
def logged(
    client: Any, experiment_id: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, LoggedModelRef]:
    run = PipelineRun.start(client, experiment_id, "to-register", {}, tmp_path_factory.mktemp("w"))
    model = MLP(window=2, features=2, outputs=1, hidden=3, layers=1, dropout=0.0).eval()
    example = np.zeros((2, 2, 2), dtype=np.float32)
    with torch.no_grad():
        output = model(torch.from_numpy(example)).numpy()
    ref = run.log_model(model, input_example=example, output_example=output)
    run.end("FINISHED")
    return run.run_id, ref


def test_register_creates_versions_and_moves_the_candidate_alias(
    client: Any, logged: tuple[str, LoggedModelRef]
) -> None:
    run_id, ref = logged
    first_decision = decide(ACCURACY_GATE, {"val_accuracy": 0.85})
    second_decision = decide(ACCURACY_GATE, {"val_accuracy": 0.95})

    first = register(client, "occupancy", ref, run_id, first_decision)
    second = register(client, "occupancy", ref, run_id, second_decision)

    assert (first.name, first.version, first.alias) == ("occupancy", "1", CANDIDATE_ALIAS)
    assert second.version == "2"
    candidate = client.get_model_version_by_alias("occupancy", CANDIDATE_ALIAS)
    assert str(candidate.version) == "2"
    assert candidate.run_id == run_id
    assert candidate.tags["engage.gate"] == second_decision.explain()
    assert (
        client.get_model_version("occupancy", "1").tags["engage.gate"] == first_decision.explain()
    )
    assert client.get_registered_model("occupancy").description == "Registered by engage."


def test_register_reports_a_refusal_as_tracking_error(
    client: Any, logged: tuple[str, LoggedModelRef]
) -> None:
    run_id, ref = logged

    with pytest.raises(TrackingError, match="could not register model ''"):
        register(client, "", ref, run_id, decide(RegistrationSpec(model_name="m"), {}))
