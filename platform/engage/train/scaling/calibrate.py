"""Calibration of the scaling model on this machine: a few real training steps of the spec's
model, built exactly as the training loop builds it.

One worker's step is timed phase by phase (forward, backward, optimiser) at two batch sizes,
which separates the per-sample cost from the fixed per-step cost; the gradient bytes and the
parameter shapes come from the model, the FLOPs per sample from torch's FLOP counter. The
timing uses as many threads as one training worker gets (``train.resources_per_worker.CPU``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engage.train.scaling.model import StepProfile

Clock = Callable[[], float]


@dataclass(frozen=True)
class Calibration:
    """What the calibration measured: the step profile and the model's size and FLOPs.

    ``param_shapes`` are the trainable parameters' shapes (PowerSGD compresses the matrices
    among them); ``flops_per_sample`` counts forward and backward.
    """

    step: StepProfile
    params: int
    param_shapes: tuple[tuple[int, ...], ...]
    flops_per_sample: float
    batch: int
    threads: int

    @property
    def host_flops(self) -> float:
        """FLOP/s one worker reached here (the base a named device's speed is relative to)."""
        return self.flops_per_sample / max(self.step.seconds_per_sample, 1e-12)


def powersgd_ratio(shapes: tuple[tuple[int, ...], ...], rank: int) -> float:
    """Bytes PowerSGD sends per gradient byte at ``rank``: each matrix ``n x m`` (a tensor of
    more dimensions reshaped to ``shape[0] x rest``) sends ``rank * (n + m)`` values when that
    is fewer, vectors are sent whole."""
    full = sent = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = max(1, int(torch.Size(shape).numel()) // max(n, 1))
        full += n * m
        sent += min(n * m, rank * (n + m)) if len(shape) > 1 else n * m
    return sent / full if full else 1.0


@contextmanager
def _threads(n: int) -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def random_batch(
    shape: tuple[int, int, int], batch: int, task: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch for ``shape`` (window, features, outputs): inputs and targets as the
    loss of ``task`` expects them (timing does not depend on the values)."""
    window, features, outputs = shape
    x = torch.randn(batch, window, features)
    if task == "classification":
        return x, torch.randint(0, max(outputs, 2), (batch,))
    return x, torch.randn(batch, 1)


def time_phases(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batch: tuple[torch.Tensor, torch.Tensor],
    steps: int,
    clock: Clock = time.perf_counter,
) -> tuple[float, float, float]:
    """Median seconds of (forward with loss, backward, optimiser step) over ``steps`` steps,
    after one warm-up step."""
    x, y = batch
    samples: list[tuple[float, float, float]] = []
    for i in range(steps + 1):
        t0 = clock()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        t1 = clock()
        loss.backward()
        t2 = clock()
        optimizer.step()
        t3 = clock()
        if i:  # the first step allocates the optimiser state
            samples.append((t1 - t0, t2 - t1, t3 - t2))
    return tuple(statistics.median(s[k] for s in samples) for k in range(3))  # type: ignore[return-value]


def fit_step(
    big: tuple[int, float], small: tuple[int, float], backward_fraction: float, grad_bytes: float
) -> StepProfile:
    """The step profile through two (batch, seconds) points: ``t = overhead + batch * per_sample``.

    When the two points give no positive slope (noise on a tiny model) the whole time of the
    larger batch counts as per-sample time.
    """
    (b1, t1), (b0, t0) = big, small
    slope = (t1 - t0) / (b1 - b0) if b1 != b0 else 0.0
    if slope <= 0:
        slope = t1 / b1
    overhead = max(0.0, t1 - slope * b1)
    return StepProfile(slope, overhead, backward_fraction, grad_bytes)


def count_flops(
    model: nn.Module, loss_fn: Callable, batch: tuple[torch.Tensor, torch.Tensor]
) -> float:
    """FLOPs of one forward and backward pass over ``batch``, per sample."""
    from torch.utils.flop_counter import FlopCounterMode

    x, y = batch
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / len(x)


def calibrate(
    job: Any, batch: int, steps: int = 10, clock: Clock = time.perf_counter
) -> Calibration:
    """Time ``steps`` training steps of ``job``'s model at per-worker ``batch`` and a quarter of it.

    ``job`` is an ``engage.train.loop.TrainJob`` (data and hub may be None); the model, the
    optimiser and the loss are the training loop's own.
    """
    from engage.train.evaluate import loss_function, training_loss
    from engage.train.loop import build_model, make_optimizer

    threads = int(job.train.resources_per_worker.get("CPU", 1))
    model = build_model(job)
    optimizer = make_optimizer(job.train, model.parameters())
    crit = loss_function(job.task)

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loop's training loss (standardised units for a regression model)."""
        return training_loss(model, out, y, job.task, crit)

    shape = (job.shape.window, job.shape.features, job.shape.outputs)
    small = max(1, batch // 4)
    with _threads(threads):
        big_t = time_phases(
            model, optimizer, loss_fn, random_batch(shape, batch, job.task), steps, clock
        )
        small_t = time_phases(
            model, optimizer, loss_fn, random_batch(shape, small, job.task), steps, clock
        )
        flops = count_flops(model, loss_fn, random_batch(shape, small, job.task))
    trainable = [p for p in model.parameters() if p.requires_grad]
    grad_bytes = float(sum(p.numel() * p.element_size() for p in trainable))
    step = fit_step(
        (batch, sum(big_t)), (small, sum(small_t)), big_t[1] / max(sum(big_t), 1e-12), grad_bytes
    )
    return Calibration(
        step=step,
        params=sum(p.numel() for p in model.parameters()),
        param_shapes=tuple(tuple(p.shape) for p in trainable),
        flops_per_sample=flops,
        batch=batch,
        threads=threads,
    )
