"""``train.strategy: auto``: fit one worker in its device by the plan's memory choice, and apply it.

Before training starts, the driver estimates one worker's memory on the meta device
(:func:`~engage.train.scaling.memory.estimate_memory`, at the spec's per-worker batch), reads
the memory one worker may use (:func:`worker_capacity`: the GPU's memory, or a stated share of
the host's RAM split over the workers on CPU) and lets
:func:`~engage.train.scaling.plan.choose_memory`, the function ``engage plan`` reports with,
decide: DDP, activation checkpointing, FSDP, and/or micro-batches with gradient accumulation.
:func:`apply_choice` turns the choice into the training spec the workers run; the global batch
stays the same (per-worker micro-batch x workers x accumulation steps). The choice and the
estimate go to the run as tags (:meth:`StrategyChoice.tags`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import SpecError, TrainingError
from engage.train.scaling.memory import MemoryEstimate
from engage.train.scaling.plan import MemoryChoice, choose_memory

HOST_MEMORY_SHARE = 0.5
"""Share of the host's RAM (or its cgroup limit) the CPU workers of one job may fill together:
the rest is for the driver, Ray's object store and the operating system."""
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")


@dataclass(frozen=True)
class StrategyChoice:
    """What ``auto`` chose for one job, and from what.

    ``strategy`` is ``ddp`` or ``fsdp``; ``batch_size`` and ``grad_accumulation`` are the
    training spec's new values (the global batch per optimiser step is unchanged).
    """

    strategy: str
    workers: int
    activation_checkpointing: bool
    batch_size: int
    grad_accumulation: int
    memory: MemoryChoice
    estimate: MemoryEstimate
    capacity_source: str

    def tags(self) -> dict[str, str]:
        """The run's tags: the choice, the estimate and the memory it was measured against."""
        return {
            "engage.strategy": self.strategy,
            "engage.strategy.choice": self.memory.strategy,
            "engage.strategy.activation_checkpointing": str(self.activation_checkpointing).lower(),
            "engage.strategy.micro_batch": str(self.memory.micro_batch),
            "engage.strategy.accumulation": str(self.memory.accumulation),
            "engage.memory.estimate_bytes": str(self.estimate.total),
            "engage.memory.choice_bytes": str(self.memory.per_worker_bytes),
            "engage.memory.capacity_bytes": str(self.memory.capacity_bytes),
            "engage.memory.capacity_source": self.capacity_source,
        }

    def describe(self) -> str:
        """One line: the choice, its memory against what is usable, and the spec it runs."""
        return (
            f"{self.memory.strategy}: {_size(self.memory.per_worker_bytes)} of "
            f"{_size(self.memory.capacity_bytes)} usable per worker ({self.capacity_source}); "
            f"train.strategy {self.strategy}, activation_checkpointing "
            f"{str(self.activation_checkpointing).lower()}, batch_size {self.batch_size} x "
            f"grad_accumulation {self.grad_accumulation}"
        )


