"""Mixed precision and gradient accumulation in the loop Ray Train runs, without Ray."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from engage.errors import SpecError, TrainingError
from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec import load_spec
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, make_worker, train_epoch
from engage.train.precision import make_precision

QUICKSTART = Path(__file__).resolve().parents[3] / "pipelines" / "quickstart.yaml"


class _Drop:
    """A transport that keeps nothing: these tests read the returned metrics."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def _data(n: int = 128) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n + 32, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] + 0.5 * x[:, 0, 1] > 0).astype(np.int64)
    return {"train_x": x[:n], "train_y": y[:n], "val_x": x[n:], "val_y": y[n:]}


def _worker(data: dict, model: ModelSpec | None = None, **train: object):
    spec = TrainSpec(num_workers=1, seed=5, **train)
    job = TrainJob(
        spec, model or ModelSpec(name="mlp"), "classification", ModelShape(4, 2, 2), None, None, ""
    )
    return make_worker(job, data, Reporter(_Drop()))


def _train(w, epochs: int) -> list[dict[str, float]]:
    resources = ResourceSampler("cpu", every_s=3600.0)
    out = [train_epoch(w, epoch, resources) for epoch in range(1, epochs + 1)]
    w.reporter.flush(wait=True)
    return out


def test_bf16_on_cpu_trains_to_a_finite_loss_close_to_fp32() -> None:
    data = _data()
    fp32 = _train(_worker(data, batch_size=16, learning_rate=0.01), 3)
    bf16 = _train(_worker(data, batch_size=16, learning_rate=0.01, precision="bf16"), 3)

    assert all(math.isfinite(m["train_loss"]) for m in bf16)
    assert bf16[-1]["train_loss"] < bf16[0]["train_loss"]  # it learns
    assert bf16[-1]["train_loss"] == pytest.approx(fp32[-1]["train_loss"], rel=0.05)
    assert bf16[-1]["val_loss"] == pytest.approx(fp32[-1]["val_loss"], rel=0.05)


def test_accumulating_two_batches_equals_one_step_on_twice_the_batch() -> None:
    # A linear model (mlp, layers 0), SGD and one optimiser step per epoch either way:
    # 64 rows as two accumulated batches of 32, or as one batch of 64.
    data, linear = _data(64), ModelSpec(name="mlp", params={"layers": 0})
    accumulated = _worker(data, linear, batch_size=32, grad_accumulation=2, optimizer="sgd")
    one_step = _worker(data, linear, batch_size=64, optimizer="sgd")

    _train(accumulated, 1), _train(one_step, 1)

    for a, b in zip(accumulated.model.parameters(), one_step.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


def test_accumulation_steps_once_per_group_with_a_short_last_group() -> None:
    # 5 batches with accumulation 2: steps after batches 2, 4 and 5.
    w = _worker(_data(80), batch_size=16, grad_accumulation=2)
    calls: list[int] = []
    step = w.optimizer.step
    w.optimizer.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]

    _train(w, 1)

    assert len(calls) == 3


def test_fp16_needs_a_gpu() -> None:
    with pytest.raises(TrainingError, match="fp16 needs a GPU"):
        make_precision("fp16", "cpu")


def test_spec_refuses_fp16_without_gpu_naming_the_field() -> None:
    with pytest.raises(SpecError) as err:
        load_spec(QUICKSTART, ["train.precision=fp16"])

    assert "train.precision" in str(err.value)
    assert "bf16" in str(err.value)
