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
    ``batch`` samples per worker and ``comm`` the median of the timer's step figures. The
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

    @property
    def jitter(self) -> tuple[float, ...]:
        """The slowest worker's step times over their mean (the model's straggler input)."""
        if not self.step_times:
            return ()
        mean = statistics.fmean(self.step_times)
        return tuple(t / mean for t in self.step_times)


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

    def time_steps(self, job: Any, batch: int, steps: int) -> tuple[list[float], dict[str, float]]:
        """Seconds of each DDP training step of ``job``'s model, and the medians of the
        communication timer's figures (DDP and a timer only with more than one worker)."""
        import torch.distributed as dist
        from torch import nn

        from engage.train.comm import apply_comm, ddp_kwargs
        from engage.train.evaluate import loss_function, training_loss
        from engage.train.loop import build_model, make_optimizer
        from engage.train.scaling.calibrate import random_batch

        comm = job.train.comm
        model = build_model(job)
        if self.world > 1:
            model = nn.parallel.DistributedDataParallel(model, **ddp_kwargs(comm))
        timer = apply_comm(model, comm) if comm is not None else None
        if timer is None and self.world > 1:
            from engage.spec.models import CommSpec

            timer = apply_comm(model, CommSpec())
        optimizer = make_optimizer(job.train, model.parameters())
        crit = loss_function(job.task)
        x, y = random_batch(
            (job.shape.window, job.shape.features, job.shape.outputs), batch, job.task
        )
        times, comms = [], []
        for i in range(steps + 2):
            dist.barrier()
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            training_loss(model, model(x), y, job.task, crit).backward()
            optimizer.step()
            elapsed = time.perf_counter() - t0
            figures = timer.step_metrics() if timer else {}
            if i >= 2:  # DDP rebuilds its buckets after the first step
                times.append(elapsed)
                comms.append(figures)
        keys = comms[0].keys() if comms and comms[0] else []
        return times, {k: statistics.median(c[k] for c in comms) for k in keys}

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
        step_seconds=worst(statistics.median, [t for t, _ in steps_out]),
        comm=steps_out[0][1],
        allreduce_min={s: worst(min, [t[s] for t in timings]) for s in sizes},
        step_min=worst(min, [t for t, _ in steps_out]),
        step_times=tuple(max((t for t, _ in steps_out), key=statistics.median)),
    )
