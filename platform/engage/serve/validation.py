"""Request checks of the serving app: body size, JSON, shape, dtype, NaN/inf.

Pure functions of bytes and the model's signature, so they are tested without Ray. Every
problem is a :class:`RequestError` carrying the HTTP status and one message that says what
is wrong and where (``field``), never a traceback.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_REQUEST_IDS_CHARS = 200
# Longer integers are refused while parsing: no model input needs them, and Python's int()
# refuses 4,300 digits with a ValueError anyway (a 500 if it got through).
MAX_INT_DIGITS = 100


class RequestError(Exception):
    """A 4xx answer: ``{"error": {"code", "message", "field"}}``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(status, code, message, field)
        self.status, self.code, self.message, self.field = status, code, message, field

    def body(self) -> dict[str, Any]:
        """The JSON error body: ``{"error": {"code", "message", "field"}}``."""
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


@dataclass(frozen=True)
class InputSpec:
    """What the model's signature accepts: float32 windows ``(-1, window, features)``."""

    window: int
    features: int
    dtype: str = "float32"

    @classmethod
    def from_signature(cls, inputs: Sequence[dict[str, Any]]) -> InputSpec:
        """From ``signature.inputs.to_dict()`` of an MLflow tensor signature."""
        spec = inputs[0]["tensor-spec"]
        shape = list(spec["shape"])
        if len(shape) != 3:
            raise ValueError(f"expected a (-1, window, features) tensor signature, got {shape}")
        return cls(int(shape[1]), int(shape[2]), str(spec["dtype"]))


@dataclass(frozen=True)
class PredictRequest:
    """A checked ``/predict`` body: float32 windows and one request id per window."""

    inputs: np.ndarray  # (n, window, features) float32
    request_ids: list[str]


def too_large(limit: int) -> RequestError:
    """The 413 for a body over ``limit`` bytes."""
    return RequestError(
        413, "body_too_large", f"request body is larger than the limit of {limit} bytes"
    )


def check_content_length(header: str | None, limit: int) -> None:
    """413 from the Content-Length header alone, before a byte of the body is read."""
    if header is None:
        return
    try:
        length = int(header)
    except ValueError:
        raise RequestError(
            400, "bad_content_length", f"Content-Length {header!r} is not a number"
        ) from None
    if length > limit:
        raise too_large(limit)


