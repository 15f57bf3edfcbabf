"""Measured runs on the Ray cluster: all-reduce timings and DDP steps on 1 and N gloo workers.

Each worker is a Ray actor in one gloo process group (rendezvous on loopback, as engage's
embedded cluster is). The probe times ``all_reduce`` over a few tensor sizes, from which
:func:`fit_network` reads the bandwidth and the per-hop latency, and times real DDP steps of
the spec's model (built by the training loop's own :func:`~engage.train.loop.build_model`)
with the communication timer of :mod:`engage.train.comm`, which gives the measured overlap,
interleaved with plain steps (alone, and every worker at once: the node's contention) and DDP
steps whose hook sends nothing (DDP's own work per step, :func:`ddp_overhead`).
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from engage.train.scaling.model import Network

DEFAULT_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22)
"""Bytes of the tensors the probe all-reduces: 4 KiB to 4 MiB."""


@dataclass(frozen=True)
class ProbeResult:
    """What the probe measured on ``workers`` workers.

    ``allreduce`` maps bytes to median seconds; ``step_seconds`` is the median DDP step at
    ``batch`` samples per worker and ``comm`` the median of the timer's step figures;
    ``local_seconds`` the median step of the plain model (no gradient exchange) with every
    worker stepping at once (the slowest worker's): the compute of a step under the node's
    contention; ``alone_seconds`` (more than one worker) the median plain step of rank 0 while
    the others wait, interleaved with those: one worker's step under the same load. The
    ``_min`` twins are the fastest repeat: on a machine shared with other work the median
    includes waiting for a core, the minimum mostly does not. ``ddp_overhead`` (more than one
    worker) is what DDP's own work adds to a step beside the all-reduce (:func:`ddp_overhead`),
    timed between the others under the same load. ``local_times`` are the slowest worker's
    plain steps with every worker stepping, ``allreduce_times`` rank 0's all-reduce seconds
    inside each DDP step (how the two spread: :func:`~engage.train.scaling.model.median_of_sums`).
    """

    workers: int
    batch: int
    allreduce: dict[int, float]
    step_seconds: float
    comm: dict[str, float] = field(default_factory=dict)
    allreduce_min: dict[int, float] = field(default_factory=dict)
    step_min: float = 0.0
    step_times: tuple[float, ...] = ()
    local_seconds: float = 0.0
    local_min: float = 0.0
    alone_seconds: float = 0.0
    ddp_overhead: float = 0.0
    local_times: tuple[float, ...] = ()
    allreduce_times: tuple[float, ...] = ()

    @property
    def jitter(self) -> tuple[float, ...]:
        """The slowest worker's step times over their mean (the model's straggler input)."""
        if not self.step_times:
            return ()
        mean = statistics.fmean(self.step_times)
        return tuple(t / mean for t in self.step_times)


def contention(one: ProbeResult, many: ProbeResult) -> float:
    """How much longer one worker's compute takes while ``many.workers`` workers compute at once
    than alone (``one``: a 1-worker probe), by median local steps; 1.0 when either is unmeasured.

    The steps ``many`` timed alone, interleaved with the shared ones, are the reference when
    it has them: on a machine whose other load comes and goes, a 1-worker probe run earlier
    saw another machine.
    """
    alone = many.alone_seconds if many.alone_seconds > 0 else one.local_seconds
    if alone <= 0 or many.local_seconds <= 0:
        return 1.0
    return many.local_seconds / alone


def ddp_overhead(plain: list[float], ddp: list[float]) -> float:
    """Seconds DDP's own work adds to a step: the median over paired repeats of a DDP step whose
    communication hook exchanges nothing less the plain step.

    Both are timed on every worker at once, back to back, so both halves of a pair see the
    same load and the same contention, and the difference is what DDP does beside sending
    gradients: its forward bookkeeping, the autograd hooks that copy each gradient into its
    bucket, the hook's future, and copying the buckets back into the gradients.

    Raises
    ------
    ValueError
        If the lists differ in length or are empty.
    """
    if not plain or len(plain) != len(ddp):
        raise ValueError(f"ddp_overhead needs paired timings, got {len(plain)} and {len(ddp)}")
    return statistics.median(d - p for p, d in zip(plain, ddp, strict=True))


def _no_exchange(state, bucket):  # type: ignore[no-untyped-def]
    """A DDP communication hook that sends nothing: the bucket comes back as it went in.
    (No annotations: DDP checks a hook's annotations against its own types.)"""
    import torch

    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def fit_network(workers: int, timings: dict[int, float]) -> Network:
    """Bandwidth and per-hop latency from all-reduce timings on ``workers`` (>= 2) workers.

    A least-squares line ``t = a + k * bytes`` through the points; by the ring formula
    ``k = 2 (N-1)/N / B`` and ``a = 2 (N-1) * alpha``. A slope that is not positive (timings
    all noise) gives an effectively infinite bandwidth rather than a negative one.

    Raises
    ------
    ValueError
        With fewer than two sizes or fewer than two workers.
    """
    if workers < 2 or len(timings) < 2:
        raise ValueError("fitting the network needs >= 2 workers and >= 2 tensor sizes")
    xs, ys = list(timings), list(timings.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    a = my - k * mx
    hops = 2 * (workers - 1)
    bandwidth = hops / workers / k if k > 0 else 1e15
    return Network(bandwidth=bandwidth, latency=max(0.0, a / hops))


class _ProbeWorker:
    """One probe worker (wrapped by ``ray.remote`` at run time, so importing needs no Ray)."""

    def join(self, port: int, rank: int, world: int) -> None:
        """Join the gloo group of ``world`` workers that rendezvous on loopback ``port``."""
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # as a training worker with one CPU
        self.rank, self.world = rank, world
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )

    def time_allreduce(self, sizes: list[int], repeats: int) -> dict[int, list[float]]:
        """Seconds of each ``all_reduce`` per tensor size in bytes (after a warm-up of each).

        The sizes are interleaved, each repeat runs every size once (in reverse order on odd
        repeats), so that load on the machine that comes and goes meets every size alike: timed
        one size after the other, a burst of the other processes' work that covered the 4 KiB
        repeats made them slower than the 2 MiB ones (7.3 ms against 1.4 ms, each size's
        fastest of 9 repeats).
        """
        import torch
        import torch.distributed as dist

        tensors = {size: torch.ones(size // 4) for size in sizes}
        out: dict[int, list[float]] = {size: [] for size in sizes}
        for r in range(repeats + 1):
            for size in sizes if r % 2 == 0 else reversed(sizes):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(tensors[size])
                if r:  # the first repeat warms every size up
                    out[size].append(time.perf_counter() - t0)
        return out

    def time_steps(self, job: Any, batch: int, steps: int) -> dict[str, Any]:
        """Time ``job``'s model in four kinds of step, interleaved so that all see the same load
        on the machine: ``alone``, a plain step on rank 0 while the others wait (a 1-worker
        job's step; only with more than one worker); ``local``, a plain step on every worker at
        once (no gradient exchange); ``bare``, a DDP step whose hook exchanges nothing, on every
        worker at once (DDP's own work; only with more than one worker); ``ddp``, a DDP step
        (DDP and the communication timer only with more than one worker), with ``comm`` the
        medians of the timer's figures.
        """
        import torch.distributed as dist

        from engage.train.loop import make_optimizer

        plain, bare, model, timer = self._models(job)
        step = self._stepper(job, batch)
        plain_opt = make_optimizer(job.train, plain.parameters())
        bare_opt = make_optimizer(job.train, bare.parameters())
        ddp_opt = make_optimizer(job.train, model.parameters())
        out: dict[str, list] = {k: [] for k in ("alone", "local", "bare", "ddp", "span", "comm")}
        for i in range(steps + 2):
            keep = i >= 2  # DDP rebuilds its buckets after the first step
            if self.world > 1:
                dist.barrier()
                seconds = step(plain, plain_opt) if self.rank == 0 else 0.0
                out["alone"] += [seconds] if keep and self.rank == 0 else []
            for kind, net, opt in (("local", plain, plain_opt), ("bare", bare, bare_opt)):
                if kind == "local" or self.world > 1:
                    dist.barrier()
                    seconds = step(net, opt)
                    out[kind] += [seconds] if keep else []
            dist.barrier()
            seconds = step(model, ddp_opt)
            figures = timer.step_metrics() if timer else {}
            if keep:
                out["ddp"].append(seconds)
                out["comm"].append(figures)
                out["span"].append(figures.get("allreduce_seconds", 0.0))
        comms = out.pop("comm")
        keys = comms[0].keys() if comms and comms[0] else []
        return {**out, "comm": {k: statistics.median(c[k] for c in comms) for k in keys}}

    def _models(self, job: Any) -> tuple[Any, Any, Any, Any]:
        """The plain model, its DDP twin whose hook sends nothing, the DDP model with the
        spec's communication hook, and that hook's timer (both DDP ones, and the timer, only
        with more than one worker: the plain model stands in for them on one)."""
        import copy

        from torch import nn

        from engage.train.comm import apply_comm, ddp_kwargs
        from engage.train.loop import build_model

        comm = job.train.comm
        plain = build_model(job)
        model = bare = plain
        if self.world > 1:
            # Copied before DDP wraps ``plain``: a copy made after would carry its reducer's hooks.
            bare = nn.parallel.DistributedDataParallel(copy.deepcopy(plain), **ddp_kwargs(comm))
            bare.register_comm_hook(None, _no_exchange)
            model = nn.parallel.DistributedDataParallel(plain, **ddp_kwargs(comm))
        timer = apply_comm(model, comm) if comm is not None else None
        if timer is None and self.world > 1:
            from engage.spec.models import CommSpec

            timer = apply_comm(model, CommSpec())
        return plain, bare, model, timer

    @staticmethod
    def _stepper(job: Any, batch: int) -> Any:
        """A function that runs one training step of a model with its optimiser on a fixed
        random batch and returns its seconds."""
        from engage.train.evaluate import loss_function, training_loss
        from engage.train.scaling.calibrate import random_batch

        crit = loss_function(job.task)
        x, y = random_batch(
            (job.shape.window, job.shape.features, job.shape.outputs), batch, job.task
        )

        def step(model: Any, optimizer: Any) -> float:
            """One step: zero the gradients, forward, backward, optimiser; its seconds."""
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            training_loss(model, model(x), y, job.task, crit).backward()
            optimizer.step()
            return time.perf_counter() - t0

        return step

    def leave(self) -> None:
        """Leave the gloo group."""
        import torch.distributed as dist

        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(
    job: Any,
    workers: int,
    batch: int,
    *,
    steps: int = 10,
    sizes: tuple[int, ...] = DEFAULT_SIZES,
    repeats: int = 5,
    num_cpus: float = 0.5,
) -> ProbeResult:
    """Start ``workers`` Ray actors in one gloo group, time all-reduce and DDP steps, stop them.

    Needs a connected Ray session (the caller's ``ray_session``). ``job`` is an
    ``engage.train.loop.TrainJob``; its ``train.comm`` chooses the communication hook.
    """
    import ray

    worker_cls = ray.remote(num_cpus=num_cpus)(_ProbeWorker)
    actors = [worker_cls.remote() for _ in range(workers)]
    try:
        port = _free_port()
        ray.get([a.join.remote(port, r, workers) for r, a in enumerate(actors)])
        timings = ray.get([a.time_allreduce.remote(list(sizes), repeats) for a in actors])
        steps_out = ray.get([a.time_steps.remote(job, batch, steps) for a in actors])
        ray.get([a.leave.remote() for a in actors])
    finally:
        for a in actors:
            ray.kill(a)

    return summarise(workers, batch, timings, steps_out)


def summarise(
    workers: int, batch: int, timings: list[dict[int, list[float]]], steps_out: list[dict]
) -> ProbeResult:
    """The probe's result from every worker's all-reduce ``timings`` and step timings
    (:meth:`_ProbeWorker.time_steps`): the slowest worker's figures, which set the pace of a
    synchronous step; the timer's figures and the steps alone from rank 0."""

    def worst(stat: Any, runs: list[list[float]]) -> float:
        """The slowest worker's statistic."""
        return max(stat(r) for r in runs)

    sizes = list(timings[0])
    many = workers > 1
    return ProbeResult(
        workers=workers,
        batch=batch,
        allreduce={s: worst(statistics.median, [t[s] for t in timings]) for s in sizes},
        step_seconds=worst(statistics.median, [t["ddp"] for t in steps_out]),
        comm=steps_out[0]["comm"],
        allreduce_min={s: worst(min, [t[s] for t in timings]) for s in sizes},
        step_min=worst(min, [t["ddp"] for t in steps_out]),
        step_times=tuple(max((t["ddp"] for t in steps_out), key=statistics.median)),
        local_seconds=worst(statistics.median, [t["local"] for t in steps_out]),
        local_min=worst(min, [t["local"] for t in steps_out]),
        alone_seconds=statistics.median(steps_out[0]["alone"]) if many else 0.0,
        local_times=tuple(max((t["local"] for t in steps_out), key=statistics.median)),
        allreduce_times=tuple(steps_out[0]["span"]) if many else (),
        ddp_overhead=(
            ddp_overhead(
                [t for s in steps_out for t in s["local"]],
                [t for s in steps_out for t in s["bare"]],
            )
            if many
            else 0.0
        ),
    )
