"""The loop on a streamed split, without Ray: a fake dataset shard stands in for Ray Data's.

A worker reading its shard block by block trains to exactly the losses of a worker holding
the same windows in memory, for the same seed and shuffle buffer (classification), and a
regression worker takes its target statistics from the streaming pass, not from arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, make_worker, train_epoch
from engage.train.models import TargetScaled


class _Drop:
    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


class _FakeShard:
    """What ``ray.train.get_dataset_shard`` returns, over arrays, in blocks of 5 windows."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def iter_torch_batches(self, batch_size: int, prefetch_batches: int):
        del batch_size, prefetch_batches
        for lo in range(0, len(self.y), 5):
            yield {"x": self.x[lo : lo + 5], "y": self.y[lo : lo + 5]}


def _losses(streamed: bool, buffer: int) -> tuple[float, ...]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] > 0).astype(np.int64)
    train = TrainSpec(seed=5, epochs=2, batch_size=16, num_workers=1)
    job = TrainJob(
        train, ModelSpec(name="mlp"), "classification", ModelShape(4, 2, 2), None, None, "",
        shuffle_buffer=buffer, streamed=64 if streamed else None,
    )  # fmt: skip
    data = {"val_x": x[64:], "val_y": y[64:]}
    if not streamed:
        data |= {"train_x": x[:64], "train_y": y[:64]}
    w = make_worker(job, data, Reporter(_Drop()))
    if streamed:
        w.shard = _FakeShard(x[:64], y[:64])
    resources = ResourceSampler("cpu", every_s=3600.0)
    return tuple(train_epoch(w, epoch, resources)["train_loss"] for epoch in (1, 2))


@pytest.mark.parametrize("buffer", [65_536, 24])
def test_a_streamed_worker_trains_exactly_as_in_memory(buffer: int) -> None:
    assert _losses(streamed=True, buffer=buffer) == _losses(streamed=False, buffer=buffer)


def test_a_streamed_regression_worker_takes_the_passed_target_statistics() -> None:
    job = TrainJob(
        TrainSpec(), ModelSpec(name="mlp"), "regression", ModelShape(4, 2, 1), None, None, "",
        streamed=10,
    )  # fmt: skip
    data = {"val_x": np.zeros((2, 4, 2), np.float32), "val_y": np.zeros(2, np.float32)}

    w = make_worker(job, data | {"target_mean": 3.5, "target_std": 2.0}, Reporter(_Drop()))

    assert isinstance(w.model, TargetScaled)
    assert (float(w.model.target_mean), float(w.model.target_std)) == (3.5, 2.0)
    assert w.n_per == 10
