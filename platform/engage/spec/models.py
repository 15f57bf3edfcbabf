"""Typed pipeline spec: the pydantic models a YAML spec is parsed into.

Every model forbids unknown keys, so a typo is an error rather than a silent default.
Checks that need more than one section (a batch larger than the data, a gate metric the
task does not produce) live in :mod:`engage.spec.checks`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Name = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
ColumnName = Annotated[str, Field(min_length=1, max_length=200)]


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors and parsed values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticSource(StrictModel):
    """The built-in smart-living generator (households with sensors at 1-minute resolution)."""

    type: Literal["synthetic"]
    households: int = Field(4, ge=1, le=1000, description="number of households simulated")
    days: int = Field(14, ge=1, le=366, description="days simulated per household")
    seed: int = Field(0, ge=0, description="generator seed; same seed, same data")
    start: str = Field(
        "2026-01-05",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="first simulated day (ISO date, local midnight)",
    )
    noise: float = Field(1.0, ge=0.0, le=10.0, description="multiplier on sensor noise")


class SimulationShards(StrictModel):
    """Where and how a simulation is streamed to Parquet shards (by household and period)."""

    dir: str = Field(min_length=1, description="folder of the shards, relative to the spec file")
    households_per_shard: int = Field(
        16, ge=1, le=10_000, description="households in one shard (one Ray task each)"
    )
    days_per_shard: int | None = Field(
        None, ge=1, le=366, description="days in one shard; unset: all days of a household"
    )


class SimulationSource(StrictModel):
    """The parameterised smart-living simulator (engage.data.simulator): one scenario."""

    type: Literal["simulation"]
    scenario: dict[str, float] = Field(
        default_factory=dict,
        description="scenario parameters by name (docs/simulator.md); unnamed ones take defaults",
    )
    households: int = Field(4, ge=1, le=100_000, description="number of households simulated")
    days: int = Field(14, ge=1, le=366, description="days simulated per household")
    seed: int = Field(0, ge=0, description="simulation seed; same scenario and seed, same data")
    start: str = Field(
        "2026-01-05",
        pattern=r"^\d{4}-\d{2}-\d{2}$",
        description="first simulated day (ISO date, local midnight)",
    )
    fill_dropouts: bool = Field(
        True,
        description="carry each household's last reading over dropouts (NaN) so features stay "
        "finite; the fault label still marks them",
    )
    shards: SimulationShards | None = Field(
        None,
        description="stream the set to Parquet shards (python -m engage.data.simulator SPEC "
        "writes them in parallel Ray tasks); a run reads them back instead of simulating",
    )

    @field_validator("scenario")
    @classmethod
    def _known_and_in_range(cls, v: dict[str, float]) -> dict[str, float]:
        # Imported here: engage.data imports this module, so a top-level import would loop.
        from engage.data.simulator.space import Scenario

        return {k: Scenario(v)[k] for k in v}


class FileSource(StrictModel):
    """Rows from a table file; the ``csv`` and ``parquet`` sources share these fields."""

    path: str = Field(
        min_length=1,
        description="a file, a folder of shards or a glob (data/*.parquet), relative to the "
        "spec file",
    )
    timestamp: ColumnName = Field("timestamp", description="column giving each row's time")
    group: ColumnName | None = Field(
        None,
        description="column naming independent series (e.g. household); windows never span two",
    )


class CsvSource(FileSource):
    """Rows from a CSV file with a header."""

    type: Literal["csv"]


class ParquetSource(FileSource):
    """Rows from a Parquet file."""

    type: Literal["parquet"]


Source = Annotated[
    SyntheticSource | SimulationSource | CsvSource | ParquetSource, Field(discriminator="type")
]


class SplitSpec(StrictModel):
    """Fractions of each series' time span, in time order: train, then val, then test."""

    train: float = Field(0.7, gt=0.0, lt=1.0)
    val: float = Field(0.15, gt=0.0, lt=1.0)
    test: float = Field(0.15, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitSpec:
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must be 1.0, got {total:g}")
        return self


class PreprocessStep(StrictModel):
    """One preprocessing operator and its parameters (``engage.data.preprocess``)."""

    op: Name = Field(
        description="a registered preprocessing operator: resample (rows), clip, rolling, "
        "lag, spectral, jitter, scale (windows)"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the operator's parameters, checked by its schema"
    )


class DataSpec(StrictModel):
    """What to learn from: where rows come from and how they become windows."""

    source: Source
    features: list[ColumnName] = Field(min_length=1, description="input columns, in order")
    target: ColumnName
    task: Literal["classification", "regression"]
    window: int = Field(30, ge=1, le=10_000, description="rows of history in one sample")
    horizon: int = Field(
        0, ge=0, le=10_000, description="predict the target this many rows after the window"
    )
    stride: int = Field(1, ge=1, le=10_000, description="rows between consecutive windows")
    split: SplitSpec = SplitSpec()
    normalize: bool = Field(True, description="standardise features with train-split statistics")
    preprocess: list[PreprocessStep] = Field(
        default_factory=list,
        description="operators applied in order, fitted on the train split; they travel with "
        "the logged model, so serving still takes raw windows",
    )
    preprocess_device: Literal["cpu", "gpu", "auto"] = Field(
        "cpu",
        description="where window operators run: cpu, gpu (error without one) or auto "
        "(gpu when present, else cpu)",
    )

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dupes = sorted({f for f in v if v.count(f) > 1})
        if dupes:
            raise ValueError(f"duplicate feature(s) {', '.join(dupes)}")
        return v

    @model_validator(mode="after")
    def _target_not_feature_for_now(self) -> DataSpec:
        if self.horizon == 0 and self.target in self.features:
            raise ValueError(
                f"target {self.target!r} is also a feature with horizon 0: the model would "
                "see its own label; remove it from features or set horizon >= 1"
            )
        return self


class ModelSpec(StrictModel):
    """Which registered model builder to use and its hyperparameters."""

    name: Name = Field(description='a registered model builder (see "Model builders" below)')
    params: dict[str, Any] = Field(
        default_factory=dict, description="the builder's hyperparameters, checked by its schema"
    )
    module: str | None = Field(
        None,
        min_length=1,
        pattern=r"\.py$",
        description="your Python file that registers the builder, relative to the spec file",
    )


class FaultSpec(StrictModel):
    """Deliberate faults, to check that monitoring and alerting catch them. Leave unset."""

    data_delay_seconds: float = Field(
        0.0, ge=0.0, le=60.0, description="sleep before each batch, like a slow input pipeline"
    )
    stall_after_epoch: int | None = Field(
        None, ge=1, description="hang after this epoch for stall_seconds"
    )
    stall_seconds: float = Field(0.0, ge=0.0, le=86_400.0, description="how long the hang lasts")
    kill_worker_at_epoch: int | None = Field(
        None,
        ge=1,
        description="SIGKILL the last-ranked worker halfway through this epoch, once per job "
        "(tests recovery within train.max_failures)",
    )


class CommSpec(StrictModel):
    """How DDP workers exchange gradients: a compression hook, the bucket size, timing."""

    compression: Literal["none", "fp16", "bf16", "powersgd"] = Field(
        "none",
        description="gradient compression hook: fp16/bf16 halve the bytes sent, powersgd "
        "sends a low-rank approximation (error feedback keeps it converging)",
    )
    powersgd_rank: int = Field(
        1,
        ge=1,
        le=64,
        description="PowerSGD matrix approximation rank (higher: closer, more bytes)",
    )
    powersgd_start_iter: int = Field(
        10, ge=2, description="steps of plain all-reduce before PowerSGD starts compressing"
    )
    bucket_cap_mb: float = Field(
        25.0,
        gt=0.0,
        le=1024.0,
        description="DDP gradient bucket size in MiB: smaller overlaps more, larger pays the "
        "all-reduce latency fewer times",
    )
    timing: bool = Field(
        True, description="measure the seconds each step spends in and blocked on all-reduce"
    )


class TrainSpec(StrictModel):
    """How to train on Ray Train: epochs, batches, optimiser, workers, checkpoints."""

    epochs: int = Field(5, ge=1, le=100_000)
    batch_size: int = Field(256, ge=1, le=1_000_000, description="global batch, split over workers")
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    learning_rate: float = Field(1e-3, gt=0.0, le=10.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    seed: int = Field(0, ge=0)
    num_workers: int = Field(2, ge=1, le=4096)
    use_gpu: bool = False
    resources_per_worker: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 1.0},
        description="Ray resources each worker reserves: CPU, GPU, memory (bytes) or any custom "
        "resource a node offers (`ray start --resources '{\"node_b\": 2}'`, "
        "`accelerator_type:A100`); a name no node offers is refused before training starts",
    )
    placement: Literal["pack", "spread"] = Field(
        "pack",
        description="how Ray places the workers: pack them onto as few nodes as fit (Ray's "
        "default), or spread them over as many nodes as possible",
    )
    checkpoint_every: int = Field(1, ge=1, description="epochs between checkpoints")
    checkpoints_to_keep: int = Field(2, ge=1, le=1000)
    max_failures: int = Field(
        2,
        ge=-1,
        le=1000,
        description="worker failures the job recovers from, each by restarting every worker "
        "from the last valid checkpoint; 0 fails on the first, -1 never gives up",
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32",
        description="autocast precision of forward and loss: bf16 on CPU or GPU, fp16 on GPU "
        "only (with a gradient scaler); weights and optimiser state stay fp32",
    )
    grad_accumulation: int = Field(
        1,
        ge=1,
        le=4096,
        description="batches whose gradients add up before one optimiser step "
        "(effective batch = batch_size x grad_accumulation)",
    )
    faults: FaultSpec | None = Field(None, description="fault injection for testing alerts")
    comm: CommSpec | None = Field(
        None, description="gradient communication: compression hook, bucket size (unset: plain DDP)"
    )
    activation_checkpointing: bool = Field(
        False,
        description="recompute each layer block's activations in backward instead of keeping "
        "them: less memory per worker for about a third more compute (engage plan says when "
        "a worker needs it)",
    )

    @field_validator("resources_per_worker")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        blank = [k for k in v if not k.strip()]
        if blank:
            raise ValueError("resource names must not be empty")
        bad = {k: x for k, x in v.items() if not x > 0}
        if bad:
            raise ValueError(f"resource amounts must be > 0, got {bad}")
        return v

    @model_validator(mode="after")
    def _batch_covers_workers(self) -> TrainSpec:
        if self.batch_size < self.num_workers:
            raise ValueError(
                f"batch_size {self.batch_size} is smaller than num_workers {self.num_workers}; "
                "each worker needs at least one sample per step"
            )
        return self


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


