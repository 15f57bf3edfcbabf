"""The Ray Train loop run by every worker: data-parallel training with DDP.

Every worker sees the same seeded order each epoch
(:func:`engage.data.batch_order.epoch_order`) and trains on its own slice of it, so a run
is reproducible for a given seed and worker count. A streamed training split
(``TrainJob.streamed``) reaches each worker as its Ray Data shard instead, read in blocks
with prefetch, augmented with the epoch's draws as each block arrives
(:func:`engage.data.streaming.epoch_blocks`) and re-batched in the same order by
:func:`engage.data.batch_order.shuffled_batches` (one shuffle buffer held at a time); with
several workers, each reads the chunks of its own share of the order
(:class:`engage.data.stream_ingest.StreamIngest`), so it trains on its in-memory batches.
Rank 0 reports epoch metrics through the job's reporter and writes the checkpoint. A
regression network learns targets standardised with the training split's mean and std
(:class:`TargetScaled`).

Checkpoints are verified folders (:mod:`engage.train.checkpoint`) holding the model,
optimiser, gradient scaler and RNG states and the data position (the next epoch: each
epoch's permutation comes from the seed, so the position is the epoch). After a worker
failure Ray Train restarts every worker (``train.max_failures``); they resume from the
newest valid checkpoint and rank 0 reports a ``restart`` event. ``train.precision`` and
``train.grad_accumulation`` shape each step (:mod:`engage.train.precision`); inner
accumulation steps skip DDP's gradient all-reduce (``no_sync``).

Every step reports where its time went (:func:`step_breakdown`): ``data_wait_seconds``
(blocked on the next batch), ``host_to_device_seconds`` (the batch's copy to the device)
and ``compute_seconds``, per worker (label ``rank``), through the job's reporter; the
monitor's data stall ratio is the wait's share of their sum. A streamed split's Ray Data
statistics are reported once at the end (:func:`report_ray_data_stats`).

Only :func:`train_loop_per_worker` and the helpers that read the Ray Train context need Ray;
:func:`make_worker` and :func:`train_epoch` run without it (the unit tests train that way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engage.data.batch_order import epoch_order, shuffled_batches
from engage.data.streaming import AUGMENT_CONFIG, SPAN_CONFIG, epoch_blocks, rank_span
from engage.errors import TrainingError
from engage.events import HubTransport, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.activation_checkpointing import apply_activation_checkpointing
from engage.train.builders import ModelShape, get_builder
from engage.train.checkpoint import PAYLOAD
from engage.train.comm import CommTimer, apply_comm, ddp_kwargs
from engage.train.evaluate import (
    accumulate,
    finalize,
    loss_function,
    targets_for_loss,
    training_loss,
)
from engage.train.models import TargetScaled
from engage.train.plugins import import_model_module
from engage.train.precision import Precision, make_precision
from engage.train.recovery import (
    checkpoint_state,
    count_start,
    maybe_kill,
    report_epoch,
    restore,
    sharded_checkpoint,
)
from engage.train.sharding import evaluation, gather_state, prepare
from engage.train.step_times import EpochTimes, report_ray_data_stats, step_breakdown

CHECKPOINT_FILE = PAYLOAD
_STREAM_BLOCK = 4096  # windows per block read from a Ray Data shard (then re-batched)
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
    checkpoint_root: str | None = None  # the Ray Train run folder; set by trainer.fit
    shuffle_buffer: int = 65_536  # data.shuffle_buffer: windows shuffled together (batch_order)
    streamed: int | None = None  # training windows, when they reach workers as Ray Data shards
    prefetch_batches: int = 2  # blocks a streamed shard reads ahead (train.loader: auto tunes it)
    # The augmentation run on the in-memory train_x at the start of every epoch (with that
    # epoch's draws), when train_x is a cache of the deterministic features
    # (engage.train.loader_tune.cache_features); None: train_x is the model input as it is.
    augment: Any = None
    # With ``augment``: each worker prepares the next epoch's augmented inputs in a
    # background thread while the current epoch trains (train.loader: auto's loader thread;
    # engage.data.preprocess.ahead.EpochInputs). The same inputs, so the same batches.
    augment_ahead: bool = False


def make_optimizer(spec: TrainSpec, params: Any) -> torch.optim.Optimizer:
    """The optimizer ``spec.optimizer`` names over ``params``, with the spec's learning rate and
    weight decay (SGD adds momentum 0.9).
    """
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kwargs: dict[str, Any] = {"lr": spec.learning_rate, "weight_decay": spec.weight_decay}
    if spec.optimizer == "sgd":
        kwargs["momentum"] = 0.9
    return kinds[spec.optimizer](params, **kwargs)


def build_model(job: TrainJob) -> nn.Module:
    """The job's model from its registered builder, initialised from ``job.train.seed``.

    A regression model comes wrapped in :class:`TargetScaled` (statistics 0 and 1 until
    :meth:`TargetScaled.fit` or a checkpoint sets them), so its outputs are in target units.

    Raises
    ------
    KeyError
        If ``job.model.name`` is not a registered builder (the spec check catches this first).
    """
    if job.model.module is not None:  # a fresh worker process has not imported it yet
        import_model_module(job.model.module)
    torch.manual_seed(job.train.seed)
    model = get_builder(job.model.name).build(job.shape, job.model.params)
    return model if job.task == "classification" else TargetScaled(model)


def training_model(job: TrainJob) -> nn.Module:
    """:func:`build_model`, with ``train.activation_checkpointing`` applied when the spec asks.

    Raises
    ------
    SpecError
        If checkpointing is asked for a model with no layer stack to checkpoint.
    """
    model = build_model(job)
    if job.train.activation_checkpointing:
        apply_activation_checkpointing(model, job.model.name)
    return model


def _all_reduce(t: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return t


@dataclass
class Worker:
    """One worker's view of the job: its data shard, model and reporter."""

    job: TrainJob
    rank: int
    world: int
    reporter: Reporter
    x: torch.Tensor
    y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    model: nn.Module
    optimizer: torch.optim.Optimizer
    device: Any
    precision: Precision
    comm: CommTimer | None = None  # all-reduce timing when train.comm asks for it (DDP only)
    shard: Any = None  # the Ray Data shard iterator of a streamed training split
    # The shard's windows [lo, hi) of the split when it is this worker's own dataset
    # (engage.data.stream_ingest); None: Ray Data's streaming split dealt its blocks.
    span: tuple[int, int] | None = None
    inputs: Any = None  # the EpochInputs of a job with augment_ahead, made on first use

    @property
    def rows(self) -> int:
        """Training windows in the whole split (in memory or streamed)."""
        return len(self.y) if self.job.streamed is None else self.job.streamed

    @property
    def per_worker(self) -> int:
        """One worker's batch size: the spec's global batch split over the workers (at least 1)."""
        return max(1, self.job.train.batch_size // self.world)

    @property
    def n_per(self) -> int:
        """Training rows each worker sees per epoch (the same for all; the rest is left out)."""
        return self.rows // self.world


def _sync(model: nn.Module, step_now: bool) -> contextlib.AbstractContextManager:
    """Gradients are reduced only before an optimiser step: on inner accumulation steps,
    DDP's ``no_sync``, or FSDP's ``set_requires_gradient_sync(False)`` (its gradients then
    accumulate unsharded until the step's micro-batch reduce-scatters them)."""
    if step_now:
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):
        return _fsdp_no_sync(model)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _group_rows(w: Worker, step: int, steps: int) -> int:
    """Rows in the accumulation group of ``step``, to weight each batch's loss by its share."""
    accum = w.job.train.grad_accumulation
    first = step - step % accum
    last = min(first + accum, steps)
    return min(last * w.per_worker, w.n_per) - first * w.per_worker


