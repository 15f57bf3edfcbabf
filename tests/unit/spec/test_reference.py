"""The generated spec reference: committed, complete, and never stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage.spec import parse_spec
from engage.spec.explain import submodels
from engage.spec.models import PipelineSpec
from engage.spec.reference import EXAMPLE, _sections, describe, render
from engage.train.builders import MODEL_BUILDERS
from engage.train.metrics import task_metrics

DOC = Path(__file__).resolve().parents[3] / "docs" / "spec.md"


def test_committed_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/spec.md is stale; regenerate it with "
        "`python -m engage.spec.reference > docs/spec.md` and commit it"
    )


def test_example_in_reference_is_a_valid_spec():
    loaded = parse_spec(EXAMPLE, origin="docs/spec.md")

    assert loaded.spec.model.name == "mlp"


@pytest.mark.parametrize(("path", "model"), list(_sections(PipelineSpec, ())))
def test_every_field_is_described(path, model):
    for name, info in model.model_fields.items():
        assert describe(path, name, info), f"{path}.{name} needs a description"


@pytest.mark.parametrize("name", sorted(MODEL_BUILDERS))
def test_every_builder_param_is_described(name):
    model = MODEL_BUILDERS.get(name).params_model
    for field, info in model.model_fields.items():
        assert describe(f"model.params.{name}", field, info), f"{name}.{field}"


def test_reference_lists_sources_builders_and_metrics():
    text = render()
    sources = submodels(
        PipelineSpec.model_fields["data"].annotation.model_fields["source"].annotation
    )

    for source in sources:
        tag = source.model_fields["type"].annotation.__args__[0]
        assert f"`data.source` with `type: {tag}`" in text
    for name in MODEL_BUILDERS:
        assert f"### `{name}`" in text
    for task in ("classification", "regression"):
        for metric, direction in task_metrics(task).items():
            assert f"| `{metric}` | `{direction}` |" in text