ClientAttackKind = Literal[
    "sign_flip", "boosting", "gaussian_noise", "label_flip", "free_ride", "sybil"
]
TransitAttackKind = Literal["bit_flip", "scaling", "substitution", "replay", "delay", "drop"]


class ClientAttackSpec(StrictModel):
    """Malicious clients: a share of the clients poison their updates the same way."""

    kind: ClientAttackKind = Field(
        description="sign_flip, boosting, gaussian_noise, label_flip, free_ride (zero or "
        "stale update) or sybil (colluding clients sending identical updates)"
    )
    fraction: float = Field(0.3, gt=0.0, lt=1.0, description="share of clients that are malicious")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the attack's parameters (factor, std, mode, norm); see docs/spec.md",
    )
    start_round: int = Field(1, ge=1, description="first round the malicious clients attack")


class TransitAttackSpec(StrictModel):
    """An attacker on the network between clients and server."""

    kind: TransitAttackKind = Field(
        description="bit_flip, scaling, substitution, replay, delay or drop"
    )
    probability: float = Field(
        0.1, ge=0.0, le=1.0, description="chance that one update in transit is hit"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="bits, factor, rounds or seconds, by kind"
    )


class AttacksSpec(StrictModel):
    """Attack and fault simulation, to test the defences. Leave unset for a normal run."""

    seed: int = Field(0, ge=0, description="which clients are malicious, which updates are hit")
    clients: ClientAttackSpec | None = Field(None, description="poisoning by malicious clients")
    in_transit: list[TransitAttackSpec] = Field(
        default_factory=list, description="tampering with updates on their way to the server"
    )


