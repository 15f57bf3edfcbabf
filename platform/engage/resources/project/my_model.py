"""Your model: a builder that engage finds by the name the spec gives in ``model.name``.

engage imports this file because the spec names it in ``model.module``. Change the network
in ``make``; add hyperparameters to ``Params`` and set them in the spec under ``model.params``
(an unknown or out-of-range value is a spec error, located by file and line).
"""

from __future__ import annotations

from pydantic import Field
from torch import nn

from engage.train.builders import BuilderParams, ModelBuilder, ModelShape, register_builder


class Params(BuilderParams):
    """Hyperparameters of :class:`MyModel`, set in the spec under ``model.params``."""

    hidden: int = Field(32, ge=1, le=4096, description="hidden units")


@register_builder
class MyModel(ModelBuilder):
    """``my-model``: one hidden layer over the flattened window."""

    name = "my-model"
    description = "one hidden layer over the flattened window"
    params_model = Params

    def make(self, shape: ModelShape, params: Params) -> nn.Module:
        """Map ``(batch, window, features)`` to ``(batch, outputs)``."""
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(shape.window * shape.features, params.hidden),
            nn.ReLU(),
            nn.Linear(params.hidden, shape.outputs),
        )
