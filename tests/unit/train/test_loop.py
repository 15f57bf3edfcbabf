"""The parts of the training loop that run without Ray: optimizer and seeded model."""

from __future__ import annotations

import pytest
import torch

from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, build_model, make_optimizer


def _job(seed: int = 3, **params: object) -> TrainJob:
    return TrainJob(
        TrainSpec(seed=seed),
        ModelSpec(name="mlp", params=params),
        "classification",
        ModelShape(4, 2, 3),
        None,
        None,
        "",
    )


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)],
)
def test_make_optimizer_uses_the_spec(kind: str, cls: type) -> None:
    spec = TrainSpec(optimizer=kind, learning_rate=0.05, weight_decay=0.01)

    opt = make_optimizer(spec, [torch.nn.Parameter(torch.zeros(2))])

    assert type(opt) is cls
    group = opt.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.05, 0.01)
    if kind == "sgd":
        assert group["momentum"] == 0.9


def test_build_model_is_reproducible_for_a_seed() -> None:
    a, b, other = build_model(_job(3)), build_model(_job(3)), build_model(_job(4))

    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(next(a.parameters()), next(other.parameters()))


def test_build_model_passes_params_to_the_builder() -> None:
    model = build_model(_job(hidden=5, layers=1))

    out = model(torch.randn(2, 4, 2))

    assert out.shape == (2, 3)
    assert model.net[1].out_features == 5