class AggregatorSpec(StrictModel):
    """A registered aggregator and its parameters."""

    name: Name = Field("median", description="fedavg, median, trimmed_mean, krum or multi_krum")
    params: dict[str, Any] = Field(
        default_factory=dict, description="the aggregator's parameters (trim, byzantine, select)"
    )


class ScoringSpec(StrictModel):
    """Anomaly scoring of every accepted update, and what a flag does. The defaults are
    calibrated on benign non-IID runs (docs/BENCHMARKS.md, federated section)."""

    enabled: bool = Field(True, description="score updates and flag outliers")
    z_threshold: float = Field(
        5.0, gt=0.0, le=100.0, description="robust z-score of an update's log norm that flags"
    )
    outlier_z: float = Field(
        10.0,
        gt=0.0,
        le=1000.0,
        description="robust z-score of the distance to the nearest half of the updates that flags",
    )
    cosine_min: float = Field(
        0.0,
        ge=-1.0,
        le=1.0,
        description="flag a client whose cosine to the round centres, averaged over its "
        "history, falls below this",
    )
    duplicate_cosine: float = Field(
        0.9999, gt=0.0, le=1.0, description="updates this similar to another or a past one flag"
    )
    validation: bool = Field(
        True,
        description="check each update on a server-held validation sample: the loss change "
        "when it alone is applied to the global model",
    )
    validation_samples: int = Field(
        512, ge=16, le=1_000_000, description="validation windows the server checks updates on"
    )
    validation_z: float = Field(
        4.0,
        gt=0.0,
        le=1000.0,
        description="robust z-score of the validation-loss change, averaged over the client's "
        "history, that flags (one round alone flags at twice this)",
    )
    exclude_flagged: bool = Field(
        True, description="leave flagged updates out of this round's aggregate"
    )
    history_decay: float = Field(
        0.8, ge=0.0, lt=1.0, description="weight of the past in each client's score history"
    )