def _size(n: float) -> str:
    """Bytes in the largest binary unit that keeps a number above 1."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def host_memory_bytes() -> int:
    """The host's RAM, or the cgroup's memory limit where one is set and lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    try:
        limit = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def _gpu_memory() -> tuple[int, str]:
    """The memory of the GPU a worker gets: this process's, else one a Ray task reads."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return int(props.total_memory), props.name
    import ray

    @ray.remote(num_gpus=1)
    def _read() -> tuple[int, str]:
        import torch

        props = torch.cuda.get_device_properties(0)
        return int(props.total_memory), props.name

    return ray.get(_read.remote(), timeout=120)


def worker_capacity(train: Any) -> tuple[int, str]:
    """Bytes one worker of ``train`` (a ``TrainSpec``) may use, and where the figure comes from.

    On a GPU: the device's memory times the GPU share each worker reserves (at most one). On
    CPU: :data:`HOST_MEMORY_SHARE` of this host's memory split over ``train.num_workers``
    (the workers are counted as sharing one host: exact for the local cluster, cautious on
    several nodes).
    """
    if train.use_gpu:
        total, name = _gpu_memory()
        share = min(1.0, float(train.resources_per_worker.get("GPU", 1.0)))
        return int(total * share), f"{name}, {total / 2**30:.0f} GiB x {share:g}"
    host = host_memory_bytes()
    workers = train.num_workers
    source = f"{HOST_MEMORY_SHARE:.0%} of {host / 2**30:.1f} GiB host memory / {workers} worker(s)"
    return int(host * HOST_MEMORY_SHARE / workers), source


def decide(
    estimate: MemoryEstimate,
    train: Any,
    capacity_bytes: int,
    capacity_source: str = "",
    checkpointable: bool = True,
) -> StrategyChoice:
    """The strategy for ``train`` (a ``TrainSpec``) given one worker's ``estimate`` at its
    per-worker batch and the bytes it may use: :func:`choose_memory`'s choice as spec values.

    Activation checkpointing the spec already asks for stays on.

    Raises
    ------
    TrainingError
        If nothing fits: not FSDP with checkpointing at a micro-batch of one sample.
    """
    workers = train.num_workers
    choice = choose_memory(estimate, workers, capacity_bytes, checkpointable)
    if not choice.fits:
        raise TrainingError(
            f"train.strategy auto: one worker needs {choice.per_worker_bytes / 2**30:.2f} GiB "
            f"even as {choice.strategy} with micro-batches of {choice.micro_batch}, but may use "
            f"{choice.capacity_bytes / 2**30:.2f} GiB ({capacity_source or 'device memory'})",
            hint="raise train.num_workers (FSDP shards over them), use larger devices, or "
            "shrink the model",
        )
    return StrategyChoice(
        strategy="fsdp" if choice.sharded else "ddp",
        workers=workers,
        activation_checkpointing=choice.checkpointing or train.activation_checkpointing,
        batch_size=choice.micro_batch * workers,
        grad_accumulation=train.grad_accumulation * choice.accumulation,
        memory=choice,
        estimate=estimate,
        capacity_source=capacity_source,
    )


def apply_choice(train: Any, choice: StrategyChoice) -> Any:
    """``train`` (a ``TrainSpec``) as the workers run it under ``choice``."""
    return train.model_copy(
        update={
            "strategy": choice.strategy,
            "activation_checkpointing": choice.activation_checkpointing,
            "batch_size": choice.batch_size,
            "grad_accumulation": choice.grad_accumulation,
        }
    )


def checkpointable(job: Any) -> bool:
    """Whether ``job``'s model has layer stacks activation checkpointing can recompute
    (built on the meta device: no memory)."""
    import torch

    from engage.train.activation_checkpointing import apply_activation_checkpointing
    from engage.train.loop import build_model

    with torch.device("meta"):
        model = build_model(job)
    try:
        apply_activation_checkpointing(model, job.model.name)
    except SpecError:
        return False
    return True


def plan_for(job: Any, capacity: tuple[int, str] | None = None) -> StrategyChoice:
    """What ``auto`` chooses for ``job`` (an ``engage.train.loop.TrainJob``) on this node, or
    against ``capacity`` (bytes per worker and its source) when given.

    Raises
    ------
    TrainingError
        If the job fits no strategy (see :func:`decide`).
    """
    from engage.train.loop import build_model
    from engage.train.scaling.memory import estimate_memory

    train = job.train
    per_worker = max(1, train.batch_size // train.num_workers)
    shape = (per_worker, job.shape.window, job.shape.features)
    estimate = estimate_memory(lambda: build_model(job), shape, train.optimizer)
    cap, source = capacity if capacity is not None else worker_capacity(train)
    return decide(estimate, train, cap, source, checkpointable(job))


def resolve(job: Any) -> tuple[Any, StrategyChoice | None]:
    """``job`` with ``train.strategy: auto`` replaced by the choice (:func:`plan_for`), and the
    choice; a job that names its strategy comes back as it is, with None.

    Raises
    ------
    TrainingError
        If the job fits no strategy.
    """
    if job.train.strategy != "auto":
        return job, None
    choice = plan_for(job)
    return dataclasses.replace(job, train=apply_choice(job.train, choice)), choice