def memory_batches(w: Worker, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This worker's batches of the in-memory split: its slice of the epoch's order.

    With a features cache (``job.augment``), the epoch's augmentation runs over the cache
    first (its time counts as the first step's data wait), or, with ``job.augment_ahead``,
    ran in a background thread during the epoch before (epoch 1's, and a resumed run's
    first, are computed here).
    """
    order = epoch_order(len(w.y), w.job.train.seed, epoch, w.job.shuffle_buffer)
    if w.job.augment is None:
        x = w.x
    elif w.job.augment_ahead:
        if w.inputs is None:
            from engage.data.preprocess.ahead import EpochInputs

            w.inputs = EpochInputs(w.x, w.job.augment, w.job.train.epochs)
        x = w.inputs.get(epoch)
    else:
        x = epoch_inputs(w.x, w.job.augment, epoch)
    for idx in order[w.rank * w.n_per : (w.rank + 1) * w.n_per].split(w.per_worker):
        yield x[idx], w.y[idx]


def epoch_inputs(features: torch.Tensor, augment: Any, epoch: int) -> torch.Tensor:
    """The model inputs of epoch ``epoch``: ``augment`` (a FittedPreprocess) run over the
    cached ``features`` of the whole training split, with that epoch's draws (the same
    windows whatever the worker count: the draws follow each window's index in the split)."""
    out, _ = augment.transform(features.numpy(), train=True, epoch=epoch)
    return torch.from_numpy(out)


def attach_shard(w: Worker, shard: Any) -> None:
    """Give ``w`` its Ray Data ``shard`` of a streamed split, with what the dataset's
    context says of it: the split's per-epoch augmentation (``job.augment`` then runs on
    every block the shard yields, with the epoch's draws) and the shard's span, when it is
    this worker's own dataset (:class:`engage.data.stream_ingest.StreamIngest`).

    Raises
    ------
    ValueError
        If the span is not the one this worker's share of the order needs.
    """
    context = shard.get_context()
    span = context.get_config(SPAN_CONFIG)
    if span is not None and tuple(span) != rank_span(w.rows, w.world, w.rank, w.job.shuffle_buffer):
        raise ValueError(f"worker {w.rank} of {w.world} was given windows {span} of the split")
    w.shard, w.span = shard, None if span is None else tuple(span)
    w.job = dataclasses.replace(w.job, augment=context.get_config(AUGMENT_CONFIG))


def epoch_batches(w: Worker, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This worker's batches of epoch ``epoch``: from its Ray Data shard when the split
    streams, else from memory; the same batches either way for the same seed (with several
    workers, when each reads its own span: :class:`engage.data.stream_ingest.StreamIngest`)."""
    return _stream_batches(w, epoch) if w.shard is not None else memory_batches(w, epoch)


def _stream_batches(w: Worker, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This worker's batches of its Ray Data shard, in the same order as in memory: each
    block augmented with the epoch's draws as it arrives (when the preprocessing augments)."""
    read = iter(  # one pass: a Ray Data iterable starts a new one on every iter()
        w.shard.iter_torch_batches(
            batch_size=_STREAM_BLOCK, prefetch_batches=w.job.prefetch_batches
        )
    )
    blocks = epoch_blocks(read, w.job.augment, epoch, w.rows)
    # A span holds the chunks of the worker's positions in the whole split's order; Ray
    # Data's streaming split is the worker's share, shuffled on its own.
    first, total = (w.rank * w.n_per, w.rows) if w.span is not None else (0, None)
    yield from shuffled_batches(
        blocks,
        seed=w.job.train.seed,
        epoch=epoch,
        buffer=w.job.shuffle_buffer,
        batch=w.per_worker,
        limit=w.n_per,
        first=first,
        total=total,
    )
    for _ in read:  # rows past this worker's equal share, if Ray Data gave any (not augmented)
        pass


def _epoch(w: Worker, epoch: int, resources: ResourceSampler) -> EpochTimes:
    """Train one epoch; returns this worker's loss sum and step time breakdown."""
    job, faults = w.job, w.job.train.faults
    batches = epoch_batches(w, epoch)
    steps = math.ceil(w.n_per / w.per_worker)
    accum = job.train.grad_accumulation
    loss_fn = loss_function(job.task)
    clock = time.perf_counter
    started = last_tick = clock()
    out = EpochTimes()
    for step in range(steps):
        t0 = clock()
        if faults is not None and faults.data_delay_seconds:
            time.sleep(faults.data_delay_seconds)  # a deliberately slow input pipeline
        if step == steps // 2:
            maybe_kill(w, epoch)
        xb, yb = next(batches)
        t_fetch = clock()
        xb, yb = xb.to(w.device), targets_for_loss(yb, job.task).to(w.device)
        t1 = clock()
        step_now = (step + 1) % accum == 0 or step == steps - 1
        with _sync(w.model, step_now):
            with w.precision.autocast():
                logits = w.model(xb).float()  # the loss in fp32 whatever the autocast dtype
            loss = training_loss(w.model, logits, yb, job.task, loss_fn)
            w.precision.backward(loss * (len(yb) / _group_rows(w, step, steps)))
        if step_now:
            w.precision.step(w.optimizer)
            w.optimizer.zero_grad(set_to_none=True)
        out.loss_sum += loss.item() * len(yb)
        t2 = clock()
        out.wait += t_fetch - t0
        out.copy += t1 - t_fetch
        out.compute += t2 - t1
        global_step = (epoch - 1) * steps + step + 1
        comm = w.comm.step_metrics() if w.comm is not None and step_now else {}
        w.reporter.metrics(
            {**step_breakdown(t0, t_fetch, t1, t2), "samples": len(yb), **comm},
            step=global_step,
        )
        resources.maybe_report(w.reporter, global_step)
        if w.rank == 0 and t2 - last_tick > _PROGRESS_EVERY_S:
            last_tick = t2
            w.reporter.progress("step", epoch=epoch, step=step + 1, steps=steps)
    for _ in batches:  # a streamed shard is read to its end: the next epoch starts afresh
        pass
    out.seconds = clock() - started
    return out


def _epoch_metrics(w: Worker, epoch: int, times: EpochTimes) -> dict[str, float]:
    parts = [times.loss_sum, float(w.n_per), times.wait, times.copy, times.compute]
    totals = _all_reduce(torch.tensor(parts, dtype=torch.float64))
    core = getattr(w.model, "module", w.model)
    with evaluation(w.model):  # FSDP: gathered once, so ranks may run unequal batch counts
        val = accumulate(core, w.val_x, w.val_y, w.job.task, w.job.shape.outputs, w.per_worker * 4)
    return {
        "epoch": float(epoch),
        "train_loss": totals[0].item() / totals[1].item(),
        **finalize(_all_reduce(val), w.job.task, "val"),
        "samples_per_second": totals[1].item() / times.seconds,
        "epoch_seconds": times.seconds,
        # each part summed over the workers, then averaged: one worker's mean epoch
        "epoch_data_wait_seconds": totals[2].item() / w.world,
        "epoch_host_to_device_seconds": totals[3].item() / w.world,
        "epoch_compute_seconds": totals[4].item() / w.world,
    }


def make_worker(
    job: TrainJob,
    data: dict[str, Any],
    reporter: Reporter,
    *,
    rank: int = 0,
    world: int = 1,
    device: Any = "cpu",
    prepare: Callable[[nn.Module], nn.Module] = lambda m: m,
) -> Worker:
    """One worker's view of ``job`` over ``data`` (numpy arrays ``train_x``, ``train_y``,
    ``val_x``, ``val_y``): the seeded model (a regression model's target statistics fitted
    on the whole training split, the same on every worker), its optimizer and its val shard.
    A streamed split (``job.streamed``) has no ``train_x``/``train_y``: its target
    statistics come as floats ``target_mean`` and ``target_std`` from the streaming pass.

    ``prepare`` wraps the model for distributed training (Ray Train's ``prepare_model``);
    the default leaves it as it is, for a single process.
    """
    streamed = "train_y" not in data
    y = torch.empty(0) if streamed else torch.from_numpy(data["train_y"])
    model = training_model(job)
    if isinstance(model, TargetScaled) and streamed:
        model.target_mean.fill_(data["target_mean"])
        model.target_std.fill_(data["target_std"])
    elif isinstance(model, TargetScaled):
        model.fit(y)
    model = prepare(model)
    return Worker(
        job=job,
        rank=rank,
        world=world,
        reporter=reporter,
        x=torch.empty(0) if streamed else torch.from_numpy(data["train_x"]),
        y=y,
        val_x=torch.from_numpy(data["val_x"][rank::world]),
        val_y=torch.from_numpy(data["val_y"][rank::world]),
        model=model,
        optimizer=make_optimizer(job.train, model.parameters()),
        device=device,
        precision=make_precision(job.train.precision, device),
    )


def _setup(job: TrainJob) -> Worker:
    import ray
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    comm = job.train.comm
    w = make_worker(
        job,
        ray.get(job.data_ref),
        Reporter(HubTransport(job.hub), {"rank": str(rank)}),
        rank=rank,
        world=world,
        device=ray.train.torch.get_device(),
        prepare=lambda m: prepare(m, job.train.strategy, ddp_kwargs(comm)),
    )
    w.comm = apply_comm(w.model, comm)  # the compression hook, and its timer when asked
    if job.streamed is not None:
        attach_shard(w, ray.train.get_dataset_shard("train"))
    return w


def train_epoch(w: Worker, epoch: int, resources: ResourceSampler) -> dict[str, float]:
    """Train epoch ``epoch`` and return its metrics (rank 0 reports them).

    Raises
    ------
    TrainingError
        If the training loss became NaN or infinite.
    """
    metrics = _epoch_metrics(w, epoch, _epoch(w, epoch, resources))
    if w.rank == 0:
        w.reporter.metrics(metrics, step=epoch)
        w.reporter.progress("epoch", epochs=w.job.train.epochs, **metrics)
    w.reporter.flush()
    if not math.isfinite(metrics["train_loss"]):
        w.reporter.flush(wait=True)
        raise TrainingError(
            f"train_loss became {metrics['train_loss']} in epoch {epoch}",
            hint="lower train.learning_rate or check the data for extreme values",
        )
    return metrics


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Entry point Ray Train calls on each worker with ``{"job": TrainJob}``.

    Trains from the newest valid checkpoint (or epoch 1) to ``job.train.epochs``; rank 0
    reports each epoch's metrics, writes the checkpoints and, on a restart within the same
    job, reports a ``restart`` lifecycle event.

    Raises
    ------
    TrainingError
        If the training loss becomes NaN or infinite.
    """
    import ray.train

    job: TrainJob = config["job"]
    w = _setup(job)
    core = getattr(w.model, "module", w.model)
    w.reporter.lifecycle("train_start", world_size=w.world)
    start = restore(w, core, ray.train.get_checkpoint())
    attempt = count_start(job) if w.rank == 0 else 1
    if attempt > 1:
        w.reporter.lifecycle("restart", attempt=attempt, epoch=start)
    resources = ResourceSampler(w.device)
    faults = job.train.faults
    for epoch in range(start, job.train.epochs + 1):
        metrics = train_epoch(w, epoch, resources)
        # FSDP: every rank gathers the full state (a collective); rank 0 writes it.
        full = gather_state(w.model, w.optimizer) if sharded_checkpoint(w, epoch) else None
        state = lambda e=epoch, m=metrics, f=full: checkpoint_state(w, core, e, m, f)  # noqa: E731
        report_epoch(metrics, epoch, job, w.rank, state)
        if faults is not None and faults.stall_after_epoch == epoch:
            time.sleep(faults.stall_seconds)  # a deliberate hang, to test the stall alert
    if w.inputs is not None:  # the epochs' background thread: nothing is left to prepare
        w.inputs.close()
    if w.rank == 0 and w.shard is not None:
        report_ray_data_stats(w.reporter, w.shard)
    w.reporter.flush(wait=True)