class FederatedSpec(StrictModel):
    """Train with federated learning instead of Ray Train: one client per household."""

    partition: Literal["household"] = Field(
        "household", description="one client per series of the data (household, or `group`)"
    )
    clients: int | None = Field(
        None, ge=2, le=10_000, description="use the first N households; default all"
    )
    rounds: int = Field(10, ge=1, le=100_000, description="server rounds")
    clients_per_round: int | None = Field(
        None, ge=1, description="clients sampled each round; default all"
    )
    local_epochs: int = Field(1, ge=1, le=1000, description="passes over local data per round")
    batch_size: int = Field(64, ge=1, le=1_000_000, description="local batch size")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="local optimiser")
    learning_rate: float = Field(0.003, gt=0.0, le=10.0, description="local step size")
    strategy: Literal["fedavg", "fedprox"] = Field(
        "fedavg", description="fedprox adds mu/2 * |w - w_global|^2 to the local loss"
    )
    mu: float = Field(0.01, ge=0.0, le=100.0, description="FedProx proximal weight")
    aggregator: AggregatorSpec = Field(
        default_factory=AggregatorSpec, description="how accepted updates are combined"
    )
    timeout_seconds: float = Field(
        60.0, gt=0.0, le=86_400.0, description="a round waits this long; later updates are stale"
    )
    min_clients: int = Field(
        2, ge=1, description="fewer accepted updates than this skip the round's aggregation"
    )
    signing: Literal["hmac-sha256", "ed25519"] = Field(
        "hmac-sha256", description="update signatures; keys under ENGAGE_HOME/fl/keys"
    )
    max_update_bytes: int = Field(
        16 * 2**20, ge=1024, le=2**31, description="larger updates are rejected unread"
    )
    scoring: ScoringSpec = Field(default_factory=ScoringSpec, description="anomaly scoring")
    quarantine_after: int = Field(
        3, ge=0, le=100_000, description="quarantine a client after this many flags; 0 never"
    )
    seed: int = Field(0, ge=0, description="client sampling and local training seed")
    attacks: AttacksSpec | None = Field(None, description="attack simulation; unset: none")

    @model_validator(mode="after")
    def _enough_per_round(self) -> FederatedSpec:
        per_round = self.clients_per_round
        if per_round is not None and per_round < self.min_clients:
            raise ValueError(
                f"clients_per_round {per_round} is below min_clients {self.min_clients}; "
                "no round could aggregate"
            )
        return self


class SearchParam(StrictModel):
    """One dimension of a tuning search space: how a spec field's value is drawn."""

    type: Literal["loguniform", "uniform", "int", "choice"] = Field(
        description="loguniform/uniform: a float in [low, high]; int: an integer in "
        "[low, high], both ends included; choice: one of values"
    )
    low: float | None = Field(None, description="lowest value (loguniform, uniform, int)")
    high: float | None = Field(None, description="highest value (loguniform, uniform, int)")
    values: list[Any] | None = Field(None, description="the candidates (choice)")

    @model_validator(mode="after")
    def _bounds(self) -> SearchParam:
        if self.type == "choice":
            if not self.values:
                raise ValueError("a choice needs a non-empty values list")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} range needs both low and high")
        if self.low >= self.high:
            raise ValueError(f"low {self.low:g} must be below high {self.high:g}")
        if self.type == "loguniform" and self.low <= 0:
            raise ValueError(f"a loguniform range needs low > 0, got {self.low:g}")
        if self.type == "int" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("an int range needs whole-number low and high")
        return self


