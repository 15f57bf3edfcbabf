"""The registration gate and model versions in the MLflow registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engage.errors import TrackingError
from engage.spec.models import RegistrationSpec
from engage.tracking.run import LoggedModelRef

CANDIDATE_ALIAS = "candidate"


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    metric: str | None
    value: float | None
    threshold: float | None
    direction: str | None

    def explain(self) -> str:
        if self.metric is None:
            return "no gate configured"
        op = ">=" if self.direction == "maximize" else "<="
        verdict = "passed" if self.passed else "failed"
        return f"gate {verdict}: {self.metric} = {self.value:.4g} (needs {op} {self.threshold:g})"


@dataclass(frozen=True)
class Registration:
    name: str
    version: str
    alias: str


def decide(registration: RegistrationSpec, metrics: dict[str, float]) -> GateDecision:
    gate = registration.gate
    if gate is None:
        return GateDecision(True, None, None, None, None)
    value = metrics.get(gate.metric, float("nan"))
    return GateDecision(gate.passes(value), gate.metric, value, gate.threshold, gate.direction)


def register(
    client: Any, name: str, model: LoggedModelRef, run_id: str, decision: GateDecision
) -> Registration:
    """Create a model version for ``model`` and point the ``candidate`` alias at it."""
    from mlflow.exceptions import MlflowException

    tags = {"engage.gate": decision.explain()}
    try:
        try:
            client.get_registered_model(name)
        except MlflowException:
            client.create_registered_model(name, description="Registered by engage.")
        # The artifact location, not models:/<id>: the registry store would resolve that
        # URI through MLflow's global tracking URI rather than this client's.
        version = client.create_model_version(
            name, source=model.artifact_location, run_id=run_id, tags=tags, model_id=model.model_id
        )
        client.set_registered_model_alias(name, CANDIDATE_ALIAS, version.version)
    except MlflowException as exc:
        raise TrackingError(f"could not register model {name!r}: {exc.message}") from None
    return Registration(name, str(version.version), CANDIDATE_ALIAS)
