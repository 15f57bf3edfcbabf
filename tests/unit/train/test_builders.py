"""The model-builder registry: every builder is described, defaulted and buildable."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from engage.registry import Registry
from engage.train import builders
from engage.train.builders import (
    MODEL_BUILDERS,
    BuilderParams,
    MLPParams,
    ModelBuilder,
    ModelShape,
    builder_names,
    get_builder,
    register_builder,
)

NAMES = builder_names()
SHAPES = [ModelShape(1, 1, 1), ModelShape(30, 5, 2), ModelShape(7, 3, 4), ModelShape(16, 2, 1)]


def test_registry_holds_the_documented_builders() -> None:
    assert set(NAMES) >= {"mlp", "gru", "cnn1d"}
    for name, builder in MODEL_BUILDERS.items():
        assert issubclass(builder, ModelBuilder)
        assert builder.name == name
        assert builder.__doc__


@pytest.mark.parametrize("name", NAMES)
def test_builder_has_a_description_and_a_params_model(name: str) -> None:
    builder = MODEL_BUILDERS.get(name)

    assert builder.description.strip()
    assert issubclass(builder.params_model, BuilderParams)


@pytest.mark.parametrize("name", NAMES)
def test_every_params_field_has_a_default(name: str) -> None:
    """Meta test (STYLE habit 10): `model: {name: x}` with no params must be a valid spec."""
    fields = MODEL_BUILDERS.get(name).params_model.model_fields

    required = [f for f, info in fields.items() if info.is_required()]

    assert required == []


@pytest.mark.parametrize("name", NAMES)
def test_default_params_validate(name: str) -> None:
    builder = get_builder(name)

    params = builder.params({})

    assert params == builder.params_model()


@pytest.mark.parametrize("name", NAMES)
def test_params_refuse_unknown_keys(name: str) -> None:
    with pytest.raises(ValidationError, match="not_a_param"):
        get_builder(name).params({"not_a_param": 1})


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"w{s.window}f{s.features}o{s.outputs}")
def test_built_module_maps_windows_to_outputs(name: str, shape: ModelShape) -> None:
    model = get_builder(name).build(shape, {})
    x = torch.randn(3, shape.window, shape.features)

    out = model(x)

    assert isinstance(model, torch.nn.Module)
    assert out.shape == (3, shape.outputs)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NAMES)
def test_build_applies_the_params(name: str) -> None:
    builder = get_builder(name)
    field = "channels" if "channels" in builder.params_model.model_fields else "hidden"
    shape = ModelShape(8, 3, 2)

    small = builder.build(shape, {field: 2})
    large = builder.build(shape, {field: 40})

    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    assert count(small) < count(large)


def test_unknown_builder_names_every_registered_one() -> None:
    with pytest.raises(KeyError) as caught:
        get_builder("transformer")

    message = str(caught.value)
    assert "'transformer'" in message
    assert ", ".join(NAMES) in message


def test_registering_a_name_twice_is_refused() -> None:
    existing = MODEL_BUILDERS.get("mlp")

    class Again(existing):
        """A second builder that claims the name ``mlp``."""

    with pytest.raises(ValueError, match="already registered"):
        register_builder(Again)

    assert MODEL_BUILDERS.get("mlp") is existing


def test_a_new_builder_is_one_class_and_one_decorator(monkeypatch: pytest.MonkeyPatch) -> None:
    registry: Registry[type[ModelBuilder]] = Registry("model builder", KeyError)
    for _, cls in MODEL_BUILDERS.items():
        registry.add(cls)
    monkeypatch.setattr(builders, "MODEL_BUILDERS", registry)

    @register_builder
    class Linear(ModelBuilder):
        """A linear map of the flattened window (only for this test)."""

        name = "test-linear"
        description = "one linear layer"
        params_model = MLPParams

        def make(self, shape: ModelShape, params: MLPParams) -> torch.nn.Module:
            width = shape.window * shape.features
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(width, shape.outputs))

    model = get_builder("test-linear").build(ModelShape(4, 2, 3), {})

    assert model(torch.randn(5, 4, 2)).shape == (5, 3)
    assert builder_names() == ["cnn1d", "gru", "mlp", "test-linear"]
    assert "test-linear" not in MODEL_BUILDERS
