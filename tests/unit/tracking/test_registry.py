"""The registration gate's decision and model versions in a real SQLite registry."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engage.spec.models import GateSpec, RegistrationSpec
from engage.tracking import Drainer, PipelineRun, Spool, decide
from engage.tracking.registry import GateDecision
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


def _logged_run(client: Any, tmp_path: Path) -> PipelineRun:
    spool = Spool(tmp_path / "spool.db")
    run = PipelineRun.start(spool, client.tracking_uri, "unit-tests", "to-register", {}, tmp_path)
    return run


def _model_seq(run: PipelineRun) -> int:
    model = MLP(window=2, features=2, outputs=1, hidden=3, layers=1, dropout=0.0).eval()
    example = np.zeros((2, 2, 2), dtype=np.float32)
    with torch.no_grad():
        output = model(torch.from_numpy(example)).numpy()
    return run.log_model(model, input_example=example, output_example=output)


def _drain(run: PipelineRun, warnings: list[str] | None = None) -> None:
    drainer = Drainer(run.spool.path, warn=(warnings if warnings is not None else []).append)
    assert drainer.flush(timeout_s=60)
    drainer.stop()


def test_register_creates_versions_and_moves_the_candidate_alias(
    client: Any, experiment_id: str, tmp_path: Path
) -> None:
    run = _logged_run(client, tmp_path)
    seq = _model_seq(run)
    first_decision = decide(ACCURACY_GATE, {"val_accuracy": 0.85})
    second_decision = decide(ACCURACY_GATE, {"val_accuracy": 0.95})

    first_seq = run.register("occupancy", seq, {"engage.gate": first_decision.explain()})
    second_seq = run.register("occupancy", seq, {"engage.gate": second_decision.explain()})
    _drain(run)

    first, second = run.registration(first_seq), run.registration(second_seq)
    assert (first.name, first.version, first.alias) == ("occupancy", "1", "candidate")
    assert second.version == "2"
    candidate = client.get_model_version_by_alias("occupancy", "candidate")
    assert str(candidate.version) == "2"
    assert candidate.run_id == run.ids().run_id
    assert candidate.tags["engage.gate"] == second_decision.explain()
    assert (
        client.get_model_version("occupancy", "1").tags["engage.gate"] == first_decision.explain()
    )
    assert client.get_registered_model("occupancy").description == "Registered by engage."


def test_a_refused_registration_is_reported_not_retried_forever(
    client: Any, experiment_id: str, tmp_path: Path
) -> None:
    run = _logged_run(client, tmp_path)
    seq = run.register("", _model_seq(run), {})
    warnings: list[str] = []

    _drain(run, warnings)

    assert run.registration(seq) is None
    assert any("rejected register" in w for w in warnings)
