"""Activation checkpointing (train.activation_checkpointing): same numbers, less memory, no Ray.

Peak memory is measured with :func:`engage.train.scaling.memory.measure_peak_memory`, which
follows every tensor storage a CPU step allocates until it is freed (a dispatch mode, no
CUDA): the peak of live tensor bytes, parameters and optimiser state included.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from engage.errors import SpecError
from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.activation_checkpointing import apply_activation_checkpointing, blocks
from engage.train.builders import ModelShape, get_builder
from engage.train.loop import TrainJob, make_worker, train_epoch, training_model
from engage.train.scaling.memory import measure_peak_memory
from engage.train.trainer import check_model

SHAPE = ModelShape(window=10, features=3, outputs=2)
MODELS = {
    "mlp": {"hidden": 32, "layers": 3, "dropout": 0.2},
    "gru": {"hidden": 16, "layers": 2, "dropout": 0.2},
    "cnn1d": {"channels": 16, "layers": 3, "dropout": 0.2},
}


def _step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    torch.manual_seed(1)  # the same dropout masks for both models
    out = model(x)
    out.pow(2).mean().backward()
    return out.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("name", list(MODELS))
def test_checkpointing_gives_the_same_outputs_and_gradients(name: str) -> None:
    torch.manual_seed(0)
    plain = get_builder(name).build(SHAPE, MODELS[name])
    checkpointed = copy.deepcopy(plain)
    assert apply_activation_checkpointing(checkpointed) >= 1
    x = torch.randn(8, SHAPE.window, SHAPE.features)

    out, grads = _step(plain.train(), x)
    out_ckpt, grads_ckpt = _step(checkpointed.train(), x)

    torch.testing.assert_close(out_ckpt, out, rtol=0, atol=1e-6)
    for g_ckpt, g in zip(grads_ckpt, grads, strict=True):
        torch.testing.assert_close(g_ckpt, g, rtol=0, atol=1e-6)


def test_checkpointing_lowers_the_peak_memory_of_a_training_step() -> None:
    # Linear, ReLU, Dropout per block: without checkpointing each keeps its input, the ReLU
    # output and the dropout mask; with it only the block input until backward reaches it.
    torch.manual_seed(0)
    plain = get_builder("mlp").build(SHAPE, {"hidden": 128, "layers": 3, "dropout": 0.1})
    checkpointed = copy.deepcopy(plain)
    apply_activation_checkpointing(checkpointed)
    x = torch.randn(128, SHAPE.window, SHAPE.features)

    def peak(model: nn.Module) -> int:
        opt = torch.optim.Adam(model.parameters())
        return measure_peak_memory(model, x, lambda out: out.pow(2).mean(), opt)

    assert peak(checkpointed) < 0.9 * peak(plain)  # measured here: 0.77


def test_the_state_dict_and_evaluation_are_those_of_the_plain_model(monkeypatch) -> None:
    import engage.train.activation_checkpointing as module

    model = get_builder("mlp").build(SHAPE, {})
    keys = list(model.state_dict())
    apply_activation_checkpointing(model)

    def refuse(*args, **kwargs):
        raise AssertionError("checkpoint called outside training")

    monkeypatch.setattr(module, "checkpoint", refuse)
    model.eval()(torch.randn(2, SHAPE.window, SHAPE.features))
    with torch.no_grad():
        model.train()(torch.randn(2, SHAPE.window, SHAPE.features))

    assert list(model.state_dict()) == keys


def test_a_sequential_is_cut_at_each_layer_with_parameters() -> None:
    net = get_builder("mlp").build(SHAPE, {"layers": 2}).net

    names = [[type(m).__name__ for m in block] for block in blocks(net)]

    assert names == [
        ["Flatten", "Linear", "ReLU", "Dropout"],
        ["Linear", "ReLU", "Dropout"],
        ["Linear"],
    ]


def test_a_model_without_a_layer_stack_is_refused_with_the_field_named() -> None:
    with pytest.raises(SpecError, match=r"train\.activation_checkpointing") as err:
        apply_activation_checkpointing(nn.Linear(3, 2), "plain")

    assert "'plain'" in str(err.value)


def _job(checkpointing: bool, name: str = "mlp") -> TrainJob:
    train = TrainSpec(
        seed=5, epochs=1, batch_size=16, num_workers=1, activation_checkpointing=checkpointing
    )
    params = {"dropout": 0.2} if name == "mlp" else {}
    shape = ModelShape(4, 2, 2)
    return TrainJob(
        train, ModelSpec(name=name, params=params), "classification", shape, None, None, ""
    )


class _Drop:
    """A transport that keeps nothing (the test reads the returned metrics)."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def test_the_trainer_applies_the_spec_and_trains_to_the_same_weights() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] > 0).astype(np.int64)
    data = {"train_x": x[:64], "train_y": y[:64], "val_x": x[64:], "val_y": y[64:]}
    resources = ResourceSampler("cpu", every_s=3600.0)

    workers, losses = [], []
    for flag in (False, True):  # one after the other: building seeds the dropout draws too
        workers.append(make_worker(_job(flag), data, Reporter(_Drop())))
        losses.append(train_epoch(workers[-1], 1, resources)["train_loss"])

    assert "forward" in vars(workers[1].model.net)  # the checkpointed forward is in place
    assert "forward" not in vars(workers[0].model.net)
    assert losses[1] == pytest.approx(losses[0], abs=1e-6)
    for a, b in zip(workers[0].model.parameters(), workers[1].model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


def test_the_driver_refuses_a_model_it_cannot_checkpoint_before_training(monkeypatch) -> None:
    import engage.train.loop as loop

    monkeypatch.setattr(loop, "build_model", lambda job: nn.Linear(2, 2))

    with pytest.raises(SpecError, match="has no layer stack"):
        check_model(_job(True))
    check_model(_job(False))  # nothing to check without the option
    assert isinstance(training_model(_job(False)), nn.Linear)
