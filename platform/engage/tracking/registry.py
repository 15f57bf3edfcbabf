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
    baseline: float | None = None  # the run's baseline_<metric>, for a relative gate

    def explain(self) -> str:
        """The decision in one line for the CLI and the run's tags."""
        if self.metric is None:
            return "no gate configured"
        op = ">=" if self.direction == "maximize" else "<="
        verdict = "passed" if self.passed else "failed"
        head = f"gate {verdict}: {self.metric} = {self.value:.4g}"
        if self.threshold is None or self.threshold != self.threshold:
            return f"{head} (no baseline_{self.metric} to compare with)"
        if self.baseline is None:
            return f"{head} (needs {op} {self.threshold:g})"
        return f"{head} (needs {op} {self.threshold:.4g}; naive baseline {self.baseline:.4g})"


@dataclass(frozen=True)
class Registration:
    """A registered model version and the alias it was given."""

    name: str
    version: str
    alias: str


def decide(registration: RegistrationSpec, metrics: dict[str, float]) -> GateDecision:
    """Apply the spec's gate to the final metrics; a relative gate
    (``min_over_baseline``) reads the run's ``baseline_<metric>`` among them."""
    gate = registration.gate
    if gate is None:
        return GateDecision(True, None, None, None, None)
    value = metrics.get(gate.metric, float("nan"))
    baseline = (
        metrics.get(f"baseline_{gate.metric}") if gate.min_over_baseline is not None else None
    )
    return GateDecision(
        gate.passes(value, baseline),
        gate.metric,
        value,
        gate.bound(baseline),
        gate.direction,
        baseline,
    )
