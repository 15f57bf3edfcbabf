"""Request checks of the serving app, without Ray: body limits, JSON, shape, dtype, NaN."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from engage.serve.validation import (
    InputSpec,
    RequestError,
    check_content_length,
    check_content_type,
    parse_predict,
    read_limited,
)

SPEC = InputSpec(window=3, features=2)
GOOD = [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]


def _parse(payload, nan_policy="reject"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return parse_predict(body, SPEC, nan_policy)


def _error(payload, nan_policy="reject") -> RequestError:
    with pytest.raises(RequestError) as caught:
        _parse(payload, nan_policy)
    return caught.value


def test_good_request_becomes_float32_windows_with_request_ids():
    req = _parse({"inputs": GOOD * 2, "request_ids": ["a", "b"]})

    assert req.inputs.dtype == np.float32
    assert req.inputs.shape == (2, 3, 2)
    assert req.request_ids == ["a", "b"]


def test_request_ids_are_generated_when_absent():
    req = _parse({"inputs": GOOD * 3})

    assert len(set(req.request_ids)) == 3


@pytest.mark.parametrize(
    ("payload", "status", "code", "field"),
    [
        (b"{not json", 400, "malformed_json", None),
        (b"\xff\xfe", 400, "malformed_json", None),
        ([1, 2], 422, "bad_request", None),
        ({"x": 1}, 422, "unknown_field", "x"),
        ({"request_ids": ["a"]}, 422, "missing_field", "inputs"),
        ({"inputs": []}, 422, "wrong_shape", "inputs"),
        ({"inputs": [[[1.0, 2.0]]]}, 422, "wrong_shape", "inputs"),
        ({"inputs": [[[1.0, 2.0], [3.0], [5.0, 6.0]]]}, 422, "wrong_shape", "inputs[0][1]"),
        ({"inputs": [[[1.0, 2.0, 9.0]] * 3]}, 422, "wrong_shape", "inputs"),
        ({"inputs": [[[1.0, "x"], [3.0, 4.0], [5.0, 6.0]]]}, 422, "wrong_dtype", "inputs[0][0][1]"),
        (
            {"inputs": [[[1.0, None], [3.0, 4.0], [5.0, 6.0]]]},
            422,
            "wrong_dtype",
            "inputs[0][0][1]",
        ),
        (
            {"inputs": [[[True, 1.0], [3.0, 4.0], [5.0, 6.0]]]},
            422,
            "wrong_dtype",
            "inputs[0][0][0]",
        ),
        ({"inputs": GOOD, "request_ids": ["a", "b"]}, 422, "bad_request_ids", "request_ids"),
        ({"inputs": GOOD, "request_ids": [7]}, 422, "bad_request_ids", "request_ids[0]"),
    ],
)
def test_bad_requests_say_what_and_where(payload, status, code, field):
    err = _error(payload)

    assert (err.status, err.code, err.field) == (status, code, field)
    assert err.message
    assert "Traceback" not in err.message
    assert err.body()["error"]["code"] == code


def test_nan_and_inf_are_rejected_by_default_and_located():
    nan = _error(b'{"inputs": [[[1.0, 2.0], [3.0, NaN], [5.0, 6.0]]]}')
    inf = _error(b'{"inputs": [[[1.0, 2.0], [3.0, 4.0], [-Infinity, 6.0]]]}')
    overflow = _error(b'{"inputs": [[[1.0, 2.0], [3.0, 4.0], [1e39, 6.0]]]}')

    assert (nan.status, nan.field) == (422, "inputs[0][1][1]")
    assert "NaN" in nan.message
    assert "nan_policy" in nan.message
    assert (inf.field, overflow.field) == ("inputs[0][2][0]", "inputs[0][2][0]")


def test_nan_policy_allow_passes_them_to_the_model():
    req = _parse(b'{"inputs": [[[1.0, 2.0], [3.0, NaN], [5.0, 6.0]]]}', "allow")

    assert np.isnan(req.inputs[0, 1, 1])


def test_content_length_over_the_limit_is_413_before_reading():
    with pytest.raises(RequestError) as caught:
        check_content_length(str(10 * 1024 * 1024), 1024 * 1024)

    assert caught.value.status == 413
    check_content_length("10", 1024)  # under the limit: no error
    check_content_length(None, 1024)  # chunked: checked while streaming


def test_streamed_body_stops_at_the_limit():
    read = []

    async def chunks():
        for _ in range(100):
            read.append(1)
            yield b"x" * 1000

    with pytest.raises(RequestError) as caught:
        asyncio.run(read_limited(chunks(), 4500))

    assert caught.value.status == 413
    assert len(read) == 5  # stopped at the chunk that crossed the limit


def test_content_type_must_be_json():
    check_content_type("application/json; charset=utf-8")
    with pytest.raises(RequestError) as caught:
        check_content_type("text/plain")

    assert caught.value.status == 415


def test_input_spec_from_mlflow_signature():
    inputs = [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 30, 5]}}]

    assert InputSpec.from_signature(inputs) == InputSpec(30, 5, "float32")


HOSTILE = [
    ("5,000-deep nesting", b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}", "too_deep"),
    ("5,000-deep object", b'{"a": ' * 5000 + b"1" + b"}" * 5000, "too_deep"),
    ("5,000-digit integer", b'{"inputs": [[[' + b"9" * 5000 + b", 1]]]}", "number_too_long"),
    (
        "5,000-digit request id",
        b'{"inputs": [[[1, 2], [3, 4], [5, 6]]], "request_ids": [' + b"9" * 5000 + b"]}",
        "number_too_long",
    ),
]


@pytest.mark.parametrize(("what", "body", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_json_is_a_400_not_a_crash(what, body, code):
    error = _error(body)

    assert (error.status, error.code) == (400, code)
    assert error.message


def test_long_floats_and_moderate_nesting_still_parse():
    digits = "1." + "3" * 400  # a long float is a float, not the integer-length limit
    body = f'{{"inputs": [[[{digits}, 2], [3, 4], [5, 6]]]}}'.encode()

    assert _parse(body).inputs.shape == (1, 3, 2)
    assert _error(b'{"inputs": ' + b"[" * 50 + b"]" * 50 + b"}").status == 422
