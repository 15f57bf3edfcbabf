"""The registration gate and model versions in the MLflow registry."""

from __future__ import annotations

from dataclasses import dataclass

from engage.spec.models import RegistrationSpec


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
