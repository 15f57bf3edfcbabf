"""Semantic checks that need more than the pydantic models: registries, metric names, one
job-kind section at most, and a ``tune`` search space whose every end and choice is a valid
change of the spec (so ``engage validate`` reports what ``engage run`` would).

They run after the spec has validated, so they can rely on its types. Each check returns
:class:`~engage.spec.locate.Problem` items; the loader locates them and raises one
:class:`~engage.errors.SpecError`. Checks that need the data (a batch larger than the
dataset) run later and use :meth:`LoadedSpec.error` instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engage.data.preprocess.plan import preprocess_problems
from engage.errors import SpecError
from engage.spec.explain import problems_from_validation, show
from engage.spec.locate import Problem, dotted
from engage.spec.models import PipelineSpec
from engage.spec.overrides import apply_overrides
from engage.spec.tune_space import corners, override_text, reserved
from engage.train.builders import MODEL_BUILDERS
from engage.train.metrics import task_metrics

_GATE = ("tracking", "registration", "gate")

#: ``(spec section, job kind)``: a spec sets at most one; none runs the ``pipeline`` kind
#: (:mod:`engage.runtime.kinds` picks the kind from this table).
SECTION_KINDS: tuple[tuple[str, str], ...] = (
    ("federated", "federated"),
    ("tune", "tuning"),
    ("adaptive", "adaptive"),
)


def check_spec(spec: PipelineSpec, raw: dict[str, Any] | None = None) -> list[Problem]:
    """Every semantic problem of a validated spec; empty when it is sound.

    Parameters
    ----------
    spec
        A spec that passed pydantic validation.
    raw
        The mapping ``spec`` was validated from (YAML with the ``--set`` overrides
        applied); the ``tune.space`` check applies each trial's override to it. None: the
        spec's own dump of the fields that were set.

    Returns
    -------
    list of Problem
        Problems with the model builder and its parameters, the preprocessing, the gate,
        the precision, the job-kind sections and the tuning search.
    """
    return [
        *_semantic(spec),
        *check_kinds(spec),
        *check_stage_resources(spec),
        *check_tune(spec, raw),
    ]


def _semantic(spec: PipelineSpec) -> list[Problem]:
    """The checks a tuning trial's spec must pass too (the search itself is shared)."""
    return [
        *check_model(spec),
        *preprocess_problems(spec.data),
        *check_gate(spec),
        *check_precision(spec),
    ]


def check_kinds(spec: PipelineSpec) -> list[Problem]:
    """At most one job-kind section (``federated``, ``tune``, ``adaptive``) is set.

    Refused rather than run as the first one: a spec with two would silently ignore the
    other, and the run would not be the job the user described.
    """
    found = [s for s, _ in SECTION_KINDS if getattr(spec, s, None) is not None]
    if len(found) < 2:
        return []
    both = f"both {found[0]} and {found[1]}" if len(found) == 2 else ", ".join(found)
    kinds = ", ".join(f"{kind} ({section}:)" for section, kind in SECTION_KINDS)
    return [
        Problem(
            (found[-1],),
            f"got {both}; a spec runs as one job kind: {kinds}, or pipeline (none of "
            "them); keep one of these sections",
        )
    ]


#: Job kinds whose own data or evaluation stage does not run as one Ray task, so they
#: cannot honour ``data.resources`` / ``evaluate.resources`` (section -> kind).
_NO_DATA_TASK = ("federated", "tune", "adaptive")
_NO_EVALUATE_TASK = ("federated", "adaptive")


def check_stage_resources(spec: PipelineSpec) -> list[Problem]:
    """``data.resources`` and ``evaluate.resources`` only where a task can reserve them.

    Refused rather than ignored: a federated or adaptive job prepares and scores its data
    its own way (a tuning job's trials re-prepare theirs), and a streamed training split is
    read by Ray Data tasks beside the workers, so the request would place nothing.
    """
    problems: list[Problem] = []
    if spec.data.resources is not None:
        if spec.data.streaming is True:
            problems.append(
                Problem(
                    ("data", "resources"),
                    "got data.streaming: true; a streamed training split is read by Ray Data "
                    "tasks beside the training workers, not by one data-stage task: remove "
                    "data.resources or set data.streaming: false",
                )
            )
        problems += _kind_refuses(spec, ("data", "resources"), _NO_DATA_TASK)
    if spec.evaluate.resources is not None:
        problems += _kind_refuses(spec, ("evaluate", "resources"), _NO_EVALUATE_TASK)
    return problems


def _kind_refuses(
    spec: PipelineSpec, path: tuple[str, ...], sections: tuple[str, ...]
) -> list[Problem]:
    kinds = dict(SECTION_KINDS)
    found = [s for s in sections if getattr(spec, s, None) is not None]
    return [
        Problem(
            path,
            f"a {kinds[s]} job ({s}:) does not run this stage as one Ray task, so "
            f"{'.'.join(path)} would place nothing; remove it, or run the pipeline kind "
            f"(no {s}: section)",
        )
        for s in found[:1]
    ]


def epoch_metrics(task: str) -> list[str]:
    """The metrics every training epoch reports for ``task``: tuning trials compare on one."""
    return ["train_loss", *(m for m in task_metrics(task) if m.startswith("val_"))]


def check_tune(spec: PipelineSpec, raw: dict[str, Any] | None = None) -> list[Problem]:
    """``tune.metric`` is an epoch metric, and every ``tune.space`` key is a spec field
    that takes both ends of its range and every choice (as ``--set`` would give it).

    ``raw`` is the mapping the spec was validated from (see :func:`check_spec`).
    """
    tune = spec.tune
    if tune is None:
        return []
    problems = []
    valid = epoch_metrics(spec.data.task)
    if tune.metric not in valid:
        problems.append(
            Problem(
                ("tune", "metric"),
                f"got {tune.metric!r}; expected a metric every {spec.data.task} epoch "
                "reports: " + ", ".join(valid),
            )
        )
    base = raw if raw is not None else spec.model_dump(mode="json", exclude_unset=True)
    for key, param in tune.space.items():
        where = ("tune", "space", key)
        if reserved(key):
            shared = "expected a field outside tune and name (trials share those)"
            problems.append(Problem(where, f"got {key!r}; {shared}"))
            continue
        for value in corners(param):
            if why := _trial_problem(base, key, value):
                change = override_text(key, value)
                problems.append(Problem(where, f"{change} is not a valid spec change: {why}"))
                break
    return problems


def _trial_problem(raw: dict[str, Any], key: str, value: Any) -> str:
    """What is wrong with the spec a trial drawing ``value`` for ``key`` makes ("" if
    nothing): validated and checked as :func:`check_spec` does, less the search itself
    (a key under ``federated`` or ``adaptive`` would make the trial a second job kind)."""
    text = override_text(key, value)
    try:
        trial_raw = apply_overrides(raw, [text])
        trial = PipelineSpec.model_validate(trial_raw)
        found = [*_semantic(trial), *check_kinds(trial)]
    except SpecError as exc:  # a path through a value that is not a mapping or list
        return exc.message.removeprefix(f"--set {text}: ")
    except ValidationError as exc:
        found = problems_from_validation(exc, trial_raw, PipelineSpec)
    return "; ".join(f"{dotted(p.path)}: {p.text}" for p in found)


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
