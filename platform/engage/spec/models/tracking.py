"""The ``tracking``, ``monitor`` and ``export`` sections: registration gate, alerts, formats."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from engage.spec.models.base import Name, StrictModel


class GateSpec(StrictModel):
    """Register the model only when ``metric`` reaches ``threshold``, beats the run's naive
    baseline by ``min_over_baseline``, or both (whichever are set)."""

    metric: Name
    threshold: float | None = Field(
        None, description="the value the metric must reach (optional with min_over_baseline)"
    )
    direction: Literal["maximize", "minimize"]
    min_over_baseline: float | None = Field(
        None,
        description="how much the metric must beat the run's naive baseline "
        "(`baseline_<metric>`) by, in its direction; 0 = at least as good",
    )

    @model_validator(mode="after")
    def _has_a_bound(self) -> GateSpec:
        if self.threshold is None and self.min_over_baseline is None:
            raise ValueError("a gate needs threshold, min_over_baseline or both")
        if self.min_over_baseline is not None and self.metric.endswith("_loss"):
            raise ValueError(
                f"min_over_baseline compares {self.metric!r} with a naive baseline, and losses "
                "have none; use a val_ or test_ metric such as test_r2, test_mae or val_accuracy"
            )
        return self

    def bound(self, baseline: float | None = None) -> float:
        """The value the metric must reach, given the run's ``baseline_<metric>``.

        ``threshold``, the baseline moved by ``min_over_baseline`` in the better direction,
        or the stricter of the two when both are set; NaN when the gate is relative and the
        baseline is unknown.
        """
        bounds = [] if self.threshold is None else [self.threshold]
        if self.min_over_baseline is not None:
            if baseline is None or baseline != baseline:
                return float("nan")
            step = (
                self.min_over_baseline if self.direction == "maximize" else -self.min_over_baseline
            )
            bounds.append(baseline + step)
        return max(bounds) if self.direction == "maximize" else min(bounds)

    def passes(self, value: float, baseline: float | None = None) -> bool:
        """Whether a final metric ``value`` clears the gate; NaN (as value or bound) never does."""
        bound = self.bound(baseline)
        if value != value or bound != bound:  # NaN never passes
            return False
        return value >= bound if self.direction == "maximize" else value <= bound


class RegistrationSpec(StrictModel):
    """Register the trained model in the MLflow model registry."""

    model_name: Name
    gate: GateSpec | None = None


class TrackingSpec(StrictModel):
    """Where the run is tracked in MLflow and whether the model is registered."""

    experiment: Name | None = Field(None, description="MLflow experiment; default: the spec name")
    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; default: SQLite under .engage/"
    )
    registration: RegistrationSpec | None = Field(
        None, description="register the trained model, optionally behind a gate"
    )


class MonitorSpec(StrictModel):
    """The job's live monitor: its Prometheus endpoint and its own alert evaluation."""

    enabled: bool = Field(True, description="serve job metrics and evaluate alert rules")
    host: str = Field(
        "127.0.0.1", min_length=1, description="address the metrics endpoint binds to"
    )
    port: int = Field(0, ge=0, le=65535, description="metrics port; 0 picks a free one")
    stall_seconds: float = Field(
        120.0, gt=0.0, le=86_400.0, description="alert when no training step for this long"
    )
    evaluate_every_seconds: float = Field(
        5.0, gt=0.0, le=3600.0, description="how often the job evaluates its alert rules"
    )


class ExportSpec(StrictModel):
    """Cross-platform copies of the trained model, each checked against torch before logging."""

    formats: list[Literal["onnx", "torchscript"]] = Field(
        default_factory=lambda: ["onnx", "torchscript"],
        description="files written beside the model (onnx, torchscript); [] exports none",
    )
    opset: int = Field(
        18, ge=18, le=30, description="ONNX opset; torch's exporter implements 18 and later"
    )
    tolerance: float = Field(
        1e-4,
        gt=0.0,
        le=1.0,
        description="largest output difference from torch (relative for outputs above 1); "
        "above it the run fails",
    )
    samples: int = Field(
        256, ge=1, le=100_000, description="held-out test windows the equivalence check runs"
    )

    @field_validator("formats")
    @classmethod
    def _no_repeats(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"formats must not repeat, got {v}")
        return v
