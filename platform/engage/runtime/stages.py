"""The stage bodies every job kind shares or the pipeline kind calls, one function each.

The job template (:mod:`engage.runtime.job`) calls :func:`open_run`, :func:`enter_ray`
and :func:`start_monitor` for every kind; the centralised pipeline
(:mod:`engage.runtime.pipeline`) adds :func:`prepare_data` (in a Ray task with
``data.resources``: :func:`prepare_data_on_cluster`), :func:`train`, :func:`evaluate` (its
test pass in a Ray task with ``evaluate.resources``), :func:`export_model` and
:func:`log_and_register`; its deploy stage is in :mod:`engage.runtime.deploy`.
Each takes the typed :class:`~engage.runtime.options.RunOptions`.
"""

from __future__ import annotations

import copy
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from engage.data import PreparedData, prepare
from engage.data.fingerprint import DatasetFingerprint
from engage.events import Event, FanOut, Reporter
from engage.runtime.options import RunOptions
from engage.runtime.session import SessionInfo, ray_session, resolve_address
from engage.runtime.stage_tasks import alive_nodes, check_stage_requests, run_in_task
from engage.spec import LoadedSpec
from engage.spec.models import DeploySpec, PipelineSpec
from engage.tracking import Drainer, GateDecision, PipelineRun, Spool, decide
from engage.tracking.store import resolve_tracking_uri
from engage.train.builders import ModelShape

if TYPE_CHECKING:
    from engage.monitor import JobMonitor, StoreSink
    from engage.train.loop import TrainJob
    from engage.train.trainer import TrainOutcome


class RunDataset(Protocol):
    """What :func:`open_run` records about a job's data (every kind's data stage has it)."""

    @property
    def frame(self) -> Any:
        """The validated table (a ``pandas.DataFrame``)."""

    @property
    def fingerprint(self) -> DatasetFingerprint:
        """The data's digest, source, schema and row count."""


