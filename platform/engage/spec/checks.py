"""Semantic checks that need more than the pydantic models: registries and metric names.

They run after the spec has validated, so they can rely on its types. Each check returns
:class:`~engage.spec.locate.Problem` items; the loader locates them and raises one
:class:`~engage.errors.SpecError`. Checks that need the data (a batch larger than the
dataset) run later and use :meth:`LoadedSpec.error` instead.
"""

from __future__ import annotations

from pydantic import ValidationError

from engage.data.preprocess.plan import preprocess_problems
from engage.spec.explain import problems_from_validation, show
from engage.spec.locate import Problem
from engage.spec.models import PipelineSpec
from engage.train.builders import MODEL_BUILDERS
from engage.train.metrics import task_metrics

_GATE = ("tracking", "registration", "gate")


def check_spec(spec: PipelineSpec) -> list[Problem]:
    """Every semantic problem of a validated spec; empty when it is sound.

    Parameters
    ----------
    spec
        A spec that passed pydantic validation.

    Returns
    -------
    list of Problem
        Problems with the model builder and its parameters, then with the gate.
    """
    return [
        *check_model(spec),
        *preprocess_problems(spec.data),
        *check_gate(spec),
        *check_precision(spec),
    ]


def check_model(spec: PipelineSpec) -> list[Problem]:
    """``model.name`` is a registered builder and ``model.params`` fit its schema."""
    name = spec.model.name
    if name not in MODEL_BUILDERS:
        valid = ", ".join(MODEL_BUILDERS.names())
        return [
            Problem(("model", "name"), f"got {show(name)}; expected a registered model: {valid}")
        ]
    builder = MODEL_BUILDERS.get(name)
    try:
        builder.params_model.model_validate(spec.model.params)
    except ValidationError as exc:
        return problems_from_validation(
            exc, spec.model.params, builder.params_model, prefix=("model", "params")
        )
    return []


def check_precision(spec: PipelineSpec) -> list[Problem]:
    """``train.precision: fp16`` needs ``train.use_gpu: true``.

    Refused rather than run in another precision: CPU autocast in fp16 is slow or missing
    for many operators, and a silent fallback would record a precision the run did not use.
    """
    if spec.train.precision == "fp16" and not spec.train.use_gpu:
        return [
            Problem(
                ("train", "precision"),
                "got 'fp16' with train.use_gpu false; fp16 autocast and its gradient scaler "
                "need a GPU: set train.use_gpu: true, or use bf16 on CPU",
            )
        ]
    return []


def check_gate(spec: PipelineSpec) -> list[Problem]:
    """The gate metric is one the task produces, compared in its natural direction."""
    registration = spec.tracking.registration
    gate = registration.gate if registration else None
    if gate is None:
        return []
    metrics = task_metrics(spec.data.task)
    if gate.metric not in metrics:
        valid = ", ".join(sorted(metrics))
        return [
            Problem(
                (*_GATE, "metric"),
                f"got {show(gate.metric)}; expected a metric the {spec.data.task} task "
                f"produces: {valid}",
            )
        ]
    natural = metrics[gate.metric]
    if gate.direction != natural:
        moves = "increases" if natural == "maximize" else "decreases"
        return [
            Problem(
                (*_GATE, "direction"),
                f"got {show(gate.direction)}; expected {natural!r}: {gate.metric} improves "
                f"as it {moves}",
            )
        ]
    return []
