"""Driver side of training: start the TorchTrainer, pump events while it runs.

Workers reserve ``train.resources_per_worker`` (custom Ray resources included) and are
placed by ``train.placement``; :func:`check_fits` refuses a job the cluster can never
schedule before Ray waits on it forever. Ray Train recovers from up to
``train.max_failures`` worker failures (its ``FailureConfig``) by restarting every worker
from the last checkpoint; the final checkpoint is read back through the verified loader
(:mod:`engage.train.checkpoint`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage.errors import ClusterError, EngageError, TrainingError
from engage.events import HUB_POLL_S, EventPump
from engage.train.checkpoint import CheckpointError, load_checkpoint
from engage.train.loop import TrainJob, train_loop_per_worker, training_model
from engage.train.placement import check_offered, describe_nodes, node_room


@dataclass(frozen=True)
class TrainOutcome:
    """What :func:`fit` returns: where the final checkpoint lies, its loaded state and the
    training wall time in seconds.
    """

    checkpoint_uri: str
    state: dict[str, Any]  # {"model": state_dict, "optimizer": ..., "epoch": int}
    seconds: float


def scaling_config(job: TrainJob) -> Any:
    """The Ray Train ``ScalingConfig`` of ``job``: worker count (a ``(min, max)`` range when
    ``train.min_workers`` makes it elastic), per-worker resources (custom ones included;
    ``use_gpu`` adds one GPU unless a GPU amount is given) and placement strategy
    (``train.placement`` upper-cased: ``PACK`` or ``SPREAD``).
    """
    from ray.train import ScalingConfig

    resources = dict(job.train.resources_per_worker)
    if job.train.use_gpu:
        resources.setdefault("GPU", 1.0)
    train = job.train
    elastic = train.min_workers is not None and train.min_workers < train.num_workers
    return ScalingConfig(
        # Ray Train's elastic policy: a (min, max) range, sized to what the cluster holds
        num_workers=(train.min_workers, train.num_workers) if elastic else train.num_workers,
        use_gpu=job.train.use_gpu,
        resources_per_worker=resources,
        placement_strategy=job.train.placement.upper(),
    )


def check_fits(
    job: TrainJob,
    cluster: dict[str, float],
    nodes: Sequence[Mapping[str, float]] | None = None,
) -> None:
    """Refuse up front a job the cluster can never schedule (Ray would wait forever).

    Parameters
    ----------
    job : TrainJob
        The training job; its worker count and per-worker resources are checked.
    cluster : dict of str to float
        The cluster's total resources, as ``ray.cluster_resources()`` returns them.
    nodes : sequence of mappings, optional
        Each alive node's total resources (``ray.nodes()``' ``Resources``). A worker runs on
        one node, so the workers must fit node by node, not only in the totals.

    Raises
    ------
    ClusterError
        If a worker asks for a custom resource no node offers, if all workers together
        need more of a resource than the cluster has, if the nodes cannot hold that
        many workers one node at a time, or if a streamed job's workers leave Ray Data no
        CPU to read with.
    """
    asked = scaling_config(job).resources_per_worker
    check_offered("train.resources_per_worker", asked, cluster)
    workers = job.train.min_workers or job.train.num_workers  # elastic: the least it runs on
    need = {k: v * workers for k, v in asked.items()}
    short = {k: (v, cluster.get(k, 0.0)) for k, v in need.items() if cluster.get(k, 0.0) + 1e-9 < v}
    if short:
        detail = ", ".join(f"{k}: needs {n:g}, cluster has {h:g}" for k, (n, h) in short.items())
        raise ClusterError(
            f"{workers} workers x {dict(job.train.resources_per_worker)} do not fit "
            f"the cluster ({detail})",
            hint="lower train.num_workers (train.min_workers when elastic) or "
            "train.resources_per_worker, or add nodes",
        )
    if nodes:
        _check_nodes(workers, asked, nodes)
    if job.streamed is not None:
        _check_reader_cpu(job, asked.get("CPU", 0.0), cluster.get("CPU", 0.0))


#: CPUs a streamed split's Ray Data read tasks need beside the training workers.
READER_CPUS = 1.0


def _check_reader_cpu(job: TrainJob, per_worker: float, cpus: float) -> None:
    """Refuse a streamed job whose workers can take every CPU: Ray Data's read tasks would
    never be scheduled and the workers would wait for their first batch forever. An
    elastic job counts at its full width, which Ray Train grows it to when CPUs are free."""
    taken = per_worker * job.train.num_workers
    if taken + READER_CPUS <= cpus + 1e-9:
        return
    raise ClusterError(
        f"{job.train.num_workers} workers x {per_worker:g} CPU leave "
        f"{max(0.0, cpus - taken):g} of the cluster's {cpus:g} CPUs to Ray Data, which reads "
        f"the streamed training split in tasks that need {READER_CPUS:g}",
        hint="lower train.num_workers or train.resources_per_worker's CPU, or add a node "
        "(or set data.streaming: false if the split fits in memory)",
    )


def _check_nodes(
    workers: int, asked: dict[str, float], nodes: Sequence[Mapping[str, float]]
) -> None:
    """Refuse ``workers`` that the nodes cannot hold one node at a time (a worker cannot
    span two nodes: 2 CPUs asked of two 1-CPU nodes fit the totals and never schedule)."""
    room = node_room(asked, nodes, workers)
    if room >= workers:
        return
    raise ClusterError(
        f"{workers} workers x {asked} do not fit the nodes: at most {room} of them can be "
        f"placed ({describe_nodes(asked, nodes)})",
        hint="a worker runs on one node: ask each for no more than one node has "
        "(train.resources_per_worker), lower train.num_workers, or add larger nodes",
    )


def check_model(job: TrainJob) -> None:
    """Refuse up front, on the driver, a model the spec's training options cannot apply to
    (activation checkpointing of a model with no layer stack), instead of on every worker.

    The model is built on the meta device: no memory, whatever its size.

    Raises
    ------
    SpecError
        If ``train.activation_checkpointing`` is set and the model has nothing to checkpoint.
    """
    if job.train.activation_checkpointing:
        import torch

        with torch.device("meta"):
            training_model(job)


def ingest_config() -> Any:
    """Ray Train's ``DataConfig`` for a streamed split: each worker reads its own span of
    the seeded order, blocks kept in order (:class:`engage.data.stream_ingest.StreamIngest`),
    so with one worker or several a worker's batches are the in-memory path's for that rank
    (the order :func:`engage.data.batch_order.shuffled_batches` shuffles is the canonical one).
    """
    from ray.train import DataConfig

    from engage.data.stream_ingest import StreamIngest

    options = DataConfig.default_ingest_options()
    options.preserve_order = True
    return StreamIngest(execution_options=options, reader_cpus=READER_CPUS)


def _unwrap(exc: BaseException) -> EngageError | None:
    failures = getattr(exc, "worker_failures", None) or {}
    for failure in [*failures.values(), exc]:
        seen: BaseException | None = failure
        while seen is not None:
            if isinstance(seen, EngageError):
                return seen
            inner = getattr(seen, "cause", None)
            seen = inner if isinstance(inner, BaseException) else seen.__cause__
    return None


def fit(
    job: TrainJob,
    pump: EventPump,
    *,
    storage: Path,
    name: str,
    on_tick: Callable[[], None] = lambda: None,
    datasets: dict[str, Any] | None = None,
) -> TrainOutcome:
    """Run training on the cluster; returns the final checkpoint's state.

    Ray Train runs in a background thread while this thread drains the workers' events
    through ``pump`` and calls ``on_tick`` about every 0.25 s.

    Parameters
    ----------
    job : TrainJob
        What every worker trains, its ``train.strategy`` already named (the train stage
        resolves ``auto`` with :func:`engage.train.scaling.strategy.resolve` and tags the run).
    pump : EventPump
        Forwards the workers' events to the job's sinks while training runs.
    storage : Path
        Folder Ray Train keeps the run's checkpoints in.
    name : str
        The Ray Train run name (a folder under ``storage``).
    on_tick : callable, optional
        Called on every poll, for example to refresh a progress display.
    datasets : dict of str to ray.data.Dataset, optional
        A streamed training split (``{"train": dataset}``, with ``job.streamed`` set):
        each worker reads its shard in the dataset's order (:func:`ingest_config`).

    Raises
    ------
    EngageError
        The first engage error a worker raised (for example a :class:`TrainingError` for
        a loss that became NaN), unwrapped from Ray's error.
    TrainingError
        If training failed otherwise (more worker failures than ``train.max_failures``),
        ended without a checkpoint, or its final checkpoint does not verify.
    """
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    check_model(job)
    job = dataclasses.replace(job, checkpoint_root=str(Path(storage) / name))
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"job": job},
        torch_config=TorchConfig(backend="nccl" if job.train.use_gpu else "gloo"),
        scaling_config=scaling_config(job),
        datasets=datasets,
        dataset_config=ingest_config() if datasets else None,
        run_config=RunConfig(
            name=name,
            storage_path=str(storage),
            checkpoint_config=CheckpointConfig(num_to_keep=job.train.checkpoints_to_keep),
            failure_config=FailureConfig(max_failures=job.train.max_failures),
        ),
    )
    box: dict[str, Any] = {}
    started = time.perf_counter()

    def _run() -> None:
        try:
            box["result"] = trainer.fit()
        except BaseException as exc:  # re-raised on the driver thread below
            box["error"] = exc

    thread = threading.Thread(target=_run, name="engage-fit", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(HUB_POLL_S)  # the durability contract's hub poll
        pump.poll()
        on_tick()
    pump.finish()
    if "error" in box:
        err = box["error"]
        raise _unwrap(err) or TrainingError(f"training failed: {err}") from err
    checkpoint = box["result"].checkpoint
    if checkpoint is None:
        raise TrainingError("training finished without a checkpoint")
    try:
        with checkpoint.as_directory() as d:
            state = load_checkpoint(Path(d))
    except CheckpointError as exc:
        raise TrainingError(
            f"the final checkpoint {checkpoint.path} does not verify: {exc.message}",
            hint="the storage under .engage/ray_results may be damaged; run the job again",
        ) from None
    return TrainOutcome(checkpoint.path, state, time.perf_counter() - started)