def new_run_name(name: str) -> str:
    """A run name that sorts by start time and cannot collide: ``name-YYYYmmdd-HHMMSS-abcd``."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def prepare_data(loaded: LoadedSpec, *, streamed: bool = False) -> PreparedData:
    """Load, check, window and split the data; then the checks that need its size.

    Parameters
    ----------
    loaded
        The spec.
    streamed
        Whether the caller trains from a streamed training split (the pipeline job does);
        the others need every training window in memory.

    Raises
    ------
    DataError
        The data is missing, malformed or too small.
    SpecError
        ``train.batch_size`` or ``train.num_workers`` exceeds the training windows, or the
        data streams (``data.streaming``) for a caller that cannot train from a stream.
    """
    data = prepare(loaded.spec.data, loaded.base_dir)
    if data.stream is not None and loaded.spec.data.resources is not None:
        raise loaded.error(
            ("data", "resources"),
            f"the training split streams ({data.stream.n_train:,} windows, data.streaming: "
            f"{loaded.spec.data.streaming}) and a streamed split is read by Ray Data tasks "
            "beside the training workers, which data.resources does not place; remove "
            "data.resources or set data.streaming: false",
        )
    if data.stream is not None and not streamed:
        raise loaded.error(
            ("data", "streaming"),
            f"the training split streams ({data.stream.n_train:,} windows) and this job needs "
            "it in memory: only a pipeline job trains from a stream; set data.streaming: false "
            "(the split must then fit in memory), or run it as a pipeline with `engage run`",
        )
    n_train, train = data.train_windows, loaded.spec.train
    if train.batch_size > n_train:
        raise loaded.error(
            ("train", "batch_size"),
            f"batch_size {train.batch_size} is larger than the training split "
            f"({n_train} windows); expected at most {n_train}",
        )
    if train.num_workers > n_train:
        raise loaded.error(
            ("train", "num_workers"),
            f"{train.num_workers} workers for {n_train} training windows; expected at most {n_train}",
        )
    return data


def prepare_data_on_cluster(loaded: LoadedSpec, *, streamed: bool = False) -> PreparedData:
    """:func:`prepare_data` in one Ray task (``engage.prepare_data``) that reserves
    ``data.resources``, so it runs on a node that offers them; the prepared data comes
    back through the object store. Runs inside the job's Ray session.

    Every stage's request is checked first (:func:`check_stage_requests`), so a job
    whose evaluation or replicas can never be placed does no work at all.

    Raises
    ------
    ClusterError
        A stage asks for resources no node of the cluster can hold.
    DataError, SpecError
        As :func:`prepare_data`, raised in the task.
    """
    resources = loaded.spec.data.resources
    if resources is None:
        return prepare_data(loaded, streamed=streamed)
    check_stage_requests(loaded.spec, alive_nodes())
    data = run_in_task("prepare_data", resources, prepare_data, loaded, streamed=streamed)
    # Ray hands arrays back as read-only views of its object store; later stages get the
    # writable arrays the driver path gives them.
    return copy.deepcopy(data)


def open_run(
    loaded: LoadedSpec, data: RunDataset, spool: Spool, options: RunOptions
) -> PipelineRun:
    """Spool the run with its parameters, spec, dataset and lineage (nothing waits on MLflow)."""
    spec = loaded.spec
    uri = resolve_tracking_uri(spec.tracking.tracking_uri, options.tracking_uri, options.home)
    tags = {"engage.pipeline": spec.name, "engage.spec_file": str(loaded.path or "<string>")}
    if loaded.overrides:
        tags["engage.overrides"] = " ".join(loaded.overrides)
    run = PipelineRun.start(
        spool, uri, spec.experiment_name, new_run_name(spec.name), tags, loaded.base_dir
    )
    run.log_params(loaded.resolved())
    run.log_text(loaded.text, "spec/" + (loaded.path.name if loaded.path else "spec.yaml"))
    run.log_dict(loaded.resolved(), "spec/resolved.json")
    fp = data.fingerprint
    run.log_dataset(
        data.frame,
        name=fp.name,
        source=fp.source,
        target=spec.data.target,
        digest=fp.digest,
        context="training",
    )
    run.set_tags(
        {
            "engage.dataset.digest": fp.digest,
            "engage.dataset.rows": str(fp.rows),
            "engage.dataset.source": fp.source,
            "engage.dataset.params": str(fp.params),
        }
    )
    run.log_dict(
        {"schema": fp.schema, "params": fp.params, "rows": fp.rows}, "dataset/fingerprint.json"
    )
    return run


# How long the monitor waits for the drainer to create the MLflow run, so the job's series
# and alerts carry the id the CLI prints. A fresh home's MLflow database takes seconds to
# create, and more on a busy machine; the wait ends at once when the drainer reports MLflow
# down (the monitor then names the run by its local id).
_RUN_ID_WAIT_S = 90.0


def start_monitor(
    loaded: LoadedSpec,
    run: PipelineRun,
    spool: Spool,
    options: RunOptions,
    bus: FanOut,
    drainer: Drainer | None = None,
) -> tuple[JobMonitor | None, StoreSink | None]:
    """The job's live monitor and its event-store sink (both None when the spec turns the
    monitor off); alerts the monitor raises are published on the job's bus."""
    from engage.monitor import EventStore, JobMonitor, StoreSink

    spec = loaded.spec.monitor
    if not spec.enabled:
        return None, None
    status = drainer.status if drainer is not None else None
    run_id = run.wait_for_run_id(
        _RUN_ID_WAIT_S if status is not None else 10.0,
        give_up=(lambda: status.error is not None or status.fault is not None)
        if status is not None
        else None,
    )
    monitor = JobMonitor(loaded.spec.name, run_id, options.home, spec, spool)
    monitor.publish = bus.send
    url = monitor.start()
    warn = lambda m: bus.send([Event("lifecycle", "monitor", data={"message": m})])  # noqa: E731
    store = StoreSink(EventStore.open(options.home), loaded.spec.name, run_id, warn=warn)
    store.start(url)
    bus.send([Event("lifecycle", "monitor", data={"message": f"metrics at {url}"})])
    return monitor, store


@dataclass
class RaySession:
    """The Ray session a job holds between :func:`enter_ray` and :meth:`close`.

    ``serving_home`` is set when the job started engage's managed serving head to train on
    (see :func:`enter_ray`): the deploy that follows serves on it, and a job that ends
    without serving stops it with :meth:`release_head`.
    """

    info: SessionInfo
    _stack: ExitStack
    serving_home: Path | None = None

    def close(self) -> None:
        """Leave the session (shuts down an embedded cluster this job started)."""
        self._stack.close()

    def release_head(self) -> None:
        """Stop the serving head this job started, when nothing will be served on it (and
        the deploy process started early, :func:`engage.serve.deploy_process.start_early`)."""
        from engage.serve.deploy_process import cancel_early

        cancel_early()
        if self.serving_home is not None:
            from engage.serve.cluster import stop_managed

            stop_managed(self.serving_home)
            self.serving_home = None


