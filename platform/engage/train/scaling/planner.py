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
from engage.train.scaling.model import (
    BatchMode,
    Network,
    ScalingModel,
    StepProfile,
    relative_spread,
)
from engage.train.scaling.netprobe import ProbeResult, contention, fit_network
from engage.train.scaling.plan import Economics, Plan, make_plan
from engage.train.scaling.strategy import StrategyChoice, checkpointable, decide, worker_capacity

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
    auto: StrategyChoice | None = None
    auto_error: str = ""


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


def ray_speed(cal: Calibration, two: ProbeResult, batch: int) -> tuple[float, str]:
    """This machine's speed as a Ray worker sees it: the calibrated step against the step the
    2-worker probe timed alone (rank 0 while the other waited), under the load the shared
    steps saw; 1.0 when it timed none."""
    if two.alone_seconds <= 0:
        return 1.0, "this machine"
    speed = cal.step.compute(batch) / two.alone_seconds
    return speed, f"this machine, one Ray worker's step ({two.alone_seconds * 1e3:.2f} ms)"


def in_step_network(step: StepProfile, network: Network, two: ProbeResult) -> Network:
    """``network`` (fitted to back-to-back all-reduces, which give its shape: bandwidth against
    latency) scaled so that 2 workers' all-reduce takes what the DDP hook measured inside real
    steps (``two.comm``): the link as a training step sees it. There the all-reduce starts
    when the slower worker is ready and runs on cores the backward pass is using, which a
    back-to-back probe on idle processes does not see (on this 2-core machine: 3-6x longer).
    Unchanged when the hook measured nothing.
    """
    in_step = two.comm.get("allreduce_seconds", 0.0)
    fitted = ScalingModel(step, network).comm_seconds(2)
    if in_step <= 0 or fitted <= 0:
        return network
    k = in_step / fitted
    return Network(network.bandwidth / k, network.latency * k)


def backward_share(
    step: StepProfile,
    network: Network,
    hidden: float,
    batch: int,
    contention: float = 1.0,
    speed: float = 1.0,
) -> float:
    """The model's ``overlap`` (the share of the backward pass that hides all-reduce) from the
    communication timer's measured share of all-reduce time hidden behind backward, at 2
    workers on this machine: the hidden seconds over the backward window (contended).

    The two differ: 64% of a 23 ms all-reduce hidden behind a 90 ms backward is 16% of that
    backward, and applying 64% of the backward as the window would hide all of it.
    """
    base = ScalingModel(step, network, contention=contention)
    window = step.backward_fraction * step.compute(batch, speed) * contention
    return min(1.0, hidden * base.comm_seconds(2) / window) if window > 0 else 0.0


def measured_overlap_share(
    step: StepProfile,
    network: Network,
    hidden: float,
    batch: int,
    contention: float,
    speed: float,
    cpu_node: bool,
    work_share: float = 1.0,
) -> tuple[float, str]:
    """The model's ``overlap`` from the timer's measured share of all-reduce time that ran
    beside the backward pass, and its source.

    On a CPU node whose workers keep its cores busy (``cpu_node``), the all-reduce beside the
    backward pass runs on the same cores: the part of it that works (``work_share``: the
    all-reduce's time back to back on idle processes over its time inside the step) takes
    those cores from the backward and is not hidden; the rest is waiting (for the peer, for a
    core), which the backward does hide. Elsewhere all of it counts. The hidden seconds become
    a share of the backward (:func:`backward_share`).
    """
    share = hidden * (1.0 - min(1.0, max(0.0, work_share))) if cpu_node else hidden
    overlap = backward_share(step, network, share, batch, contention, speed)
    if not cpu_node:
        return overlap, "measured"
    if share <= 0:
        return CPU_OVERLAP, f"none: {hidden:.0%} of the all-reduce ran beside backward"
    return overlap, (
        f"measured: {hidden:.0%} of the all-reduce ran beside backward, {1 - work_share:.0%} "
        "of it waiting (hidden), the rest working on the same cores (not hidden)"
    )


def work_share(step: StepProfile, fitted: Network, in_step: Network) -> float:
    """The share of the all-reduce's time inside a step that it spends working: its time on
    the link fitted to back-to-back all-reduces on idle processes over its time on the link
    as the steps saw it (1.0 when they agree or either is unmeasured)."""
    inside = ScalingModel(step, in_step).comm_seconds(2)
    alone = ScalingModel(step, fitted).comm_seconds(2)
    return min(1.0, alone / inside) if inside > 0 else 1.0


