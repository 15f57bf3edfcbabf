"""The loop on a streamed split, without Ray: a fake dataset shard stands in for Ray Data's.

A worker reading its shard block by block trains to exactly the losses of a worker holding
the same windows in memory, for the same seed and shuffle buffer (classification), and a
regression worker takes its target statistics from the streaming pass, not from arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from engage.events import Event, Reporter
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, make_worker
from engage.train.models import TargetScaled
from tests.unit.data.test_stream_workers import _losses  # the fake shard, and both paths


class _Drop:
    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


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