def enter_ray(options: RunOptions, serve_after: DeploySpec | None = None) -> RaySession:
    """Join the cluster of ``options`` or start one; close the result to leave.

    Without an address, a job that serves its model afterwards (``serve_after``) trains on
    engage's managed serving head (:func:`engage.serve.cluster.ensure_cluster`, reused when
    alive), so training and serving share one Ray cluster: one start-up, and the deploy
    finds its cluster ready. Any other job starts an embedded cluster that ends with it.

    Raises
    ------
    ClusterError
        The cluster cannot be reached, refuses the connection, or does not start.
    """
    stack = ExitStack()
    address = resolve_address(options.address)
    serving_home = None
    if address is None and serve_after is not None and not _joined():
        address, serving_home = _join_serving_head(options, serve_after, stack)
    info = stack.enter_context(
        ray_session(address, num_cpus=options.num_cpus, verbose=options.verbose)
    )
    return RaySession(info, stack, serving_home)


def _joined() -> bool:
    """True when this process already holds a Ray session (tests and notebooks share one).

    Ray is not imported here: it reads its auth settings when first imported, and a driver
    joining the serving head must set them first (:func:`engage.serve.cluster.connect`).
    """
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _join_serving_head(
    options: RunOptions, deploy: DeploySpec, stack: ExitStack
) -> tuple[str, Path | None]:
    """Start (or reuse) the managed serving head and connect this driver to it.

    Returns the head's address and, when this call started the head, the home to stop it
    by; leaving the session disconnects the driver and leaves the head running. The deploy
    to come starts its process now, which starts Serve on the head meanwhile.
    """
    from engage.serve.cluster import connect, ensure_cluster

    cluster, started = ensure_cluster(
        options.home, options.num_cpus, secret_vars=(deploy.token_env,)
    )
    try:
        connect(cluster.address, options.home, cluster.env())
    except BaseException:
        if started:
            from engage.serve.cluster import stop_managed

            stop_managed(options.home)
        raise
    import ray

    stack.callback(ray.shutdown)
    from engage.serve.deploy_process import start_early

    start_early(deploy, options.home)  # Serve starts on the head while the job trains
    return cluster.address, options.home if started else None


def _shape(data: PreparedData) -> ModelShape:
    _, window, features = data.model_inputs("train").shape  # after data.preprocess
    outputs = len(data.classes) if data.classes else 1
    return ModelShape(window, features, outputs)


def train(
    loaded: LoadedSpec,
    data: PreparedData,
    run: PipelineRun,
    bus: FanOut,
    options: RunOptions,
    info: SessionInfo,
) -> TrainOutcome:
    """Train the spec's model with Ray Train; the workers' events reach ``bus``.

    Raises
    ------
    ClusterError
        The workers cannot fit the cluster.
    TrainingError
        Training failed past the spec's failure budget.
    """
    import ray

    from engage.events import EventPump, start_hub
    from engage.train.scaling.strategy import resolve as resolve_strategy
    from engage.train.trainer import check_fits, fit

    spec = loaded.spec
    job, datasets = training_job(spec, data, start_hub(), run.local_id, ray.put)
    if job.train.loader == "auto":  # before the memory plan, which has the last word on batch
        from engage.train.loader_tune import summary, tune_for_job

        job, tuned = tune_for_job(job, data, run)
        bus.send([Event("lifecycle", "loader", data={"message": summary(tuned)})])
    job, choice = resolve_strategy(job)  # train.strategy auto: the memory plan's choice
    if choice is not None:
        run.set_tags(choice.tags())
    nodes = alive_nodes()
    check_stage_requests(spec, nodes)  # the evaluation and replicas to come, before training
    check_fits(job, info.resources, nodes)
    pump = EventPump(job.hub, bus)
    return fit(
        job,
        pump,
        storage=options.home / "ray_results",
        name=f"{spec.name}-{run.local_id[:8]}",
        datasets=datasets,
    )


