"""The ``model`` and ``train`` sections: builder, epochs, workers, resources, precision, comm."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from engage.spec.models.base import Name, StageResources, StrictModel, check_resources


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


class LoaderSearchSpec(StrictModel):
    """How ``train.loader: auto`` searches the input pipeline's settings before training."""

    time_budget_seconds: float = Field(
        5.0,
        gt=0.0,
        le=300.0,
        description="wall time the timed trials of the loader may take in all; the candidates "
        "not reached by then are recorded as not tried",
    )
    memory_fraction: float = Field(
        0.5,
        gt=0.0,
        le=0.9,
        description="share of the node's available memory (read with psutil before each "
        "trial) a candidate's prefetched batches and cache may take; one that would take "
        "more is skipped, never run",
    )
    tune_batch_size: bool = Field(
        False,
        description="also try half and twice train.batch_size: opt in only if the model may "
        "train with another batch (it changes the optimisation, so it is off by default)",
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
    min_workers: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="elastic width: after losing a worker's node the job restarts on as few "
        "as this many workers (as many as the cluster then holds, up to num_workers) instead "
        "of waiting for the node; batch_size stays the global batch (each worker takes more); "
        "unset: always num_workers",
    )
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
    strategy: Literal["ddp", "fsdp", "auto"] = Field(
        "ddp",
        description="data-parallel strategy: ddp keeps a full model, gradients and optimiser "
        "state on every worker; fsdp shards them over the workers (torch FSDP, CPU/gloo or "
        "GPU/NCCL; train.comm hooks apply to ddp only); auto estimates one worker's memory "
        "and picks ddp, activation checkpointing, fsdp and/or smaller micro-batches with "
        "gradient accumulation (same global batch) to fit the device, as engage plan reports",
    )
    activation_checkpointing: bool = Field(
        False,
        description="recompute each layer block's activations in backward instead of keeping "
        "them: less memory per worker for about a third more compute (engage plan says when "
        "a worker needs it)",
    )
    loader: Literal["default", "auto"] = Field(
        "default",
        description="input pipeline settings: default, or auto to time short trials of the "
        "loader alone (prefetch depth, loader workers, cache placement, batch size if "
        "train.loader_search.tune_batch_size) within a memory budget and train with the "
        "fastest; the choice and every candidate's throughput are recorded with the run",
    )
    loader_search: LoaderSearchSpec = Field(
        default_factory=LoaderSearchSpec,
        description="the search train.loader: auto makes (time and memory budget, batch size)",
    )

    @field_validator("resources_per_worker")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        return check_resources(v)

    @model_validator(mode="after")
    def _elastic_range(self) -> TrainSpec:
        if self.min_workers is not None and self.min_workers > self.num_workers:
            raise ValueError(
                f"min_workers {self.min_workers} is larger than num_workers {self.num_workers}; "
                "expected 1 <= min_workers <= num_workers"
            )
        return self

    @model_validator(mode="after")
    def _hooks_need_ddp(self) -> TrainSpec:
        if self.strategy == "fsdp" and self.comm is not None and self.comm.compression != "none":
            raise ValueError(
                f"comm.compression {self.comm.compression} is a DDP communication hook and "
                "strategy fsdp does not use DDP; expected comm.compression none or strategy ddp"
            )
        return self

    @model_validator(mode="after")
    def _batch_covers_workers(self) -> TrainSpec:
        if self.batch_size < self.num_workers:
            raise ValueError(
                f"batch_size {self.batch_size} is smaller than num_workers {self.num_workers}; "
                "each worker needs at least one sample per step"
            )
        return self


class EvaluateSpec(StrictModel):
    """Where the test-split evaluation of the trained model runs."""

    resources: StageResources | None = Field(
        None,
        description="Ray resources of the evaluation: when set, the test pass runs in one Ray "
        "task (engage.evaluate) that reserves them, on a node that offers them (CPU, GPU, "
        "memory in bytes or a custom resource such as a node label); unset: in the driver",
    )
