"""The adaptive loop's models: K copies of the spec's model, trained in this process.

Each member is the spec's model and training settings with its own seed, trained on its
own bootstrap resample of every window simulated so far (bagging) with
:func:`engage.train.loop.make_worker` and :func:`engage.train.loop.train_epoch` (one
worker, no Ray Train: a round retrains K small models, and a TorchTrainer costs 25-42 s
of start-up on two cores). Inputs are
standardised with the training windows' per-feature statistics. The members' spread is
the disagreement the acquisition reads; their mean is the model that is tested.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engage.events import Discard, Reporter
from engage.spec import LoadedSpec
from engage.train.builders import ModelShape

_VAL_WINDOWS = 512  # windows the per-epoch val metrics use (the test set judges the model)


@dataclass
class Ensemble:
    """K trained members, the standardisation they were trained with, and each member's
    bootstrap rows of the training windows (``bags``, for out-of-bag scores)."""

    members: list[Any]
    mean: np.ndarray
    std: np.ndarray
    task: str
    bags: list[np.ndarray] = field(default_factory=list)

    def predict(self, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """Every member's predictions on raw windows ``x``: shape ``(K, n, outputs)``
        (class probabilities, or one column of regression outputs)."""
        import torch

        z = torch.from_numpy(((x - self.mean) / self.std).astype(np.float32))
        out = []
        with torch.no_grad():
            for m in self.members:
                parts = [m(z[i : i + batch]) for i in range(0, len(z), batch)]
                y = torch.cat(parts) if parts else torch.empty(0)
                y = torch.softmax(y, dim=-1) if self.task == "classification" else y.reshape(-1, 1)
                out.append(y.numpy())
        return np.stack(out)


def train_ensemble(
    loaded: LoadedSpec, x: np.ndarray, y: np.ndarray, size: int, seed: int, outputs: int
) -> Ensemble:
    """Train ``size`` members of the spec's model on windows ``x``/``y``.

    Members use seeds ``seed``, ``seed + 1``, ... and each trains on its own bootstrap
    resample of the windows (bagging); every other training setting is the spec's
    ``train`` section (``epochs``, ``batch_size``, ``learning_rate``, ...).

    Raises
    ------
    TrainingError
        A member's loss became NaN or infinite.
    """
    import torch

    # One intra-op thread: the members are small MLPs on batches of a few dozen windows,
    # where a second thread only adds synchronisation. On two shared cores the default
    # (one thread per core) made `engage run pipelines/adaptive_sampling.yaml` train for
    # 224 s, against 7 s with one thread (load 2-3; the benchmark always used one).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(loaded, x, y, size, seed, outputs)
    finally:
        torch.set_num_threads(threads)


def _train(
    loaded: LoadedSpec, x: np.ndarray, y: np.ndarray, size: int, seed: int, outputs: int
) -> Ensemble:
    """:func:`train_ensemble`'s work, in whatever torch threads the caller set."""
    from engage.monitor.resources import ResourceSampler
    from engage.train.loop import TrainJob, make_worker, train_epoch

    spec = loaded.spec
    mean = x.reshape(-1, x.shape[-1]).mean(axis=0)
    std = x.reshape(-1, x.shape[-1]).std(axis=0)
    std = np.where(std > 0, std, 1.0)
    z = ((x - mean) / std).astype(np.float32)
    shape = ModelShape(x.shape[1], x.shape[2], outputs)
    members, bags = [], []
    for k in range(size):
        # Bagging: each member sees its own bootstrap resample, so the members disagree
        # where the data is thin, not only where their initial weights differ.
        rows = np.random.default_rng([seed, k]).integers(0, len(z), len(z))
        bags.append(rows)
        arrays = {
            "train_x": z[rows],
            "train_y": y[rows],
            "val_x": z[:_VAL_WINDOWS],
            "val_y": y[:_VAL_WINDOWS],
        }
        train = spec.train.model_copy(update={"seed": seed + k, "num_workers": 1})
        job = TrainJob(train, spec.model, spec.data.task, shape, None, None, "")
        worker = make_worker(job, arrays, Reporter(Discard()))
        for epoch in range(1, train.epochs + 1):
            train_epoch(worker, epoch, ResourceSampler("cpu"))
        members.append(worker.model.eval())
    return Ensemble(members, mean.astype(np.float32), std.astype(np.float32), spec.data.task, bags)


def held_out_metrics(predictions: np.ndarray, y: np.ndarray, task: str) -> dict[str, float]:
    """The ensemble mean's ``test_*`` metrics on labelled windows.

    Classification: accuracy, macro F1 and cross-entropy; regression: MAE and RMSE.
    """
    mean = predictions.mean(axis=0)
    if task != "classification":
        err = mean[:, 0] - y
        return {"test_mae": float(np.abs(err).mean()), "test_rmse": float(np.sqrt((err**2).mean()))}
    guess = mean.argmax(axis=1)
    p = np.clip(mean[np.arange(len(y)), y], 1e-7, 1.0)
    f1s = []
    for c in range(mean.shape[1]):
        tp = np.sum((guess == c) & (y == c))
        denom = 2 * tp + np.sum((guess == c) & (y != c)) + np.sum((guess != c) & (y == c))
        if denom:
            f1s.append(2 * tp / denom)
    return {
        "test_accuracy": float((guess == y).mean()),
        "test_f1": float(np.mean(f1s)) if f1s else 0.0,
        "test_loss": float(-np.log(p).mean()),
    }
