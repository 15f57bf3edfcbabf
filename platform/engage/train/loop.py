"""The Ray Train loop run by every worker: data-parallel training with DDP.

Every worker sees the same seeded permutation each epoch and trains on its own slice of
it, so a run is reproducible for a given seed and worker count. Rank 0 reports epoch
metrics through the job's reporter and writes the checkpoint.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engage.errors import TrainingError
from engage.runtime.reporting import HubTransport, Reporter
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape, get_builder
from engage.train.evaluate import accumulate, finalize, loss_function, targets_for_loss

CHECKPOINT_FILE = "model.pt"
_PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class TrainJob:
    """Everything a worker needs; travels to workers in ``train_loop_config``."""

    train: TrainSpec
    model: ModelSpec
    task: str
    shape: ModelShape
    data_ref: Any  # ObjectRef to {"train_x", "train_y", "val_x", "val_y"} numpy arrays
    hub: Any  # EventHub actor handle
    run_id: str


def make_optimizer(spec: TrainSpec, params: Any) -> torch.optim.Optimizer:
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kwargs: dict[str, Any] = {"lr": spec.learning_rate, "weight_decay": spec.weight_decay}
    if spec.optimizer == "sgd":
        kwargs["momentum"] = 0.9
    return kinds[spec.optimizer](params, **kwargs)


def build_model(job: TrainJob) -> nn.Module:
    torch.manual_seed(job.train.seed)
    return get_builder(job.model.name).build(job.shape, job.model.params)


def _all_reduce(t: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return t


def _restore(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Resume from the latest checkpoint after a worker restart; returns the next epoch."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 1
    with checkpoint.as_directory() as d:
        state = torch.load(Path(d) / CHECKPOINT_FILE, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


def _report(metrics: dict[str, float], epoch: int, job: TrainJob, rank: int, state: dict) -> None:
    import ray.train

    every = job.train.checkpoint_every
    if rank != 0 or (epoch % every and epoch != job.train.epochs):
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save(state, Path(d) / CHECKPOINT_FILE)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Entry point Ray Train calls on each worker with ``{"job": TrainJob}``."""
    import ray
    import ray.train
    import ray.train.torch

    job: TrainJob = config["job"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    reporter = Reporter(HubTransport(job.hub), {"rank": str(rank)})
    data = ray.get(job.data_ref)
    x, y = torch.from_numpy(data["train_x"]), torch.from_numpy(data["train_y"])
    val_x, val_y = data["val_x"][rank::world], data["val_y"][rank::world]
    val_x, val_y = torch.from_numpy(val_x), torch.from_numpy(val_y)

    model = ray.train.torch.prepare_model(build_model(job))
    core = getattr(model, "module", model)
    device = ray.train.torch.get_device()
    optimizer = make_optimizer(job.train, model.parameters())
    loss_fn = loss_function(job.task)
    per_worker = max(1, job.train.batch_size // world)
    n_per = len(x) // world
    steps = math.ceil(n_per / per_worker)
    n_classes = job.shape.outputs

    for epoch in range(_restore(core, optimizer), job.train.epochs + 1):
        g = torch.Generator().manual_seed(job.train.seed * 1_000_003 + epoch)
        shard = torch.randperm(len(x), generator=g)[rank * n_per : (rank + 1) * n_per]
        started = last_tick = time.perf_counter()
        loss_sum = wait = 0.0
        for step in range(steps):
            t0 = time.perf_counter()
            idx = shard[step * per_worker : (step + 1) * per_worker]
            xb, yb = x[idx].to(device), targets_for_loss(y[idx], job.task).to(device)
            wait += time.perf_counter() - t0
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(idx)
            if rank == 0 and time.perf_counter() - last_tick > _PROGRESS_EVERY_S:
                last_tick = time.perf_counter()
                reporter.progress("step", epoch=epoch, step=step + 1, steps=steps)
        seconds = time.perf_counter() - started
        totals = _all_reduce(torch.tensor([loss_sum, float(n_per), wait], dtype=torch.float64))
        val = _all_reduce(accumulate(core, val_x, val_y, job.task, n_classes, per_worker * 4))
        metrics = {
            "train_loss": totals[0].item() / totals[1].item(),
            **finalize(val, job.task, "val"),
            "samples_per_second": totals[1].item() / seconds,
            "epoch_seconds": seconds,
            "data_wait_seconds": totals[2].item() / world,
        }
        if rank == 0:
            reporter.metrics(metrics, step=epoch)
            reporter.progress("epoch", epoch=epoch, epochs=job.train.epochs, **metrics)
            reporter.flush()
        if not math.isfinite(metrics["train_loss"]):
            reporter.flush(wait=True)
            raise TrainingError(
                f"train_loss became {metrics['train_loss']} in epoch {epoch}",
                hint="lower train.learning_rate or check the data for extreme values",
            )
        state = {
            "model": core.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
            "metrics": metrics,
        }
        _report(metrics, epoch, job, rank, state)
    reporter.flush(wait=True)
