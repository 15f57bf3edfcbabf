"""``--set`` overrides: parsing, applying, and errors located at the override."""

from __future__ import annotations

import pytest

from engage.errors import SpecError
from engage.spec import apply_overrides, load_spec
from engage.spec.overrides import parse_override

from .specs import VALID

RAW = {"train": {"epochs": 2}, "data": {"features": ["a", "b"]}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train.epochs=3", (("train", "epochs"), 3)),
        ("train.learning_rate=1e-3", (("train", "learning_rate"), "1e-3")),  # YAML 1.1 quirk
        ("data.features=[a, b]", (("data", "features"), ["a", "b"])),
        ("tracking.registration=null", (("tracking", "registration"), None)),
        ("train.use_gpu=true", (("train", "use_gpu"), True)),
        ("description=a=b", (("description",), "a=b")),
        (" train . epochs = 4", (("train", "epochs"), 4)),
    ],
)
def test_parse_override_uses_yaml_values(text, expected):
    assert parse_override(text) == expected


def test_apply_sets_values_and_leaves_input_alone():
    result = apply_overrides(RAW, ["train.epochs=3", "data.features.1=co2"])

    assert result == {"train": {"epochs": 3}, "data": {"features": ["a", "co2"]}}
    assert RAW == {"train": {"epochs": 2}, "data": {"features": ["a", "b"]}}


def test_apply_creates_intermediate_mappings():
    result = apply_overrides({}, ["tracking.registration.gate.threshold=0.9"])

    assert result == {"tracking": {"registration": {"gate": {"threshold": 0.9}}}}


def test_later_override_wins():
    assert apply_overrides(RAW, ["train.epochs=3", "train.epochs=4"])["train"]["epochs"] == 4


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("train.epochs", "--set train.epochs: expected KEY=VALUE; there is no '='"),
        ("train..epochs=3", "has an empty component"),
        ("=3", "has an empty component"),
        ("train.epochs=[1, 2", "the value is not valid YAML"),
        ("data.features.5=x", "data.features is a list of 2 item(s); got index '5'"),
        ("data.features.x=1", "got index 'x', expected 0 to 1"),
        ("data.features.0.name=x", "data.features.0 is 'a', not a mapping or list"),
    ],
)
def test_bad_override_is_a_spec_error(text, fragment):
    with pytest.raises(SpecError) as info:
        apply_overrides(RAW, [text])

    assert fragment in info.value.message
    assert "--set KEY=VALUE" in info.value.hint


def test_override_changes_loaded_value(write_spec):
    loaded = load_spec(write_spec(VALID), ["train.epochs=3"])

    assert loaded.spec.train.epochs == 3
    assert loaded.overrides == ("train.epochs=3",)
    assert loaded.text == VALID
    assert loaded.locate("train", "epochs") == "--set train.epochs=3"
    assert loaded.locate("train", "batch_size").endswith("spec.yaml:19")


def test_override_making_spec_invalid_is_located_at_override(write_spec):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(VALID), ["train.epochs=-1"])

    assert info.value.message == "--set train.epochs=-1: train.epochs: got -1; expected >= 1"


def test_override_of_unknown_key_suggests_the_right_one(write_spec):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(VALID), ["train.epoch=3"])

    assert info.value.message.startswith(
        "--set train.epoch=3: train.epoch: unknown key; did you mean 'epochs'?"
    )


def test_override_without_equals_fails_load(write_spec):
    with pytest.raises(SpecError, match="no '='"):
        load_spec(write_spec(VALID), ["train.epochs"])


def test_override_of_a_whole_section_locates_its_fields(write_spec):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(VALID), ["train={epochs: 0}"])

    assert info.value.message == "--set train={epochs: 0}: train.epochs: got 0; expected >= 1"


def test_override_fixing_a_file_problem_makes_spec_valid(write_spec):
    path = write_spec(VALID.replace("epochs: 2", "epochs: 0"))

    assert load_spec(path, ["train.epochs=1"]).spec.train.epochs == 1


def test_semantic_check_on_overridden_value_is_located_at_override(write_spec):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(VALID), ["model.name=resnet"])

    assert info.value.message.startswith("--set model.name=resnet: model.name: got 'resnet'")