def on_this_node(two: ProbeResult) -> dict[str, Any]:
    """The model's inputs that hold for this node only, from the 2-worker probe: DDP's own
    per-step work and how the contended compute and the in-step all-reduce spread."""
    return {
        "ddp_overhead": max(0.0, two.ddp_overhead),
        "compute_spread": relative_spread(two.local_times),
        "comm_spread": relative_spread(two.allreduce_times),
    }


def fit_model(
    cal: Calibration,
    network: Network,
    measured_overlap: float | None,
    probes: list[ProbeResult],
    per_worker: int,
    request: PlanRequest,
) -> tuple[ScalingModel, dict[str, str]]:
    """The scaling model from what was measured: the calibration, the link (given, or fitted to
    the probes' all-reduces), the timer's overlap and the 1- and 2-worker ``probes`` (empty
    when the bandwidth was given). Returns it with where its speed and overlap came from, and
    what was done to the link (``sources["network"]``, to follow the link's own source).

    The one place the prediction is put together: ``engage plan`` and the benchmark call it.
    """
    speed, speed_source = device_speed(request, cal)
    here = bool(probes) and request.device.tflops is None
    # The slowdown of workers sharing this node's cores (a GPU each shares far less), DDP's own
    # work and the all-reduce as a step here sees it, which includes waiting for the slower
    # worker: all apply to this machine only. That wait is why no straggler term is added.
    shared = contention(probes[0], probes[1]) if here else 1.0
    working, net_note = 1.0, ""
    if here:
        fitted, network = network, in_step_network(cal.step, network, probes[1])
        working = work_share(cal.step, fitted, network)
        net_note = ", scaled to the all-reduce inside DDP steps"
        if request.speed is None:
            speed, speed_source = ray_speed(cal, probes[1], per_worker)
    overlap, overlap_source = request.overlap, "--overlap"
    if overlap is None and measured_overlap is not None:
        overlap, overlap_source = measured_overlap_share(
            cal.step, network, measured_overlap, per_worker, shared, speed, here, working
        )
    if overlap is None:
        default = CPU_OVERLAP if request.device.tflops is None else GPU_OVERLAP
        overlap, overlap_source = default, f"assumed for {request.device.name}"
    model = ScalingModel(
        cal.step,
        network,
        overlap=overlap,
        speed=speed,
        min_compute=request.device.step_floor if request.device.tflops is not None else 0.0,
        contention=shared,
        **(on_this_node(probes[1]) if here else {}),
    )
    return model, {"network": net_note, "speed": speed_source, "overlap": overlap_source}


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
    model, sources = fit_model(cal, network, measured_overlap, probes, per_worker, request)
    sources["network"] = net_source + sources["network"]
    progress("estimating memory on the meta device")
    shape = (per_worker, job.shape.window, job.shape.features)
    memory = estimate_memory(lambda: build_model(job), shape, spec.optimizer)
    price = request.price if request.price is not None else request.device.price
    n = request.samples if request.samples is not None else samples
    econ = Economics(spec.epochs, n, price, request.deadline_s)
    powersgd = {r: powersgd_ratio(cal.param_shapes, r) for r in POWERSGD_RANKS}
    capacity = int(request.device.memory_gib * 2**30)
    plan = make_plan(model, request.workers, batch, request.mode, econ, powersgd, memory, capacity)
    auto, auto_error = auto_choice(job, memory, request.device)
    return PlanReport(
        request, cal, model, memory, plan, batch, n, spec.epochs, price, sources, probes,
        auto, auto_error,
    )  # fmt: skip


def auto_choice(
    job: Any, memory: MemoryEstimate, device: DeviceProfile
) -> tuple[StrategyChoice | None, str]:
    """What ``train.strategy: auto`` chooses for the spec's own workers and batch: the same
    decision the trainer makes (:func:`~engage.train.scaling.strategy.decide`), against this
    node's memory, or the ``--device`` profile's for a GPU job planned where no GPU is.
    Returns the choice, or None and why nothing fits.
    """
    import torch

    from engage.errors import TrainingError

    spec = job.train
    if spec.use_gpu and not torch.cuda.is_available():
        capacity = int(device.memory_gib * 2**30), f"{device.name} profile, no GPU here"
    else:
        capacity = worker_capacity(spec)
    try:
        return decide(memory, spec, *capacity, checkpointable(job)), ""
    except TrainingError as exc:
        return None, exc.message