def training_job(
    spec: PipelineSpec, data: PreparedData, hub: Any, run_id: str, put: Callable[[Any], Any]
) -> tuple[TrainJob, dict[str, Any] | None]:
    """The job the train stage hands Ray Train, and its streamed datasets (None in memory).

    ``put`` places the workers' arrays (``ray.put``). An in-memory split whose preprocessing
    augments reaches the workers as its deterministic features, which they augment at the
    start of every epoch with that epoch's draws (new noise each epoch).
    """
    from engage.train.loop import TrainJob

    arrays, datasets = _train_inputs(data)
    augments = _augments_in_memory(data)
    job = TrainJob(
        spec.train, spec.model, spec.data.task, _shape(data),
        None if augments else put(arrays), hub, run_id,
        shuffle_buffer=spec.data.shuffle_buffer,
        streamed=None if data.stream is None else data.stream.n_train,
    )  # fmt: skip
    if augments:  # the workers' arrays are the cached features, put once there
        from engage.train.loader_tune import cache_features

        job = cache_features(job, data, put)
    return job, datasets


def _train_inputs(data: PreparedData) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The arrays every worker gets (val; train too in memory) and a streamed train dataset."""
    arrays = {"val_x": data.model_inputs("val"), "val_y": data.val.y}
    if data.stream is None:
        return arrays | {"train_x": data.model_inputs("train"), "train_y": data.train.y}, None
    from engage.data.streaming import train_dataset

    stats = {"target_mean": data.stream.target_mean, "target_std": data.stream.target_std}
    return arrays | stats, {"train": train_dataset(data.stream)}


def _augments_in_memory(data: PreparedData) -> bool:
    """Whether ``data``'s training split is in memory and its preprocessing augments."""
    return data.stream is None and data.preprocess is not None and data.preprocess.augments


def _trained_model(spec: PipelineSpec, data: PreparedData, state: dict[str, Any]) -> Any:
    """The spec's model holding the trained weights ``state``, in eval mode."""
    from engage.train.loop import TrainJob, build_model

    job = TrainJob(spec.train, spec.model, spec.data.task, _shape(data), None, None, "")
    core = build_model(job)
    core.load_state_dict(state)
    return core.eval()


def scored_on_test(
    spec: PipelineSpec, data: PreparedData, state: dict[str, Any]
) -> dict[str, float]:
    """Test-split metrics (``test_*``) of the model holding weights ``state``, and its naive
    baseline's (``baseline_*``): the evaluation's work, which runs in a Ray task when the
    spec sets ``evaluate.resources``; the test pass runs on the task's GPU when those
    reserve one (and CUDA is there), else on its CPUs."""
    import torch

    core = _trained_model(spec, data, state)
    if (spec.evaluate.resources or {}).get("GPU", 0.0) > 0 and torch.cuda.is_available():
        core = core.cuda()  # Ray made the reserved GPU the task's only visible one
    return _scored(core, spec, data)


def _scored(core: Any, spec: PipelineSpec, data: PreparedData) -> dict[str, float]:
    import torch

    from engage.train.baseline import naive_baseline
    from engage.train.evaluate import accumulate, finalize

    x, y = torch.from_numpy(data.model_inputs("test")), torch.from_numpy(data.test.y)
    n_classes = _shape(data).outputs
    metrics = finalize(
        accumulate(core, x, y, spec.data.task, n_classes, 1024), spec.data.task, "test"
    )
    return metrics | naive_baseline(data).metrics


