"""The registry of model builders a spec can name in ``model.name``.

A builder pairs a pydantic schema for its hyperparameters with a function that builds the
torch module. This module imports no torch at import time, so validating a spec stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class ModelShape:
    """What a builder needs to know about the data: window length, features, outputs."""

    window: int
    features: int
    outputs: int


class BuilderParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class ModelBuilder:
    name: str
    description: str
    params_model: type[BuilderParams]
    build_fn: Callable[[ModelShape, Any], nn.Module]

    def params(self, raw: dict[str, Any]) -> BuilderParams:
        """Validate raw hyperparameters; raises pydantic's ValidationError."""
        return self.params_model.model_validate(raw)

    def build(self, shape: ModelShape, raw_params: dict[str, Any]) -> nn.Module:
        return self.build_fn(shape, self.params(raw_params))


MODEL_BUILDERS: dict[str, ModelBuilder] = {}


def register_builder(builder: ModelBuilder) -> ModelBuilder:
    if builder.name in MODEL_BUILDERS:
        raise ValueError(f"model builder {builder.name!r} is already registered")
    MODEL_BUILDERS[builder.name] = builder
    return builder


def get_builder(name: str) -> ModelBuilder:
    try:
        return MODEL_BUILDERS[name]
    except KeyError:
        valid = ", ".join(sorted(MODEL_BUILDERS))
        raise KeyError(f"unknown model {name!r}; registered models: {valid}") from None


class MLPParams(BuilderParams):
    hidden: int = Field(64, ge=1, le=65_536)
    layers: int = Field(2, ge=0, le=64)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class GRUParams(BuilderParams):
    hidden: int = Field(32, ge=1, le=8192)
    layers: int = Field(1, ge=1, le=16)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class CNN1DParams(BuilderParams):
    channels: int = Field(32, ge=1, le=8192)
    layers: int = Field(2, ge=1, le=32)
    kernel_size: int = Field(5, ge=1, le=257)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


def _build_mlp(shape: ModelShape, p: MLPParams) -> nn.Module:
    from engage.train.models import MLP

    return MLP(shape.window, shape.features, shape.outputs, p.hidden, p.layers, p.dropout)


def _build_gru(shape: ModelShape, p: GRUParams) -> nn.Module:
    from engage.train.models import GRUNet

    return GRUNet(shape.features, shape.outputs, p.hidden, p.layers, p.dropout)


def _build_cnn1d(shape: ModelShape, p: CNN1DParams) -> nn.Module:
    from engage.train.models import CNN1D

    return CNN1D(shape.features, shape.outputs, p.channels, p.layers, p.kernel_size, p.dropout)


register_builder(
    ModelBuilder("mlp", "fully connected layers over the flattened window", MLPParams, _build_mlp)
)
register_builder(
    ModelBuilder(
        "gru", "a GRU over time, last hidden state to a linear head", GRUParams, _build_gru
    )
)
register_builder(
    ModelBuilder("cnn1d", "1-D convolutions over time, average pooled", CNN1DParams, _build_cnn1d)
)
