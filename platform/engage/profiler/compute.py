"""The job's training step alone, for the compute bound: its model, optimiser and loss.

The model comes from the spec's registered builder, as in training; the step is forward,
loss, backward and an optimiser update on a batch already in memory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engage.spec.models import PipelineSpec
from engage.train.builders import ModelShape, get_builder
from engage.train.plugins import import_model_module


def make_step(
    spec: PipelineSpec, shape: ModelShape
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One training step of ``spec``'s model for inputs of ``shape``, as a closure.

    Raises
    ------
    KeyError
        If the model builder is not registered (the spec check reports it first).
    """
    if spec.model.module is not None:
        import_model_module(spec.model.module)
    torch.manual_seed(spec.train.seed)
    model = get_builder(spec.model.name).build(shape, spec.model.params)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=spec.train.learning_rate)
    classify = spec.data.task == "classification"

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        """Forward, loss, backward and one optimiser update on ``(x, y)``."""
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if classify:
            loss = torch.nn.functional.cross_entropy(out, y)
        else:
            loss = torch.nn.functional.mse_loss(out.reshape(-1), y.float())
        loss.backward()
        opt.step()

    return step
