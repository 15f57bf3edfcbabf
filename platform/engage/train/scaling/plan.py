"""The plan: the predicted curve over worker counts, the cheapest configuration that meets a
deadline, which communication remedy pays, and how the job fits in device memory.

Everything here is arithmetic on a calibrated :class:`~engage.train.scaling.model.ScalingModel`
and a :class:`~engage.train.scaling.memory.MemoryEstimate`; results are dataclasses the CLI
prints, plots and logs. Nothing here decides for the trainer; the plan recommends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engage.train.scaling.memory import MemoryEstimate
from engage.train.scaling.model import BatchMode, ScalingModel

PAYS_AT = 0.05
"""A remedy pays when it raises throughput at the chosen worker count by at least 5%."""
MEMORY_HEADROOM = 0.9
"""Share of device memory a plan may fill (the rest: allocator slack, the framework, buffers)."""
CHECKPOINT_ACTIVATION_SHARE = 1 / 3
"""Activations kept under per-layer activation checkpointing (an assumption: the layer inputs
of a stack of similar layers; the forward pass runs again in backward, about +33% compute)."""


@dataclass(frozen=True)
class PlanRow:
    """The prediction for one worker count."""

    workers: int
    per_worker_batch: float
    global_batch: float
    step_seconds: float
    comm_seconds: float
    throughput: float
    efficiency: float
    train_seconds: float
    cost: float
    meets_deadline: bool


@dataclass(frozen=True)
class Remedy:
    """One communication remedy at the chosen worker count and what it gains."""

    name: str
    compression: float
    rounds: int
    throughput: float
    efficiency: float
    gain: float

    @property
    def pays(self) -> bool:
        """Whether it raises throughput by at least :data:`PAYS_AT`."""
        return self.gain >= PAYS_AT


@dataclass(frozen=True)
class MemoryChoice:
    """How one worker fits its device: strategy, micro-batch and accumulation steps."""

    strategy: str
    micro_batch: int
    accumulation: int
    per_worker_bytes: int
    capacity_bytes: int

    @property
    def fits(self) -> bool:
        """Whether the chosen strategy fits the device."""
        return self.per_worker_bytes <= self.capacity_bytes

    @property
    def sharded(self) -> bool:
        """Whether the choice shards the model state (FSDP) rather than replicating it (DDP)."""
        return self.strategy.startswith("fsdp")

    @property
    def checkpointing(self) -> bool:
        """Whether the choice recomputes activations in backward (activation checkpointing)."""
        return "activation checkpointing" in self.strategy


@dataclass(frozen=True)
class Plan:
    """The whole plan: the curve, the choice (None when nothing meets the deadline), the
    remedies weighed at ``remedies_at`` workers (the chosen count, or the largest when none is
    chosen or the choice is one worker, which sends nothing) and the memory choice."""

    rows: list[PlanRow]
    best: PlanRow | None
    remedies: list[Remedy]
    memory: MemoryChoice
    reason: str
    remedies_at: int = 1


@dataclass(frozen=True)
class Economics:
    """What a job costs: epochs over ``samples`` training samples, at ``price`` per
    device-hour, within ``deadline_s`` (None: no deadline)."""

    epochs: int
    samples: int
    price: float
    deadline_s: float | None


def curve(
    model: ScalingModel, workers: list[int], batch: int, mode: BatchMode, econ: Economics
) -> list[PlanRow]:
    """The prediction for each worker count in ``workers``."""
    rows = []
    for n in workers:
        b = model.per_worker_batch(n, batch, mode)
        throughput = model.throughput(n, batch, mode)
        seconds = econ.epochs * econ.samples / throughput
        rows.append(
            PlanRow(
                workers=n,
                per_worker_batch=b,
                global_batch=b * n,
                step_seconds=model.step_seconds(n, b),
                comm_seconds=model.comm_seconds(n),
                throughput=throughput,
                efficiency=model.efficiency(n, batch, mode),
                train_seconds=seconds,
                cost=n * seconds / 3600 * econ.price,
                meets_deadline=econ.deadline_s is None or seconds <= econ.deadline_s,
            )
        )
    return rows


def cheapest(rows: list[PlanRow]) -> PlanRow | None:
    """The cheapest row that meets the deadline (the faster one on a tie); None if none does."""
    ok = [r for r in rows if r.meets_deadline]
    return min(ok, key=lambda r: (round(r.cost, 9), r.train_seconds)) if ok else None


def remedies(
    model: ScalingModel, workers: int, batch: int, mode: BatchMode, powersgd: dict[int, float]
) -> list[Remedy]:
    """Plain fp32, fp16/bf16 compression and PowerSGD at each rank in ``powersgd`` (rank to
    bytes ratio), each at ``workers`` workers, with its throughput gain over plain fp32."""
    options = [
        ("fp32 all-reduce", 1.0, 1),
        ("fp16 compression", 0.5, 1),
        ("bf16 compression", 0.5, 1),
    ]
    # PowerSGD all-reduces two factors (P and Q) per bucket: twice the latency term.
    options += [(f"PowerSGD rank {r}", ratio, 2) for r, ratio in sorted(powersgd.items())]
    base = model.throughput(workers, batch, mode)
    out = []
    for name, ratio, rounds in options:
        m = model.with_(compression=ratio, rounds=rounds)
        tp = m.throughput(workers, batch, mode)
        out.append(
            Remedy(name, ratio, rounds, tp, m.efficiency(workers, batch, mode), tp / base - 1)
        )
    return out


def choose_memory(
    est: MemoryEstimate, workers: int, capacity_bytes: int, checkpointable: bool = True
) -> MemoryChoice:
    """DDP if the worker fits, else activation checkpointing, else FSDP (sharding parameters,
    gradients and optimiser state over ``workers``), else FSDP with checkpointing and the
    largest micro-batch that fits, with gradient accumulation making up the batch.

    This one function decides for ``engage plan`` and for the trainer's ``train.strategy:
    auto`` (:mod:`~engage.train.scaling.strategy`). A micro-batch divides the per-worker
    batch exactly, so micro-batch x accumulation steps is the batch, not more.

    Parameters
    ----------
    est : MemoryEstimate
        One worker's memory at its per-worker batch.
    workers : int
        Workers to shard over (FSDP is only a candidate from two).
    capacity_bytes : int
        The device's memory; :data:`MEMORY_HEADROOM` of it is usable.
    checkpointable : bool
        Whether the model has layer stacks activation checkpointing can recompute; without,
        the candidates with checkpointing are left out.
    """
    cap = int(capacity_bytes * MEMORY_HEADROOM)
    ckpt = _checkpointed(est)
    candidates = [("ddp", est)]
    candidates += [("ddp + activation checkpointing", ckpt)] if checkpointable else []
    if workers > 1:
        candidates += [("fsdp", est.sharded(workers))]
        candidates += (
            [("fsdp + activation checkpointing", ckpt.sharded(workers))] if checkpointable else []
        )
    for name, e in candidates:
        if e.total <= cap:
            return MemoryChoice(name, est.batch, 1, e.total, cap)
    name, last = candidates[-1]
    per_sample = last.activations / max(est.batch, 1)
    room = cap - (last.total - last.activations)
    micro = int(room // per_sample) if per_sample > 0 and room > 0 else 0
    if micro < 1:
        return MemoryChoice(name, 1, est.batch, last.at_batch(1).total, cap)
    steps = _exact_steps(est.batch, min(micro, est.batch))
    micro = est.batch // steps
    return MemoryChoice(f"{name}, micro-batches", micro, steps, last.at_batch(micro).total, cap)


def _exact_steps(batch: int, micro: int) -> int:
    """The fewest accumulation steps that split ``batch`` evenly into micro-batches of at most
    ``micro`` (a prime batch: one sample each)."""
    return next(s for s in range(math.ceil(batch / micro), batch + 1) if batch % s == 0)


def _checkpointed(est: MemoryEstimate) -> MemoryEstimate:
    act = round(est.activations * CHECKPOINT_ACTIVATION_SHARE)
    return MemoryEstimate(est.params, est.grads, est.optimizer, act, est.batch)


def make_plan(
    model: ScalingModel,
    workers: list[int],
    batch: int,
    mode: BatchMode,
    econ: Economics,
    powersgd: dict[int, float],
    memory: MemoryEstimate,
    capacity_bytes: int,
) -> Plan:
    """The plan for ``workers``: curve, cheapest configuration, remedies, memory choice.

    ``memory`` is the estimate at the spec's per-worker batch; it is rescaled to the chosen
    configuration's per-worker batch.
    """
    rows = curve(model, workers, batch, mode, econ)
    best = cheapest(rows)
    if best is not None:
        reason = f"{best.workers} worker(s) is the cheapest configuration" + (
            " that meets the deadline" if econ.deadline_s is not None else ""
        )
    else:
        fastest = min(rows, key=lambda r: r.train_seconds)
        reason = (
            f"no configuration meets the deadline; the fastest, {fastest.workers} worker(s), "
            f"takes {fastest.train_seconds / 3600:.2f} h"
        )
    at = best or max(rows, key=lambda r: r.workers)
    widest = max(rows, key=lambda r: r.workers)
    weigh_at = at.workers if at.workers > 1 else widest.workers
    weighed = remedies(model, weigh_at, batch, mode, powersgd)
    per_worker = max(1, round(at.per_worker_batch))
    choice = choose_memory(memory.at_batch(per_worker), at.workers, capacity_bytes)
    return Plan(rows, best, weighed, choice, reason, weigh_at)
