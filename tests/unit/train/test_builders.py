"""The model-builder registry: every builder is described, defaulted and buildable."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from engage.train.builders import (
    MODEL_BUILDERS,
    BuilderParams,
    ModelBuilder,
    ModelShape,
    get_builder,
    register_builder,
)

NAMES = sorted(MODEL_BUILDERS)
SHAPES = [ModelShape(1, 1, 1), ModelShape(30, 5, 2), ModelShape(7, 3, 4), ModelShape(16, 2, 1)]


def test_registry_holds_the_documented_builders() -> None:
    assert set(NAMES) >= {"mlp", "gru", "cnn1d"}
    for name, builder in MODEL_BUILDERS.items():
        assert builder.name == name


@pytest.mark.parametrize("name", NAMES)
def test_builder_has_a_description_and_a_params_model(name: str) -> None:
    builder = MODEL_BUILDERS[name]

    assert builder.description.strip()
    assert issubclass(builder.params_model, BuilderParams)


@pytest.mark.parametrize("name", NAMES)
def test_every_params_field_has_a_default(name: str) -> None:
    """Meta test (STYLE habit 10): `model: {name: x}` with no params must be a valid spec."""
    fields = MODEL_BUILDERS[name].params_model.model_fields

    required = [f for f, info in fields.items() if info.is_required()]

    assert required == []


@pytest.mark.parametrize("name", NAMES)
def test_default_params_validate(name: str) -> None:
    builder = MODEL_BUILDERS[name]

    params = builder.params({})

    assert params == builder.params_model()


@pytest.mark.parametrize("name", NAMES)
def test_params_refuse_unknown_keys(name: str) -> None:
    with pytest.raises(ValidationError, match="not_a_param"):
        MODEL_BUILDERS[name].params({"not_a_param": 1})


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"w{s.window}f{s.features}o{s.outputs}")
def test_built_module_maps_windows_to_outputs(name: str, shape: ModelShape) -> None:
    model = MODEL_BUILDERS[name].build(shape, {})
    x = torch.randn(3, shape.window, shape.features)

    out = model(x)

    assert isinstance(model, torch.nn.Module)
    assert out.shape == (3, shape.outputs)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NAMES)
def test_build_applies_the_params(name: str) -> None:
    builder = MODEL_BUILDERS[name]
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
    existing = MODEL_BUILDERS["mlp"]
    dup = ModelBuilder("mlp", "again", existing.params_model, existing.build_fn)

    with pytest.raises(ValueError, match="already registered"):
        register_builder(dup)

    assert MODEL_BUILDERS["mlp"] is existing
