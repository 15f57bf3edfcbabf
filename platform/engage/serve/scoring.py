"""MLflow's scoring-server request bodies on ``/invocations``, and the example body.

``mlflow models serve`` takes a JSON object with exactly one of ``dataframe_split``
(``{"columns": [...], "data": [[...]]}``), ``dataframe_records`` (``[{column: value}]``),
``instances`` or ``inputs`` (tensors), plus optional ``params``, and answers
``{"predictions": [...]}``. engage's ``/invocations`` takes the same bodies, so a client
of MLflow's server switches by changing the URL; ``request_ids`` may ride along as on
``/predict``.

engage models read windows ``(n, window, features)``. The tensor forms are those windows.
A dataframe is a table of time steps: its columns are matched to the model's feature names
by name (extra columns are ignored, as MLflow ignores columns outside the signature) and
each block of ``window`` consecutive rows is one window. Every problem is one
:class:`RequestError` naming the field, as on ``/predict``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engage.serve.validation import (
    InputSpec,
    PredictRequest,
    RequestError,
    check_finite,
    json_type,
    locate_bad,
    non_finite_name,
    parse_json,
    request_ids,
    to_array,
)

FORMATS = ("dataframe_split", "dataframe_records", "instances", "inputs")
_OPTIONAL = ("params", "request_ids")
_SPLIT_KEYS = ("columns", "data", "index")

_Table = tuple[list[list[Any]], Callable[[int, int], str]]  # rows; (row, feature) -> field


def parse_invocation(
    body: bytes, spec: InputSpec, features: Sequence[str] | None, nan_policy: str = "reject"
) -> PredictRequest:
    """A checked ``/invocations`` body in one of MLflow's formats, as float32 windows.

    Parameters
    ----------
    body
        The raw request body.
    spec
        The model's input shape (``window``, ``features``).
    features
        The model's feature names in input order; None when the version records none, and
        then only the tensor forms are accepted.
    nan_policy
        ``reject`` (a 422 for the first NaN or infinity) or ``allow``.

    Raises
    ------
    RequestError
        400 for a body that is not JSON, 422 naming the field for anything else.
    """
    payload = parse_json(body)
    key = _format_of(payload)
    value = payload[key]
    params = payload.get("params")
    if params is not None and not isinstance(params, dict):
        raise RequestError(422, "bad_request", "params must be a JSON object", "params")
    if key in ("inputs", "instances"):
        x = to_array(value, spec, key)
        if b"true" in body or b"false" in body:
            locate_bad(value, spec, key)  # numpy reads JSON booleans as 1.0/0.0 silently
        if nan_policy == "reject":
            check_finite(x, key)
    else:
        if not features:
            raise RequestError(
                422,
                "unsupported_format",
                f"{key}: this model version records no feature names to match columns to; "
                'send the windows as "inputs" (a list of windows of shape '
                f"(n, {spec.window}, {spec.features}))",
                key,
            )
        table = _split(value, features) if key == "dataframe_split" else _records(value, features)
        x = _windows(table, spec, key, features, nan_policy)
    return PredictRequest(x, request_ids(payload.get("request_ids"), len(x)))


def _format_of(payload: Any) -> str:
    """The one format key of ``payload``."""
    if not isinstance(payload, dict):
        raise RequestError(
            422, "bad_request", f"expected a JSON object with one of {', '.join(FORMATS)}"
        )
    unknown = sorted(set(payload) - set(FORMATS) - set(_OPTIONAL))
    if unknown:
        raise RequestError(
            422,
            "unknown_field",
            f"unknown field(s) {', '.join(unknown)}; valid: {', '.join(FORMATS + _OPTIONAL)}",
            unknown[0],
        )
    given = [k for k in FORMATS if k in payload]
    if not given:
        raise RequestError(
            422, "missing_field", f"missing the input: send one of {', '.join(FORMATS)}"
        )
    if len(given) > 1:
        raise RequestError(
            422,
            "conflicting_fields",
            f"{' and '.join(given)} given together; send exactly one input format",
            given[1],
        )
    return given[0]


def _split(value: Any, features: Sequence[str]) -> _Table:
    """``dataframe_split`` -> rows of the feature columns, in the model's order."""
    where = "dataframe_split"
    if not isinstance(value, dict):
        raise RequestError(
            422,
            "bad_request",
            f'{where} must be an object {{"columns": [...], "data": [...]}}',
            where,
        )
    unknown = sorted(set(value) - set(_SPLIT_KEYS))
    if unknown:
        raise RequestError(
            422,
            "unknown_field",
            f"{where} has unknown field(s) {', '.join(unknown)}; valid: {', '.join(_SPLIT_KEYS)}",
            f"{where}.{unknown[0]}",
        )
    for part in ("columns", "data"):
        if part not in value:
            raise RequestError(422, "missing_field", f"{where} needs {part!r}", f"{where}.{part}")
    columns, data = value["columns"], value["data"]
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise RequestError(
            422, "bad_request", f"{where}.columns must be a list of names", f"{where}.columns"
        )
    index = _column_index(columns, features, f"{where}.columns")
    if not isinstance(data, list):
        raise RequestError(
            422, "wrong_shape", f"{where}.data must be a list of rows", f"{where}.data"
        )
    for r, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            got = f"{len(row)} values" if isinstance(row, list) else json_type(row)
            raise RequestError(
                422,
                "wrong_shape",
                f"{where}.data[{r}] has {got}; expected {len(columns)} (one per column)",
                f"{where}.data[{r}]",
            )
    rows = [[row[i] for i in index] for row in data]
    return rows, lambda r, c: f"{where}.data[{r}][{index[c]}]"