async def read_limited(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body, read chunk by chunk; stops with 413 as soon as it passes ``limit``."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def check_content_type(header: str | None) -> None:
    """415 unless the request says JSON (or says nothing)."""
    media = (header or "").split(";")[0].strip().lower()
    if media not in ("application/json", ""):
        raise RequestError(
            415, "unsupported_media_type", f"Content-Type {media!r}: send application/json"
        )


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``; hostile JSON (deep nesting, huge integers) is a 400 too.

    Raises
    ------
    RequestError
        400 ``malformed_json`` (not UTF-8, not JSON), ``too_deep`` (nesting deeper than the
        parser's recursion limit) or ``number_too_long`` (an integer of more than
        ``MAX_INT_DIGITS`` digits).
    """
    try:
        return json.loads(body, parse_int=_parse_int)
    except UnicodeDecodeError:
        raise RequestError(400, "malformed_json", "body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RequestError(
            400,
            "malformed_json",
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    except RecursionError:
        raise RequestError(
            400, "too_deep", "body nests JSON arrays or objects too deeply to parse"
        ) from None


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise RequestError(
            400,
            "number_too_long",
            f"body holds an integer of {len(text.lstrip('-')):,} digits; at most "
            f"{MAX_INT_DIGITS} are accepted",
        )
    return int(text)


def parse_predict(body: bytes, spec: InputSpec, nan_policy: str = "reject") -> PredictRequest:
    """``{"inputs": [[[...]]], "request_ids"?: [...]}`` checked against ``spec``."""
    payload = parse_json(body)
    if not isinstance(payload, dict):
        raise RequestError(422, "bad_request", 'expected a JSON object {"inputs": [...]}', None)
    unknown = sorted(set(payload) - {"inputs", "request_ids"})
    if unknown:
        raise RequestError(
            422,
            "unknown_field",
            f"unknown field(s) {', '.join(unknown)}; valid: inputs, request_ids",
            unknown[0],
        )
    if "inputs" not in payload:
        raise RequestError(422, "missing_field", 'missing "inputs": a list of windows', "inputs")
    x = to_array(payload["inputs"], spec)
    if b"true" in body or b"false" in body:
        # numpy turns JSON booleans into 1.0/0.0 silently; the walk finds and names them.
        locate_bad(payload["inputs"], spec)
    if nan_policy == "reject":
        check_finite(x)
    ids = request_ids(payload.get("request_ids"), len(x))
    return PredictRequest(x, ids)


def to_array(inputs: Any, spec: InputSpec, field: str = "inputs") -> np.ndarray:
    """A float32 array of shape (n, window, features), or 422 naming the first bad element.

    ``field`` is the body's name for ``inputs`` in messages (``instances`` on /invocations).
    """
    expected = f"(n, {spec.window}, {spec.features})"
    if not isinstance(inputs, list) or not inputs:
        raise RequestError(
            422,
            "wrong_shape",
            f"{field} must be a non-empty list of windows of shape {expected}",
            field,
        )
    try:
        raw = np.asarray(inputs)
    except ValueError:  # ragged nesting
        raw = None
    if raw is None or raw.dtype == object or raw.ndim != 3:
        locate_bad(inputs, spec, field)  # raises with the place of the first problem
        got = "ragged" if raw is None else str(raw.shape)
        raise RequestError(
            422, "wrong_shape", f"{field} have shape {got}; expected {expected}", field
        )
    if raw.dtype.kind not in "iuf":
        locate_bad(inputs, spec, field)
        raise RequestError(
            422, "wrong_dtype", f"{field} are {raw.dtype}; expected numbers ({spec.dtype})", field
        )
    if raw.shape[1:] != (spec.window, spec.features):
        raise RequestError(
            422,
            "wrong_shape",
            f"{field} have shape {tuple(raw.shape)}; expected {expected}",
            field,
        )
    with np.errstate(over="ignore"):
        return raw.astype(np.float32)


def locate_bad(inputs: list, spec: InputSpec, field: str = "inputs") -> None:
    """Walk the nesting and raise for the first wrong element (for the error path only).

    Also the way to find JSON booleans, which numpy turns into 1.0/0.0 without a word.

    Raises
    ------
    RequestError
        422 ``wrong_shape`` or ``wrong_dtype`` naming ``field[i][j][k]``; nothing when
        every element is a number in the right place.
    """
    dims = (spec.window, spec.features)
    for i, window in enumerate(inputs):
        where = f"{field}[{i}]"
        if not isinstance(window, list) or len(window) != dims[0]:
            got = f"{len(window)} rows" if isinstance(window, list) else type(window).__name__
            raise RequestError(
                422, "wrong_shape", f"{where} has {got}; expected {dims[0]} rows", where
            )
        for j, row in enumerate(window):
            at = f"{where}[{j}]"
            if not isinstance(row, list) or len(row) != dims[1]:
                got = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
                raise RequestError(
                    422, "wrong_shape", f"{at} has {got}; expected {dims[1]} values", at
                )
            for k, value in enumerate(row):
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise RequestError(
                        422,
                        "wrong_dtype",
                        f"{at}[{k}] is {json.dumps(value)[:40]} ({json_type(value)}); expected a number ({spec.dtype})",
                        f"{at}[{k}]",
                    )


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, ``boolean``, ``string``...)."""
    if value is None:
        return "null"
    return {bool: "boolean", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def check_finite(x: np.ndarray, field: str = "inputs") -> None:
    """422 naming the first NaN or infinity in ``x`` (``nan_policy: reject``)."""
    finite = np.isfinite(x)
    if finite.all():
        return
    bad = np.argwhere(~finite)
    if len(bad):
        i, j, k = (int(v) for v in bad[0])
        what = non_finite_name(float(x[i, j, k]))
        raise RequestError(
            422,
            "non_finite",
            f"{field}[{i}][{j}][{k}] is {what} ({len(bad)} non-finite value(s)); this deployment "
            "rejects NaN and inf (deploy.nan_policy: reject)",
            f"{field}[{i}][{j}][{k}]",
        )


def request_ids(given: Any, n: int) -> list[str]:
    """The caller's ids (to join delayed labels later), or fresh ones."""
    if given is None:
        return [uuid.uuid4().hex for _ in range(n)]
    if not isinstance(given, list) or len(given) != n:
        raise RequestError(
            422,
            "bad_request_ids",
            f"request_ids must be a list of {n} strings, one per window",
            "request_ids",
        )
    for i, value in enumerate(given):
        if not isinstance(value, str) or not 0 < len(value) <= MAX_REQUEST_IDS_CHARS:
            raise RequestError(
                422,
                "bad_request_ids",
                f"request_ids[{i}] must be a string of 1-{MAX_REQUEST_IDS_CHARS} characters",
                f"request_ids[{i}]",
            )
    return list(given)


def non_finite_name(value: float) -> str:
    """How a request body spells a non-finite number: NaN, Infinity or -Infinity."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"