def evaluate(
    loaded: LoadedSpec, data: PreparedData, outcome: TrainOutcome, reporter: Reporter
) -> tuple[Any, dict[str, float]]:
    """Test-split metrics of the final model and its naive baseline's (``baseline_*``), with
    a warning event when the model loses to the baseline; returns (servable model, all final
    metrics)."""
    import torch

    from engage.train.baseline import baseline_warning
    from engage.train.models import Standardized

    spec = loaded.spec
    state = outcome.state["model"]
    core = _trained_model(spec, data, state)
    if spec.evaluate.resources is None:
        metrics = _scored(core, spec, data)
    else:  # the test pass on a node that offers the resources; the servable model stays here
        metrics = run_in_task(
            "evaluate", spec.evaluate.resources, scored_on_test, spec, data, state
        )
    reporter.metrics(metrics, step=spec.train.epochs)
    reporter.flush()
    norm = data.normalization
    if norm is None:
        mean = torch.zeros(data.train.x.shape[2])
        std = torch.ones(data.train.x.shape[2])
    else:
        mean, std = torch.from_numpy(norm.mean), torch.from_numpy(norm.std)
    # Serving takes raw windows: standardise, then the fitted preprocessing, then the net.
    servable = core if data.preprocess is None else data.preprocess.wrap(core)
    model = Standardized(servable, mean, std).eval()
    final = {**outcome.state.get("metrics", {}), **metrics}
    registration = spec.tracking.registration
    gate = registration.gate if registration else None
    if warning := baseline_warning(final, gate, spec.data.task):
        reporter.lifecycle("baseline_warning", message=warning)
    return model, final


def raw_inputs(data: PreparedData, n: int) -> np.ndarray:
    """The first ``n`` test windows as the caller would send them (not normalised)."""
    x = data.test.x[:n]
    norm = data.normalization
    return x if norm is None else (x * norm.std + norm.mean).astype(np.float32)


def _log_drift_reference(data: PreparedData, run: PipelineRun, model: Any) -> None:
    """A sample of training inputs, outputs and per-feature statistics with the run, so any
    deployment of this model version is monitored for drift without the training data."""
    import torch

    from engage.drift import capture_reference, log_reference

    norm = data.normalization
    x_raw = (
        data.train.x if norm is None else (data.train.x * norm.std + norm.mean).astype(np.float32)
    )
    step = max(1, len(x_raw) // 5000)
    with torch.no_grad():
        outputs = model(torch.from_numpy(x_raw[::step])).numpy()
    log_reference(run, capture_reference(x_raw, outputs, list(data.features), max_rows=5000))


@dataclass(frozen=True)
class Logged:
    """Spool entries of the model and of its registration.

    ``model_seq`` is None when the job logged no model; ``register_seq`` is None when it
    did not register one (no registration in the spec, or the gate refused).
    """

    model_seq: int | None = None
    register_seq: int | None = None
    decision: GateDecision | None = None


def log_and_register(
    loaded: LoadedSpec, data: PreparedData, run: PipelineRun, model: Any, metrics: dict
) -> Logged:
    """Log ``model`` with an input example, its drift reference and model card, then
    register it when the spec's gate passes on ``metrics``."""
    import torch

    from engage.train.baseline import WARNING_TAG, baseline_name, baseline_warning

    spec = loaded.spec
    example = raw_inputs(data, 5)
    with torch.no_grad():
        output = model(torch.from_numpy(example)).numpy()
    model_seq = run.log_model(model, input_example=example, output_example=output)
    _log_drift_reference(data, run, model)
    run.log_dict(
        {
            "features": list(data.features),
            "target": data.target,
            "task": data.task,
            "classes": list(data.classes) if data.classes else None,
            "window": spec.data.window,
        },
        "model_card/inputs.json",
    )
    registration_spec = spec.tracking.registration
    gate = registration_spec.gate if registration_spec else None
    tags = {"engage.baseline": baseline_name(data)}
    if warning := baseline_warning(metrics, gate, data.task):
        tags[WARNING_TAG] = warning  # the console saw it in the evaluate stage
    run.set_tags(tags)
    if registration_spec is None:
        return Logged(model_seq, None, None)
    decision = decide(registration_spec, metrics)
    run.set_tags({"engage.gate": decision.explain()})
    if not decision.passed:
        return Logged(model_seq, None, decision)
    tags = {"engage.gate": decision.explain()}
    if decision.metric:  # what `engage models promote` compares on
        tags |= {"engage.gate_metric": decision.metric, "engage.gate_direction": decision.direction}
    return Logged(model_seq, run.register(registration_spec.model_name, model_seq, tags), decision)


def export_model(loaded: LoadedSpec, data: PreparedData, run: PipelineRun, model: Any) -> Any:
    """ONNX and TorchScript copies, checked against torch on the test split.

    Raises
    ------
    ExportError
        An exported copy differs from torch above the spec's tolerance.
    """
    from engage.export import export_stage

    spec = loaded.spec.export
    return export_stage(model, raw_inputs(data, spec.samples), spec, run)
