"""The registry of model builders a spec can name in ``model.name``.

A builder is one :class:`ModelBuilder` subclass: a name, a one-line description, a pydantic
schema for its hyperparameters and a method that builds the torch module; the
:func:`register_builder` decorator adds it to :data:`MODEL_BUILDERS`. This module imports
no torch at import time, so validating a spec stays fast.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from engage.registry import Registry

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class ModelShape:
    """What a builder needs to know about the data: window length, features, outputs."""

    window: int
    features: int
    outputs: int


class BuilderParams(BaseModel):
    """Base of every builder's hyperparameter schema: unknown keys are refused, values frozen.

    Every field needs a default, so that ``model: {name: x}`` without params is a valid spec.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelBuilder(ABC):
    """Builds one model architecture from a data shape and validated hyperparameters.

    Subclasses set ``name`` (what a spec writes in ``model.name``), ``description`` (one
    lower-case phrase for the spec reference), ``params_model`` and implement
    :meth:`make`; :func:`register_builder` adds them to :data:`MODEL_BUILDERS`::

        class LinearParams(BuilderParams):
            bias: bool = Field(True, description="learn an offset")

        @register_builder
        class LinearBuilder(ModelBuilder):
            '''``linear``: one linear layer over the flattened window.'''

            name = "linear"
            description = "one linear layer over the flattened window"
            params_model = LinearParams

            def make(self, shape, params):
                width = shape.window * shape.features
                return nn.Sequential(nn.Flatten(), nn.Linear(width, shape.outputs, params.bias))
    """

    name: ClassVar[str]
    description: ClassVar[str]
    params_model: ClassVar[type[BuilderParams]]

    def params(self, raw: dict[str, Any]) -> BuilderParams:
        """Validate raw hyperparameters against :attr:`params_model`.

        Raises
        ------
        pydantic.ValidationError
            If a key is unknown or a value is out of range.
        """
        return self.params_model.model_validate(raw)

    def build(self, shape: ModelShape, raw_params: dict[str, Any]) -> nn.Module:
        """Validate ``raw_params`` and build the module for ``shape``.

        Raises
        ------
        pydantic.ValidationError
            If the hyperparameters do not fit :attr:`params_model`.
        """
        return self.make(shape, self.params(raw_params))

    @abstractmethod
    def make(self, shape: ModelShape, params: Any) -> nn.Module:
        """Build the torch module for ``shape`` from already validated ``params``.

        The module maps ``(batch, window, features)`` to ``(batch, outputs)``.
        """


MODEL_BUILDERS: Registry[type[ModelBuilder]] = Registry("model builder", KeyError)
"""Every model builder by name; an unknown name is a ``KeyError`` listing the valid ones."""


def register_builder(cls: type[ModelBuilder]) -> type[ModelBuilder]:
    """Class decorator: add a :class:`ModelBuilder` subclass to :data:`MODEL_BUILDERS`.

    Raises
    ------
    ValueError
        If another builder is already registered under the same ``name``.
    """
    return MODEL_BUILDERS.add(cls)


def get_builder(name: str) -> ModelBuilder:
    """An instance of the builder registered as ``name``.

    Raises
    ------
    KeyError
        If no builder has that name; the message lists the registered ones.
    """
    return MODEL_BUILDERS.get(name)()


def builder_names() -> list[str]:
    """The registered builder names, sorted."""
    return MODEL_BUILDERS.names()


class MLPParams(BuilderParams):
    """Hyperparameters of :class:`MLPBuilder`: layer width, hidden layer count, dropout."""

    hidden: int = Field(64, ge=1, le=65_536)
    layers: int = Field(2, ge=0, le=64)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class GRUParams(BuilderParams):
    """Hyperparameters of :class:`GRUBuilder`: hidden size, stacked layers, dropout."""

    hidden: int = Field(32, ge=1, le=8192)
    layers: int = Field(1, ge=1, le=16)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


class CNN1DParams(BuilderParams):
    """Hyperparameters of :class:`CNN1DBuilder`: channels, conv layers, kernel size, dropout."""

    channels: int = Field(32, ge=1, le=8192)
    layers: int = Field(2, ge=1, le=32)
    kernel_size: int = Field(5, ge=1, le=257)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)


@register_builder
class MLPBuilder(ModelBuilder):
    """``mlp``: an :class:`~engage.train.models.MLP`; ``layers: 0`` is a linear model."""

    name = "mlp"
    description = "fully connected layers over the flattened window"
    params_model = MLPParams

    def make(self, shape: ModelShape, params: MLPParams) -> nn.Module:
        """An MLP over the flattened ``window * features`` inputs."""
        from engage.train.models import MLP

        p = params
        return MLP(shape.window, shape.features, shape.outputs, p.hidden, p.layers, p.dropout)


@register_builder
class GRUBuilder(ModelBuilder):
    """``gru``: a :class:`~engage.train.models.GRUNet`; works for any window length."""

    name = "gru"
    description = "a GRU over time, last hidden state to a linear head"
    params_model = GRUParams

    def make(self, shape: ModelShape, params: GRUParams) -> nn.Module:
        """A GRU over ``shape.features`` inputs per step; the window length is not fixed."""
        from engage.train.models import GRUNet

        p = params
        return GRUNet(shape.features, shape.outputs, p.hidden, p.layers, p.dropout)


@register_builder
class CNN1DBuilder(ModelBuilder):
    """``cnn1d``: a :class:`~engage.train.models.CNN1D`; works for any window length."""

    name = "cnn1d"
    description = "1-D convolutions over time, average pooled"
    params_model = CNN1DParams

    def make(self, shape: ModelShape, params: CNN1DParams) -> nn.Module:
        """Stacked 1-D convolutions over ``shape.features`` channels, average pooled."""
        from engage.train.models import CNN1D

        p = params
        return CNN1D(shape.features, shape.outputs, p.channels, p.layers, p.kernel_size, p.dropout)
