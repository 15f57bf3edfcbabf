"""A spec's preprocessing, checked and built: operators in order, row operators applied.

:func:`preprocess_problems` is what ``engage validate`` reports (each problem located at
its spec field); :func:`build_operators` turns ``data.preprocess`` into operators and
:func:`apply_rows` runs the row-level ones on the validated table; :func:`stream_refusals`
names the operators that cannot fit on a streamed training split. Nothing here imports
torch, so checking a spec stays fast.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pydantic import ValidationError

from engage.data.preprocess.base import OPERATORS, Operator, make_operator
from engage.errors import SpecError
from engage.spec.explain import problems_from_validation
from engage.spec.locate import Problem
from engage.spec.models import DataSpec, PreprocessStep


def preprocess_problems(spec: DataSpec) -> list[Problem]:
    """Every problem with ``data.preprocess``, each located at its spec field.

    Unknown operators, parameters that fail the operator's schema, a row operator placed
    after a window operator (rows must be resampled before they are windowed), and with
    ``streaming: true`` an operator that cannot fit on a stream (:func:`stream_refusals`).
    """
    problems: list[Problem] = []
    seen_window = False
    for i, step in enumerate(spec.preprocess):
        at = ("data", "preprocess", i)
        if step.op not in OPERATORS:
            valid = ", ".join(OPERATORS.names())
            problems.append(Problem((*at, "op"), f"got {step.op!r}; expected one of: {valid}"))
            continue
        cls = OPERATORS.get(step.op)
        try:
            cls.Params.model_validate(step.params)
        except ValidationError as exc:
            prefix = (*at, "params")
            problems += problems_from_validation(exc, step.params, cls.Params, prefix=prefix)
        if cls.level == "row" and seen_window:
            problems.append(
                Problem((*at, "op"), f"row operator {step.op!r} must come before window operators")
            )
        seen_window = seen_window or cls.level == "window"
    if spec.streaming is True and not problems:
        refused = stream_refusals(build_operators(spec.preprocess))
        problems += [Problem(path, text) for path, text in refused]
    return problems


def stream_refusals(ops: Sequence[Operator]) -> list[tuple[tuple, str]]:
    """The spec path and text of each operator of ``ops`` that cannot fit on a stream.

    A streamed training split is never in memory, so an operator whose fit needs every
    training window at once (``clip`` by ``quantile``) cannot run on it; ``ops`` are all
    of ``data.preprocess``, in order, so the path names the step.
    """
    refused = []
    for i, op in enumerate(ops):
        if op.needs_fit and not op.fits_in_parts:
            field = ("params", op.fit_param) if op.fit_param else ("op",)
            text = (
                f"{op.name!r} with {op.fit_param or 'its parameters'} fits on every training "
                "window in memory at once, and a streamed training split is never held in "
                "memory; use fixed parameters or data.streaming: false"
            )
            refused.append((("data", "preprocess", i, *field), text))
    return refused


def check_streamable(ops: Sequence[Operator]) -> None:
    """Refuse ``ops`` on a streamed training split if one cannot fit on it.

    Raises
    ------
    SpecError
        Naming the first such step's field, e.g. ``data.preprocess[1].params.quantile``.
    """
    refused = stream_refusals(ops)
    if refused:
        (_, _, i, *field), text = refused[0]
        raise SpecError(
            f"data.preprocess[{i}].{'.'.join(field)}: {text}",
            hint="give the step fixed parameters (clip: low/high), or set data.streaming: false",
        )


def build_operators(steps: Sequence[PreprocessStep]) -> list[Operator]:
    """The operators of ``data.preprocess``, in order.

    Raises
    ------
    SpecError
        Naming ``data.preprocess[i]`` and the parameter, for an unknown operator, bad
        parameters, or a row operator after a window operator.
    """
    ops = [make_operator(s.op, s.params, i) for i, s in enumerate(steps)]
    levels = [op.level for op in ops]
    if "window" in levels and "row" in levels[levels.index("window") :]:
        i = levels.index("row", levels.index("window"))
        raise SpecError(
            f"data.preprocess[{i}].op: row operator {ops[i].name!r} comes after a window operator",
            hint="list row operators (resample) first: rows are resampled before windowing",
        )
    return ops


def apply_rows(frame: pd.DataFrame, ops: Sequence[Operator], spec: DataSpec) -> pd.DataFrame:
    """The validated table after every row operator of ``ops`` (unchanged when there is none)."""
    # engage.spec's loader imports this module for its checks: sources (which imports
    # engage.spec) is imported here, when rows are resampled, to keep that import order.
    from engage.data.sources import key_columns

    time, group = key_columns(spec)
    numeric = list(
        dict.fromkeys([*spec.features, *([spec.target] if spec.task == "regression" else [])])
    )
    for op in ops:
        if op.level == "row":
            frame = op.apply_rows(frame, time, group, numeric)
    return frame
