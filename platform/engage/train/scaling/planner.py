"""From a training job and the plan's options to a finished :class:`PlanReport`.

The steps, each reported through ``progress``: time one worker's step here, measure the
network on the Ray cluster with 1 and 2 gloo workers (unless a bandwidth is given; the caller
passes the probe, so this module needs no Ray session), estimate memory on the meta device,
then sweep the worker counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engage.train.scaling.calibrate import Calibration, calibrate, powersgd_ratio
from engage.train.scaling.inputs import DeviceProfile
from engage.train.scaling.memory import MemoryEstimate, estimate_memory
from engage.train.scaling.model import BatchMode, Network, ScalingModel
from engage.train.scaling.netprobe import ProbeResult, fit_network
from engage.train.scaling.plan import Economics, Plan, make_plan

GPU_OVERLAP = 0.9
"""Assumed overlap on GPUs when none is measured: NCCL all-reduces on its own stream while
the backward pass runs (DDP's design point); gloo on CPU shares the cores and overlaps less."""
CPU_OVERLAP = 0.0
"""Assumed overlap on CPU when none is measured (gloo measured here hid almost none)."""
POWERSGD_RANKS = (1, 4)
"""PowerSGD ranks the plan weighs."""

Probe = Callable[[Any, int, int], ProbeResult]


@dataclass(frozen=True)
class PlanRequest:
    """The plan's options, parsed: see ``engage plan --help`` for each."""

    workers: list[int]
    device: DeviceProfile
    speed: float | None = None
    bandwidth: float | None = None
    latency: float = 5e-6
    price: float | None = None
    deadline_s: float | None = None
    mode: BatchMode = "weak"
    overlap: float | None = None
    samples: int | None = None


@dataclass(frozen=True)
class PlanReport:
    """Everything the plan found, with where each input came from."""

    request: PlanRequest
    calibration: Calibration
    model: ScalingModel
    memory: MemoryEstimate
    plan: Plan
    batch: int
    samples: int
    epochs: int
    price: float
    sources: dict[str, str] = field(default_factory=dict)
    probes: list[ProbeResult] = field(default_factory=list)


def device_speed(request: PlanRequest, cal: Calibration) -> tuple[float, str]:
    """The device's speed relative to the calibration worker, and where it comes from."""
    if request.speed is not None:
        return request.speed, "--device factor"
    if request.device.tflops is None:
        return 1.0, "this machine"
    rate = request.device.tflops * 1e12 * request.device.utilisation
    return rate / cal.host_flops, (
        f"{request.device.name}: {request.device.tflops:g} TFLOP/s x "
        f"{request.device.utilisation:.0%} vs {cal.host_flops / 1e9:.2f} GFLOP/s measured"
    )


def _network(
    request: PlanRequest, job: Any, batch: int, probe: Probe | None, progress: Callable[[str], None]
) -> tuple[Network, float | None, list[ProbeResult], str]:
    """The network (given, or fitted to probe timings), the measured overlap and the probes."""
    if request.bandwidth is not None:
        return Network(request.bandwidth, request.latency), None, [], "given"
    if probe is None:
        raise ValueError("no bandwidth given and no probe to measure one")
    probes = []
    for workers in (1, 2):
        progress(f"measuring all-reduce and DDP steps on Ray with {workers} gloo worker(s)")
        probes.append(probe(job, workers, batch))
    overlap = probes[1].comm.get("allreduce_overlap")
    return fit_network(2, probes[1].allreduce), overlap, probes, "measured on Ray (2 gloo workers)"


def build_report(
    job: Any,
    samples: int,
    request: PlanRequest,
    probe: Probe | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> PlanReport:
    """Calibrate, measure, estimate and plan for ``job`` (an ``engage.train.loop.TrainJob``).

    ``samples`` is the training split's size (``request.samples`` overrides it).

    Raises
    ------
    ValueError
        If no bandwidth is given and no ``probe`` is passed.
    """
    from engage.train.loop import build_model

    spec = job.train
    per_worker = max(1, spec.batch_size // spec.num_workers)
    batch = per_worker if request.mode == "weak" else spec.batch_size
    progress("timing one worker's training step")
    cal = calibrate(job, per_worker)
    network, measured_overlap, probes, net_source = _network(
        request, job, per_worker, probe, progress
    )
    speed, speed_source = device_speed(request, cal)
    default_overlap = CPU_OVERLAP if request.device.tflops is None else GPU_OVERLAP
    overlap = request.overlap if request.overlap is not None else measured_overlap
    overlap_source = "--overlap" if request.overlap is not None else "measured"
    if overlap is None:
        overlap, overlap_source = default_overlap, f"assumed for {request.device.name}"
    floor = request.device.step_floor if request.device.tflops is not None else 0.0
    # Stragglers as measured here apply to this machine; a named device's spread is unknown.
    jitter = probes[0].jitter if probes and request.device.tflops is None else ()
    model = ScalingModel(
        cal.step, network, overlap=overlap, speed=speed, min_compute=floor, jitter=jitter
    )
    progress("estimating memory on the meta device")
    shape = (per_worker, job.shape.window, job.shape.features)
    memory = estimate_memory(lambda: build_model(job), shape, spec.optimizer)
    price = request.price if request.price is not None else request.device.price
    n = request.samples if request.samples is not None else samples
    econ = Economics(spec.epochs, n, price, request.deadline_s)
    powersgd = {r: powersgd_ratio(cal.param_shapes, r) for r in POWERSGD_RANKS}
    capacity = int(request.device.memory_gib * 2**30)
    plan = make_plan(model, request.workers, batch, request.mode, econ, powersgd, memory, capacity)
    sources = {"network": net_source, "speed": speed_source, "overlap": overlap_source}
    return PlanReport(
        request, cal, model, memory, plan, batch, n, spec.epochs, price, sources, probes
    )