def _column_index(columns: list[str], features: Sequence[str], where: str) -> list[int]:
    """Where each model feature sits among ``columns`` (422 for a missing or twice-named one)."""
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise RequestError(
            422, "duplicate_column", f"{where} names {', '.join(twice)} more than once", where
        )
    missing = [f for f in features if f not in columns]
    if missing:
        raise RequestError(
            422,
            "missing_column",
            f"{where} lacks the model's feature(s) {', '.join(missing)}; "
            f"the model reads {', '.join(features)}",
            where,
        )
    return [columns.index(f) for f in features]


def _records(value: Any, features: Sequence[str]) -> _Table:
    """``dataframe_records`` -> rows of the feature columns, in the model's order."""
    where = "dataframe_records"
    if not isinstance(value, list):
        raise RequestError(
            422, "bad_request", f"{where} must be a list of objects {{column: value}}", where
        )
    rows = []
    for r, record in enumerate(value):
        if not isinstance(record, dict):
            raise RequestError(
                422,
                "bad_request",
                f"{where}[{r}] is {json_type(record)}; expected an object {{column: value}}",
                f"{where}[{r}]",
            )
        missing = [f for f in features if f not in record]
        if missing:
            raise RequestError(
                422,
                "missing_column",
                f"{where}[{r}] lacks the model's feature(s) {', '.join(missing)}",
                f"{where}[{r}].{missing[0]}",
            )
        rows.append([record[f] for f in features])
    return rows, lambda r, c: f"{where}[{r}].{features[c]}"


def _windows(
    table: _Table, spec: InputSpec, key: str, features: Sequence[str], nan_policy: str
) -> np.ndarray:
    """Rows of feature values -> float32 windows of ``spec.window`` consecutive rows."""
    cells, field_of = table
    for r, row in enumerate(cells):
        for c, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RequestError(
                    422,
                    "wrong_dtype",
                    f"{field_of(r, c)} (column {features[c]!r}) is {json.dumps(value)[:40]} "
                    f"({json_type(value)}); expected a number ({spec.dtype})",
                    field_of(r, c),
                )
    rows, window = len(cells), spec.window
    if rows == 0 or rows % window:
        raise RequestError(
            422,
            "wrong_shape",
            f"{key} has {rows} rows; this model reads windows of {window} consecutive rows "
            f"(each block of {window} rows is one window): send a positive multiple of {window}",
            f"{key}.data" if key == "dataframe_split" else key,
        )
    with np.errstate(over="ignore"):
        flat = np.asarray(cells, dtype=np.float64).astype(np.float32)
    if nan_policy == "reject":
        bad = np.argwhere(~np.isfinite(flat))
        if len(bad):
            r, c = (int(v) for v in bad[0])
            what = non_finite_name(float(flat[r, c]))
            raise RequestError(
                422,
                "non_finite",
                f"{field_of(r, c)} (column {features[c]!r}) is {what} ({len(bad)} non-finite "
                "value(s)); this deployment rejects NaN and inf (deploy.nan_policy: reject)",
                field_of(r, c),
            )
    return flat.reshape(rows // window, window, spec.features)


def example_body(example: Any) -> dict[str, list] | None:
    """A ready request body from a version's logged input example: its first window.

    Parameters
    ----------
    example
        MLflow's ``serving_input_example.json`` (``{"inputs": [...]}``) or
        ``input_example.json`` (the array itself), as parsed JSON.

    Returns
    -------
    dict or None
        ``{"inputs": [window]}``, which ``/predict`` and ``/invocations`` both take; None
        when ``example`` holds no window (rows of numbers).
    """
    windows = example.get("inputs") if isinstance(example, dict) else example
    if not isinstance(windows, list) or not windows:
        return None
    first = windows[0]
    is_window = (
        isinstance(first, list)
        and bool(first)
        and all(isinstance(row, list) and row for row in first)
    )
    return {"inputs": [first]} if is_window else None


def write_example(home: Path, app: str, body: dict[str, Any]) -> Path:
    """Write ``body`` as ``<home>/serve/<app>/example.json`` (beside the app's state)."""
    path = Path(home) / "serve" / app / "example.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def curl_command(url: str, body_file: Path, token_env: str | None = None) -> str:
    """The curl line that posts ``body_file`` to ``url``'s ``/predict`` (with the token).

    ``url`` is the app's base URL; the token is read from ``$token_env`` by the shell, so
    the line never holds the secret.
    """
    auth = f' -H "Authorization: Bearer ${token_env}"' if token_env else ""
    return (
        f"curl -s -X POST {url.rstrip('/')}/predict -H 'Content-Type: application/json'"
        f"{auth} -d {shlex.quote(f'@{body_file}')}"
    )
