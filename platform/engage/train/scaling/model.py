"""The analytic scaling model of a data-parallel (DDP) training step.

One step on N workers takes

    T(N) = compute(b) + ddp_overhead + max(0, comm(N) - overlap * backward(b))

(on one worker just ``compute(b)``: no DDP, nothing to send), where
``compute(b) = step_overhead + b * seconds_per_sample`` is the forward, backward and
optimiser time of one worker's batch ``b``, ``backward(b)`` its backward share, and ``comm``
the ring all-reduce of the gradients:

    comm(N) = 2 (N-1)/N * S / B  +  buckets * 2 (N-1) * alpha

``S`` is the gradient bytes sent (after compression), ``B`` the per-link bandwidth in bytes per
second and ``alpha`` the latency of one hop. The latency term: a ring all-reduce is a
reduce-scatter then an all-gather, N-1 steps each, and every step waits one hop; DDP
all-reduces each gradient bucket on its own, so the latency is paid once per bucket. Only the
communication left over after the backward pass (whose buckets it overlaps) lengthens the step.

Workers that share a node also share its cores, memory bandwidth and caches, and gloo's
communication threads run on the same cores: ``contention`` is how much longer one worker's
compute takes while the other workers of its node compute too (measured by running every
worker's step at once with no gradient exchange, over the step alone; 1 for one worker, and
about 1 for one GPU per worker). On 2 shared CPU cores it is what separates 1 from 2 workers
more than the all-reduce does.

A synchronous step also waits for its slowest worker. Given the spread of one worker's step
times (``jitter``: step times over their mean), the compute term on N workers is the expected
maximum of N draws from that spread (:func:`straggler_factor`), 1 on one worker; on a quiet
GPU node the spread is narrow and the factor near 1, on shared CPUs it is not.

DDP does work of its own beside sending gradients: its forward bookkeeping, the autograd hooks
that copy each gradient into its bucket, the hook's future, copying the buckets back.
``ddp_overhead`` is those seconds per step on N > 1 workers (measured as a DDP step whose hook
sends nothing against the plain step, every worker at once).

The step's measured length is a median, and the median of a sum is not the sum of medians when
its parts vary: the all-reduce inside a step has a long tail (a peer waiting for a core), so
adding the medians of compute and all-reduce undercounts the median step. Given how each part
spreads (``compute_spread``, ``comm_spread``: measured times over their median), the model's
step on N > 1 workers is the median over every pair, as for two independent parts
(:func:`median_of_sums`); with no spreads it is the plain sum.

Pure arithmetic: no torch, no Ray; :mod:`engage.train.scaling.calibrate` measures the inputs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Literal

BatchMode = Literal["weak", "strong"]


def ring_allreduce_seconds(
    workers: int, nbytes: float, bandwidth: float, latency: float, buckets: int = 1
) -> float:
    """Seconds a ring all-reduce of ``nbytes`` takes on ``workers`` workers.

    ``2 (N-1)/N * nbytes / bandwidth + buckets * 2 (N-1) * latency``; 0 for one worker.

    Raises
    ------
    ValueError
        If ``workers`` < 1, ``bandwidth`` <= 0 or ``latency`` < 0.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if bandwidth <= 0 or latency < 0:
        raise ValueError(f"bandwidth must be > 0 and latency >= 0, got {bandwidth}, {latency}")
    if workers == 1:
        return 0.0
    hops = 2 * (workers - 1)
    return hops / workers * nbytes / bandwidth + max(1, buckets) * hops * latency


def straggler_factor(jitter: tuple[float, ...], workers: int) -> float:
    """Expected maximum of ``workers`` independent draws from the empirical distribution
    ``jitter`` (relative step times, mean 1), over its mean; 1.0 without samples.

    With the samples sorted, ``E[max of N] = sum_k x_(k) * ((k/n)^N - ((k-1)/n)^N)``.
    """
    if not jitter or workers <= 1:
        return 1.0
    xs, n = sorted(jitter), len(jitter)
    mean = sum(xs) / n
    expected = sum(x * ((k / n) ** workers - ((k - 1) / n) ** workers) for k, x in enumerate(xs, 1))
    return expected / mean


