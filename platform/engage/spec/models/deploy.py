"""The ``deploy`` section: Ray Serve replicas, autoscaling, canary, sampling, live drift."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from engage.spec.models.base import Name, StageResources, StrictModel


class AutoscalingSpec(StrictModel):
    """Let Ray Serve scale model replicas between ``min_replicas`` and ``max_replicas``."""

    min_replicas: int = Field(1, ge=0, le=1000, description="replicas kept when idle")
    max_replicas: int = Field(2, ge=1, le=1000, description="replicas at peak load")
    target_ongoing_requests: float = Field(
        2.0, gt=0.0, le=10_000.0, description="requests in flight per replica Serve aims for"
    )

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}"
            )
        return self


class CanarySpec(StrictModel):
    """Send a share of requests to a second version (by a stable hash of the request id)."""

    model: str = Field(
        min_length=1,
        description="the canary version: an alias (candidate) or a version number of the same model",
    )
    weight: float = Field(
        0.1, ge=0.0, le=1.0, description="share of requests the canary answers (0-1)"
    )


class SamplingSpec(StrictModel):
    """Inputs and predictions handed to the drift detectors, off the request path."""

    rate: float = Field(0.1, ge=0.0, le=1.0, description="share of requests sampled (0-1)")
    queue_size: int = Field(
        1000, ge=1, le=1_000_000, description="samples waiting per replica; more are dropped"
    )
    consumers: list[Name] = Field(
        default_factory=lambda: ["sqlite"],
        description="registered sample consumers; sqlite writes serve/<app>/samples.sqlite",
    )


class DriftWatchSpec(StrictModel):
    """Live drift detection: sampled windows of each served version checked against its
    training reference (detectors fitted once per version), alerts on a change."""

    enabled: bool = Field(
        True, description="check sampled requests for drift (needs deploy.sampling.rate > 0)"
    )
    detectors: list[Name] = Field(
        default_factory=lambda: ["bocpd", "health"],
        min_length=1,
        description="registered drift detectors (`engage drift check --help` lists them); "
        "default: Bayesian change points judged against the reference's own regimes, plus "
        "NaN/missing/stuck-sensor checks (docs/BENCHMARKS.md, real-data section)",
    )
    check_every: int = Field(
        50, ge=1, le=1_000_000, description="sampled windows per check of a served version"
    )
    ert: float = Field(
        10_000.0,
        gt=1.0,
        le=1e12,
        description="expected sampled windows between false alarms, for detectors with an ERT",
    )
    min_samples: int = Field(
        50, ge=1, le=1_000_000, description="sampled windows of a version before its first check"
    )
    prediction_shift: bool = Field(
        True,
        description="also check the sampled predictions against the reference's training "
        "outputs (label-free proxy of performance decay: predicted-class or value shift, "
        "confidence drop); skipped for a version whose reference holds no outputs",
    )
    prediction_window: int = Field(
        200,
        ge=30,
        le=100_000,
        description="latest sampled predictions of a version compared with the reference "
        "outputs at each check (the proxy waits until this many have been sampled)",
    )
    prediction_p_value: float = Field(
        0.001,
        gt=0.0,
        lt=1.0,
        description="p-value below which the predicted-class (chi-square) or value (KS) "
        "distribution counts as shifted; low, as overlapping windows are tested every check",
    )

    @field_validator("detectors")
    @classmethod
    def _known_detectors(cls, v: list[str]) -> list[str]:
        from engage.drift import detector_names

        valid = detector_names()
        unknown = [d for d in v if d not in valid]
        if unknown:
            raise ValueError(f"unknown drift detector(s) {unknown}; registered: {valid}")
        if len(set(v)) != len(v):
            raise ValueError(f"detectors must not repeat, got {v}")
        return v


class DeploySpec(StrictModel):
    """`engage deploy`: how a registered model is served over HTTP with Ray Serve."""

    after_training: bool = Field(
        False,
        description="`engage run` ends by serving the version it registered (when the gate passes)",
    )

    alias: str = Field(
        "candidate", min_length=1, description="alias served when the command names no version"
    )
    app: Name | None = Field(None, description="Serve application name; default: the model name")
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="address the HTTP server binds to; anything but loopback needs a token",
    )
    port: int = Field(8000, ge=1, le=65535, description="HTTP port")
    route_prefix: str = Field(
        "/", pattern=r"^/[A-Za-z0-9_./-]*$", description="URL prefix of the app's routes"
    )
    replicas: int = Field(1, ge=1, le=1000, description="model replicas (without autoscaling)")
    autoscaling: AutoscalingSpec | None = Field(
        None, description="scale model replicas with load instead of a fixed count"
    )
    cpus_per_replica: float = Field(
        0.5, gt=0.0, le=1024.0, description="CPUs each model replica reserves"
    )
    resources_per_replica: StageResources | None = Field(
        None,
        description="Ray resources each model replica reserves beside or instead of "
        "cpus_per_replica: CPU, GPU, memory (bytes) or a custom resource a node offers (a "
        "node label, accelerator_type:A100); a CPU entry here replaces cpus_per_replica, so "
        "set one of the two; a request no node can hold is refused before serving starts",
    )
    max_batch_size: int = Field(
        16, ge=1, le=10_000, description="requests combined into one model call at most"
    )
    batch_wait_timeout_s: float = Field(
        0.005, ge=0.0, le=10.0, description="how long a batch waits to fill up"
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=1_073_741_824, description="larger request bodies get 413"
    )
    nan_policy: Literal["reject", "allow"] = Field(
        "reject", description="NaN or infinite inputs: 422 (reject) or passed to the model"
    )
    token_env: Name = Field(
        "ENGAGE_SERVE_TOKEN",
        description="environment variable holding the bearer token (never put it in the spec)",
    )
    canary: CanarySpec | None = Field(None, description="split traffic with a second version")
    sampling: SamplingSpec = Field(
        default_factory=SamplingSpec, description="samples for drift detection"
    )
    metrics_every_seconds: float = Field(
        30.0, gt=0.0, le=86_400.0, description="how often replicas log aggregates to MLflow"
    )
    drift: DriftWatchSpec = Field(
        default_factory=DriftWatchSpec,
        description="live drift detection on the sampled requests, with alerts",
    )

    @model_validator(mode="after")
    def _one_cpu_request(self) -> DeploySpec:
        # Refused, not resolved: with both set, one of the two numbers would be ignored.
        extra = self.resources_per_replica or {}
        if "CPU" in extra and "cpus_per_replica" in self.model_fields_set:
            raise ValueError(
                f"cpus_per_replica {self.cpus_per_replica:g} and resources_per_replica's CPU "
                f"{extra['CPU']:g} both set a replica's CPUs; keep one of the two"
            )
        return self

    @property
    def replica_resources(self) -> dict[str, float]:
        """Every Ray resource one replica reserves: ``cpus_per_replica`` as its CPU unless
        ``resources_per_replica`` names one, then the rest of ``resources_per_replica``."""
        return {"CPU": self.cpus_per_replica, **(self.resources_per_replica or {})}
