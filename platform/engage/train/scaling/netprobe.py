"""Measured runs on the Ray cluster: all-reduce timings and DDP steps on 1 and N gloo workers.

Each worker is a Ray actor in one gloo process group (rendezvous on loopback, as engage's
embedded cluster is). The probe times ``all_reduce`` over a few tensor sizes, from which
:func:`fit_network` reads the bandwidth and the per-hop latency, and times real DDP steps of
the spec's model (built by the training loop's own :func:`~engage.train.loop.build_model`)
with the communication timer of :mod:`engage.train.comm`, which gives the measured overlap.
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
    includes waiting for a core, the minimum mostly does not.
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
        """Seconds of each ``all_reduce`` per tensor size in bytes (after a warm-up)."""
        import torch
        import torch.distributed as dist

        out = {}
        for size in sizes:
            t = torch.ones(size // 4)
            times = []
            for _ in range(repeats + 1):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                times.append(time.perf_counter() - t0)
            out[size] = times[1:]
        return out

    def time_steps(self, job: Any, batch: int, steps: int) -> dict[str, Any]:
        """Time ``job``'s model in three kinds of step, interleaved so that all three see the
        same load on the machine: ``alone``, a plain step on rank 0 while the others wait (a
        1-worker job's step; only with more than one worker); ``local``, a plain step on every
        worker at once (no gradient exchange); ``ddp``, a DDP step (DDP and the communication
        timer only with more than one worker), with ``comm`` the medians of the timer's figures.
        """
        import torch.distributed as dist
        from torch import nn

        from engage.train.comm import apply_comm, ddp_kwargs
        from engage.train.loop import build_model, make_optimizer

        comm = job.train.comm
        plain = build_model(job)
        model = plain
        if self.world > 1:
            model = nn.parallel.DistributedDataParallel(plain, **ddp_kwargs(comm))
        timer = apply_comm(model, comm) if comm is not None else None
        if timer is None and self.world > 1:
            from engage.spec.models import CommSpec

            timer = apply_comm(model, CommSpec())
        step = self._stepper(job, batch)
        plain_opt = make_optimizer(job.train, plain.parameters())
        ddp_opt = make_optimizer(job.train, model.parameters())
        out: dict[str, list] = {"alone": [], "local": [], "ddp": [], "comm": []}
        for i in range(steps + 2):
            keep = i >= 2  # DDP rebuilds its buckets after the first step
            if self.world > 1:
                dist.barrier()
                seconds = step(plain, plain_opt) if self.rank == 0 else 0.0
                out["alone"] += [seconds] if keep and self.rank == 0 else []
            dist.barrier()
            seconds = step(plain, plain_opt)
            out["local"] += [seconds] if keep else []
            dist.barrier()
            seconds = step(model, ddp_opt)
            figures = timer.step_metrics() if timer else {}
            if keep:
                out["ddp"].append(seconds)
                out["comm"].append(figures)
        comms = out.pop("comm")
        keys = comms[0].keys() if comms and comms[0] else []
        return {**out, "comm": {k: statistics.median(c[k] for c in comms) for k in keys}}

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

    # The slowest worker sets the pace of a synchronous step.
    def worst(stat: Any, runs: list[list[float]]) -> float:
        """The slowest worker's statistic."""
        return max(stat(r) for r in runs)

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
        alone_seconds=statistics.median(steps_out[0]["alone"]) if workers > 1 else 0.0,
    )