def median_of_sums(xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """The median of ``x + y`` over every pair of ``xs`` and ``ys``: the median of the sum of two
    independent parts given samples of each (not the sum of their medians when they are skewed).

    Raises
    ------
    ValueError
        If either is empty.
    """
    if not xs or not ys:
        raise ValueError("median_of_sums needs samples of both parts")
    return statistics.median(x + y for x in xs for y in ys)


def relative_spread(times: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    """Measured ``times`` over their median (empty for no times or a median of 0)."""
    median = statistics.median(times) if times else 0.0
    return tuple(t / median for t in times) if median > 0 else ()


@dataclass(frozen=True)
class Network:
    """The links between workers: bandwidth in bytes per second, per-hop latency in seconds."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class StepProfile:
    """What one worker's step costs on the calibration machine, per sample and per step.

    ``backward_fraction`` is the share of the compute time spent in the backward pass (the
    window the all-reduce can hide in); ``grad_bytes`` the fp32 gradient bytes of one step.
    """

    seconds_per_sample: float
    step_overhead: float
    backward_fraction: float
    grad_bytes: float
    bucket_bytes: float = 25 * 1024 * 1024

    def compute(self, batch: float, speed: float = 1.0) -> float:
        """Seconds of forward, backward and optimiser work for ``batch`` samples at ``speed``x."""
        return (self.step_overhead + batch * self.seconds_per_sample) / speed

    @property
    def buckets(self) -> int:
        """How many DDP buckets the gradients fill (each pays the all-reduce latency)."""
        return max(1, math.ceil(self.grad_bytes / self.bucket_bytes))


@dataclass(frozen=True)
class ScalingModel:
    """Predicts step time, throughput and efficiency of data-parallel training on N workers.

    Parameters
    ----------
    step
        The calibrated per-worker step.
    network
        The links between workers.
    overlap
        Share of the backward pass the all-reduce can hide in (0: none, 1: all of it; DDP's
        bucketed all-reduce overlaps, gloo on CPU much less than NCCL on GPUs).
    speed
        Device speed relative to the calibration machine (2.0: compute takes half as long).
    compression
        Bytes sent per gradient byte (1.0 plain fp32, 0.5 fp16/bf16, PowerSGD lower).
    rounds
        All-reduces per bucket, each paying the latency term (PowerSGD sends two: P and Q).
    min_compute
        Floor on one step's compute seconds on the target device (a fast device cannot run a
        small model's step faster than the framework launches its kernels).
    jitter
        One worker's step times over their mean (empty: no stragglers); see
        :func:`straggler_factor`.
    contention
        Compute slowdown of each worker when more than one shares the node (see the module
        docstring; 1.0: none).
    ddp_overhead
        Seconds of DDP's own work per step on more than one worker (not scaled by ``speed``:
        it is host-side bookkeeping and copies, measured on this node).
    compute_spread, comm_spread
        The contended compute's and the in-step all-reduce's measured times over their median
        (empty: no spread); the step on N > 1 is the median over their pairs.
    """

    step: StepProfile
    network: Network
    overlap: float = 1.0
    speed: float = 1.0
    compression: float = 1.0
    rounds: int = 1
    min_compute: float = 0.0
    jitter: tuple[float, ...] = ()
    contention: float = 1.0
    ddp_overhead: float = 0.0
    compute_spread: tuple[float, ...] = ()
    comm_spread: tuple[float, ...] = ()

    def comm_seconds(self, workers: int) -> float:
        """Seconds one step's gradient all-reduce takes on ``workers`` workers."""
        s = self.step
        return ring_allreduce_seconds(
            workers,
            s.grad_bytes * self.compression,
            self.network.bandwidth,
            self.network.latency,
            s.buckets * self.rounds,
        )

    def step_seconds(self, workers: int, batch: float) -> float:
        """T(N): one step on ``workers`` workers, each with ``batch`` samples."""
        compute = max(self.min_compute, self.step.compute(batch, self.speed))
        if workers > 1:
            compute *= self.contention
        hidden = self.overlap * self.step.backward_fraction * compute
        slowest = compute * straggler_factor(self.jitter, workers)
        if workers == 1:
            return slowest
        comm = self.comm_seconds(workers)
        return median_of_sums(
            tuple(slowest * c for c in self.compute_spread or (1.0,)),
            tuple(
                self.ddp_overhead + max(0.0, comm * m - hidden) for m in self.comm_spread or (1.0,)
            ),
        )

    def per_worker_batch(self, workers: int, batch: int, mode: BatchMode) -> float:
        """One worker's batch: ``batch`` itself (weak scaling) or ``batch / workers`` (strong)."""
        return float(batch) if mode == "weak" else max(1.0, batch / workers)

    def throughput(self, workers: int, batch: int, mode: BatchMode = "weak") -> float:
        """Samples per second of the whole job on ``workers`` workers."""
        b = self.per_worker_batch(workers, batch, mode)
        return workers * b / self.step_seconds(workers, b)

    def efficiency(self, workers: int, batch: int, mode: BatchMode = "weak") -> float:
        """Scaling efficiency: throughput(N) / (N * throughput(1)); T(1)/T(N) in weak scaling.

        ``batch`` is the per-worker batch in weak scaling (the global batch grows with N) and
        the global batch in strong scaling (each worker's share shrinks, so the fixed per-step
        overhead and the all-reduce weigh more).
        """
        one = self.throughput(1, batch, mode)
        return self.throughput(workers, batch, mode) / (workers * one)

    def with_(self, **changes: Any) -> ScalingModel:
        """A copy with some fields changed (``network``, ``overlap``, ``speed``, ...)."""
        return replace(self, **changes)
