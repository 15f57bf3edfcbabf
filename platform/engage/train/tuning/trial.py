"""The trainable every tuning trial runs: one in-process worker, one report per epoch.

A trial is a Ray Tune function trainable. It re-parses the user's spec with its drawn
values (:func:`engage.train.tuning.search.trial_spec`), builds one worker with
:func:`engage.train.loop.make_worker` and trains it epoch by epoch with
:func:`engage.train.loop.train_epoch`, reporting each epoch to Tune (which ASHA reads to
stop poor trials) and every step and epoch through the job's event hub with a ``trial``
label (the driver routes them to the trial's child run and the monitor). No TorchTrainer
per trial: one costs 25-42 s of process start-up on two cores, more than a small trial.
A trial trains on what the train stage's workers get (:func:`trial_data`): with
augmentation, the cached deterministic features, augmented at the start of every epoch
with that epoch's draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engage.spec import LoadedSpec, parse_spec
from engage.train.builders import ModelShape
from engage.train.tuning.search import trial_spec

#: The label every trial event carries: the Ray Tune trial id.
TRIAL_LABEL = "trial"

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class TrialSetup:
    """What every trial shares; travels to the trials with ``tune.with_parameters``.

    Attributes
    ----------
    text, origin, base_dir, overrides:
        The user's spec as loaded (re-parsed in the trial with the drawn values).
    hub:
        The job's EventHub actor (None: the trial reports nowhere, as in unit tests).
    run_id:
        The parent run's local id.
    threads:
        torch threads per trial (the trial's CPUs).
    """

    text: str
    origin: str
    base_dir: Path
    overrides: tuple[str, ...]
    hub: Any
    run_id: str
    threads: int = 1

    @classmethod
    def of(cls, loaded: LoadedSpec, hub: Any, run_id: str, cpus: float) -> TrialSetup:
        """The setup of trials of ``loaded`` reporting to ``hub``."""
        origin = str(loaded.path) if loaded.path is not None else "<string>"
        threads = max(1, int(cpus))
        return cls(loaded.text, origin, loaded.base_dir, loaded.overrides, hub, run_id, threads)

    def base(self) -> LoadedSpec:
        """The user's spec, before any drawn value."""
        return parse_spec(
            self.text, origin=self.origin, base_dir=self.base_dir, overrides=self.overrides
        )


@dataclass(frozen=True)
class TrialData:
    """The prepared data every trial trains on; travels with ``tune.with_parameters``.

    Attributes
    ----------
    arrays:
        ``train_x``, ``train_y``, ``val_x``, ``val_y``: ``train_x`` is the training split's
        model input, or its cached deterministic features when the preprocessing augments.
    shape:
        The model's window, features and outputs.
    augment:
        The augmentation (a :class:`~engage.data.preprocess.FittedPreprocess`) run over
        ``train_x`` at the start of every epoch with that epoch's draws, as the train
        stage's workers run it; None when the preprocessing does not augment.
    """

    arrays: Arrays
    shape: ModelShape
    augment: Any = None


def trial_data(data: Any) -> TrialData:
    """What trials train on from a :class:`~engage.data.PreparedData`: its arrays, model
    shape and per-epoch augmentation, exactly as the train stage hands its workers
    (:func:`engage.train.loader_tune.cache_features`), so that each epoch of a trial
    gets that epoch's draws."""
    fitted = data.preprocess
    arrays = {
        "train_x": data.model_inputs("train"),  # after data.preprocess, as training sees them
        "train_y": data.train.y,
        "val_x": data.model_inputs("val"),
        "val_y": data.val.y,
    }
    _, window, features = arrays["train_x"].shape
    shape = ModelShape(window, features, len(data.classes) if data.classes else 1)
    if fitted is None or not fitted.augments:
        return TrialData(arrays, shape)
    import torch

    cached, augment = fitted.split_for_cache()
    device = torch.device(fitted.device)
    arrays["train_x"], _ = cached.transform(data.train.x, train=False, device=device)
    return TrialData(arrays, shape, augment)


def train_trial(
    loaded: LoadedSpec,
    data: TrialData,
    reporter: Any,
    report: Any,
    run_id: str = "",
) -> dict[str, float]:
    """Train ``loaded``'s model on ``data`` in this process, calling ``report(metrics)``
    after every epoch (each epoch augmented with its own draws when ``data.augment`` is
    set); returns the last epoch's metrics.

    Raises
    ------
    TrainingError
        The training loss became NaN or infinite.
    """
    from engage.monitor.resources import ResourceSampler
    from engage.train.loop import TrainJob, make_worker, train_epoch

    spec = loaded.spec
    job = TrainJob(
        spec.train, spec.model, spec.data.task, data.shape, None, None, run_id,
        shuffle_buffer=spec.data.shuffle_buffer, augment=data.augment,
    )  # fmt: skip
    worker = make_worker(job, data.arrays, reporter)
    resources = ResourceSampler("cpu")
    reporter.lifecycle("train_start", world_size=1)
    metrics: dict[str, float] = {}
    for epoch in range(1, spec.train.epochs + 1):
        metrics = train_epoch(worker, epoch, resources)
        report(metrics)
    reporter.flush(wait=True)
    return metrics


def run_trial(config: dict[str, Any], setup: TrialSetup, data: TrialData | None):
    """The Ray Tune trainable: train one drawn configuration, reporting every epoch.

    ``data`` is the shared prepared data; None when the space changes ``data.*`` and
    the trial prepares its own.

    Raises
    ------
    EngageError
        A drawn value the spec refuses, data too small, or a loss that became NaN: Tune
        records the trial as errored and the search goes on.
    """
    import ray.tune
    import torch

    from engage.events import Discard, HubTransport, Reporter
    from engage.runtime.stages import prepare_data

    torch.set_num_threads(setup.threads)
    loaded = trial_spec(setup.base(), config)
    if data is None:
        data = trial_data(prepare_data(loaded))
    trial_id = ray.tune.get_context().get_trial_id()
    labels = {TRIAL_LABEL: str(trial_id), "rank": "0"}
    reporter = Reporter(HubTransport(setup.hub), labels) if setup.hub is not None else None
    train_trial(
        loaded,
        data,
        reporter or Reporter(Discard(), labels),
        lambda m: ray.tune.report(dict(m)),
        setup.run_id,
    )