class TuneSpec(StrictModel):
    """Tune any spec fields with Ray Tune, then retrain and register the best configuration."""

    space: dict[str, SearchParam] = Field(
        min_length=1,
        description="dotted spec fields (as for --set, e.g. train.learning_rate) and how "
        "each is drawn",
    )
    num_samples: int = Field(8, ge=1, le=10_000, description="trials to run")
    metric: Name = Field(
        "val_loss", description="the per-epoch metric trials are compared on (val_* or train_loss)"
    )
    mode: Literal["min", "max"] | None = Field(
        None, description="min or max; default: the metric's natural direction"
    )
    scheduler: Literal["asha", "none"] = Field(
        "asha", description="asha stops poor trials early; none trains every trial fully"
    )
    searcher: Literal["random", "tpe"] = Field(
        "random", description="random sampling, or Optuna's TPE (Bayesian) search"
    )
    max_concurrent: int = Field(2, ge=1, le=1000, description="trials running at once")
    grace_period: int = Field(
        1, ge=1, le=100_000, description="epochs every trial runs before ASHA may stop it"
    )
    reduction_factor: int = Field(
        2, ge=2, le=100, description="ASHA keeps 1/reduction_factor of trials at each rung"
    )
    cpus_per_trial: float = Field(1.0, gt=0.0, le=1024.0, description="CPUs each trial holds")
    seed: int = Field(0, ge=0, description="seed of the searcher; same seed, same trials")


class AdaptiveSpec(StrictModel):
    """Adaptive sampling of the simulator's scenario space: simulate where the model is weakest."""

    sampler: Literal["adaptive", "uniform", "lhs"] = Field(
        "adaptive",
        description="adaptive (acquisition over a candidate pool), uniform (random) or lhs "
        "(Latin hypercube): the last two for comparison",
    )
    acquisition: Literal["disagreement", "error"] = Field(
        "disagreement",
        description="adaptive's score of a candidate: ensemble disagreement (variance of the "
        "members' predictions) or the ensemble's error on it",
    )
    rounds: int = Field(6, ge=1, le=1000, description="rounds of simulate, retrain, evaluate")
    initial_scenarios: int = Field(
        4, ge=1, le=10_000, description="scenarios of the first round (a Latin hypercube)"
    )
    scenarios_per_round: int = Field(
        4, ge=1, le=10_000, description="scenarios each later round adds"
    )
    households: int = Field(1, ge=1, le=1000, description="households simulated per scenario")
    days: int = Field(2, ge=1, le=366, description="days simulated per scenario")
    budget: int | None = Field(
        None,
        ge=1,
        description="most training samples (windows) simulated in all; unset: rounds decide",
    )
    candidates: int = Field(
        48, ge=1, le=100_000, description="candidate scenarios adaptive scores each round"
    )
    probe_days: int = Field(
        1, ge=1, le=366, description="days of one household simulated to score a candidate"
    )
    test_scenarios: int = Field(
        24,
        ge=1,
        le=100_000,
        description="held-out scenarios over the whole space (a Latin hypercube)",
    )
    ensemble: int = Field(
        3, ge=2, le=100, description="models trained each round, with different seeds"
    )
    seed: int = Field(0, ge=0, description="seed of the sampler and the simulations")


class PipelineSpec(StrictModel):
    """A whole pipeline: what data, which model, how to train, where to track."""

    name: Name
    description: str = ""
    data: DataSpec
    model: ModelSpec
    train: TrainSpec = TrainSpec()
    tracking: TrackingSpec = TrackingSpec()
    monitor: MonitorSpec = Field(
        default_factory=MonitorSpec, description="the live monitor: endpoint and alert evaluation"
    )
    export: ExportSpec = Field(
        default_factory=ExportSpec, description="ONNX and TorchScript copies checked against torch"
    )
    deploy: DeploySpec = Field(
        default_factory=DeploySpec, description="serving with `engage deploy`"
    )
    federated: FederatedSpec | None = Field(
        None, description="federated learning over households instead of Ray Train"
    )
    tune: TuneSpec | None = Field(
        None, description="tune spec fields with Ray Tune, then retrain and register the best"
    )
    adaptive: AdaptiveSpec | None = Field(
        None, description="adaptive sampling of the simulator's scenario space, round by round"
    )

    @property
    def experiment_name(self) -> str:
        """The MLflow experiment: ``tracking.experiment``, else the spec's ``name``."""
        return self.tracking.experiment or self.name
