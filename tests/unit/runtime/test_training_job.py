"""The job the train stage hands Ray Train: augmentation draws anew every epoch in memory."""

from __future__ import annotations

import numpy as np
import torch

from engage.data import prepare
from engage.data.batch_order import epoch_order
from engage.events import Discard, Reporter
from engage.runtime.stages import training_job
from engage.spec.models import PipelineSpec
from engage.train.loop import make_worker, memory_batches

ROLLING = {"op": "rolling", "params": {"size": 4, "stats": ["mean"]}}
JITTER = {"op": "jitter", "params": {"std": 0.1, "seed": 3}}


def _spec(preprocess: list) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": "tiny",
            "data": {
                "source": {"type": "synthetic", "households": 1, "days": 2},
                "features": ["temperature", "co2"],
                "target": "occupied",
                "task": "classification",
                "window": 20,
                "stride": 10,
                "preprocess": preprocess,
            },
            "model": {"name": "mlp"},
            "train": {"batch_size": 32, "num_workers": 1, "seed": 4},
        }
    )


def _epoch(job, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's training inputs as the worker sees them, and the order they came in."""
    w = make_worker(job, job.data_ref, Reporter(Discard()))
    x = torch.cat([batch for batch, _ in memory_batches(w, epoch)]).numpy()
    order = epoch_order(len(w.y), job.train.seed, epoch, job.shuffle_buffer)[: w.n_per]
    return x, order.numpy()


def test_an_augmenting_split_in_memory_gets_new_draws_every_epoch() -> None:
    spec = _spec([ROLLING, JITTER])
    data = prepare(spec.data, ".")

    job, datasets = training_job(spec, data, None, "run", put=lambda arrays: arrays)

    assert datasets is None
    assert job.augment is not None
    first, order1 = _epoch(job, 1)
    second, order2 = _epoch(job, 2)
    # Epoch 1 is what the data stage computed (its one draw); epoch 2 draws anew,
    # window by window, exactly what transforming the split with epoch 2's draws gives.
    np.testing.assert_allclose(first, data.model_inputs("train")[order1], rtol=1e-5, atol=1e-5)
    whole2, _ = data.preprocess.transform(data.train.x, train=True, epoch=2)
    np.testing.assert_allclose(second, whole2[order2], rtol=1e-5, atol=1e-5)
    assert not np.allclose(whole2, data.model_inputs("train"), atol=1e-3)
    # The deterministic part is the same both epochs: only the jitter differs.
    served, _ = data.preprocess.transform(data.train.x, train=False)
    np.testing.assert_allclose(job.data_ref["train_x"], served, rtol=1e-6, atol=1e-6)


def test_without_augmentation_the_workers_get_the_data_stages_inputs() -> None:
    spec = _spec([ROLLING])
    data = prepare(spec.data, ".")

    job, _ = training_job(spec, data, None, "run", put=lambda arrays: arrays)

    assert job.augment is None
    assert job.data_ref["train_x"] is data.model_inputs("train")
    first, order = _epoch(job, 1)
    second, order2 = _epoch(job, 2)
    np.testing.assert_array_equal(first, data.model_inputs("train")[order])
    np.testing.assert_array_equal(second, data.model_inputs("train")[order2])
