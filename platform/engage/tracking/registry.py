"""The registration gate and model versions in the MLflow registry."""

from __future__ import annotations

from dataclasses import dataclass

from engage.spec.models import RegistrationSpec


@dataclass(frozen=True)
class GateDecision:
    """Whether a trained model passes the registration gate, with the reasons."""

    passed: bool
    metric: str | None
    value: float | None
    threshold: float | None
    direction: str | None

    def explain(self) -> str:
        """The decision in one line for the CLI and the run's tags."""
        if self.metric is None:
            return "no gate configured"
        op = ">=" if self.direction == "maximize" else "<="
        verdict = "passed" if self.passed else "failed"
        return f"gate {verdict}: {self.metric} = {self.value:.4g} (needs {op} {self.threshold:g})"


@dataclass(frozen=True)
class Registration:
    """A registered model version and the alias it was given."""

    name: str
    version: str
    alias: str


def decide(registration: RegistrationSpec, metrics: dict[str, float]) -> GateDecision:
    """Apply the spec's gate thresholds to the final metrics."""
    gate = registration.gate
    if gate is None:
        return GateDecision(True, None, None, None, None)
    value = metrics.get(gate.metric, float("nan"))
    return GateDecision(gate.passes(value), gate.metric, value, gate.threshold, gate.direction)
