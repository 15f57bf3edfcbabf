"""``/invocations`` takes MLflow's scoring-server bodies; ``engage deploy``'s example body.

A client of ``mlflow models serve`` sends ``dataframe_split``, ``dataframe_records``,
``instances`` or ``inputs``; each becomes the same float32 windows ``/predict`` feeds the
model, and every bad body is one 4xx naming the field, as on ``/predict``. No Ray here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engage.serve.app import _answer, _Version
from engage.serve.model import ModelTarget
from engage.serve.scoring import curl_command, example_body, parse_invocation, write_example
from engage.serve.validation import InputSpec, RequestError, parse_predict

SPEC = InputSpec(window=2, features=3)
FEATURES = ("temperature", "co2", "motion")
# Two windows of two rows each, the model's feature order.
ROWS = [[20.0, 600.0, 1.0], [21.0, 610.0, 0.0], [22.0, 620.0, 1.0], [23.0, 630.0, 0.0]]
WINDOWS = np.array(ROWS, dtype=np.float32).reshape(2, 2, 3)
SIGNATURE = {
    "inputs": [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 2, 3]}}],
    "outputs": [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 2]}}],
}


def _parse(payload, features=FEATURES, nan_policy="reject"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return parse_invocation(body, SPEC, features, nan_policy)


def _error(payload, features=FEATURES, nan_policy="reject") -> RequestError:
    with pytest.raises(RequestError) as caught:
        _parse(payload, features, nan_policy)
    return caught.value


def _split(columns=FEATURES, rows=ROWS, **extra):
    return {"dataframe_split": {"columns": list(columns), "data": rows, **extra}}


def _records(rows=ROWS, columns=FEATURES):
    return {"dataframe_records": [dict(zip(columns, r, strict=True)) for r in rows]}


def test_dataframe_split_rows_become_windows_of_consecutive_rows():
    req = _parse(_split())

    assert req.inputs.dtype == np.float32
    assert np.array_equal(req.inputs, WINDOWS)
    assert len(req.request_ids) == 2


def test_columns_map_to_the_model_features_by_name_and_extra_columns_are_ignored():
    columns = ["motion", "timestamp", "co2", "temperature"]
    rows = [[r[2], 1.7e9, r[1], r[0]] for r in ROWS]

    split = _parse(_split(columns, rows, index=[0, 1, 2, 3]))
    records = _parse(_records(rows, columns))

    assert np.array_equal(split.inputs, WINDOWS)
    assert np.array_equal(records.inputs, WINDOWS)


def test_dataframe_records_equal_dataframe_split():
    assert np.array_equal(_parse(_records()).inputs, WINDOWS)


@pytest.mark.parametrize("key", ["inputs", "instances"])
def test_tensor_forms_are_the_windows_themselves(key):
    req = _parse({key: WINDOWS.tolist(), "request_ids": ["a", "b"]})

    assert np.array_equal(req.inputs, WINDOWS)
    assert req.request_ids == ["a", "b"]


def test_mlflow_params_are_accepted_and_ignored_like_mlflow_does_without_a_params_schema():
    assert np.array_equal(_parse({**_split(), "params": {"temperature": 0.1}}).inputs, WINDOWS)


def test_the_same_windows_give_the_same_model_input_as_predict():
    predict = parse_predict(json.dumps({"inputs": WINDOWS.tolist()}).encode(), SPEC)

    assert np.array_equal(_parse(_split()).inputs, predict.inputs)


@pytest.mark.parametrize(
    ("payload", "status", "code", "field"),
    [
        (b"{not json", 400, "malformed_json", None),
        ([1, 2], 422, "bad_request", None),
        ({"rows": ROWS}, 422, "unknown_field", "rows"),
        ({"params": {}}, 422, "missing_field", None),
        ({**_split(), "inputs": WINDOWS.tolist()}, 422, "conflicting_fields", "inputs"),
        ({"dataframe_split": ROWS}, 422, "bad_request", "dataframe_split"),
        (_split(bogus=1), 422, "unknown_field", "dataframe_split.bogus"),
        ({"dataframe_split": {"data": ROWS}}, 422, "missing_field", "dataframe_split.columns"),
        ({"dataframe_split": {"columns": list(FEATURES)}}, 422, "missing_field", "dataframe_split.data"),
        (_split(FEATURES[:2], [r[:2] for r in ROWS]), 422, "missing_column", "dataframe_split.columns"),
        (_split(("co2", "co2", "motion")), 422, "duplicate_column", "dataframe_split.columns"),
        (_split(rows=ROWS[:3]), 422, "wrong_shape", "dataframe_split.data"),
        (_split(rows=[]), 422, "wrong_shape", "dataframe_split.data"),
        (_split(rows=[*ROWS[:3], [1.0, 2.0]]), 422, "wrong_shape", "dataframe_split.data[3]"),
        (_split(rows=[*ROWS[:3], [1.0, "x", 2.0]]), 422, "wrong_dtype", "dataframe_split.data[3][1]"),
        (_split(rows=[*ROWS[:3], [1.0, True, 2.0]]), 422, "wrong_dtype", "dataframe_split.data[3][1]"),
        (_split(rows=[*ROWS[:3], [1.0, None, 2.0]]), 422, "wrong_dtype", "dataframe_split.data[3][1]"),
        ({"dataframe_records": {"co2": 1}}, 422, "bad_request", "dataframe_records"),
        ({"dataframe_records": [*_records()["dataframe_records"][:3], 7]}, 422, "bad_request", "dataframe_records[3]"),
        ({"dataframe_records": [{"co2": 1.0, "motion": 0.0}] * 2}, 422, "missing_column", "dataframe_records[0].temperature"),
        ({"dataframe_records": [*_records()["dataframe_records"][:3], {**dict(zip(FEATURES, ROWS[0], strict=True)), "co2": "high"}]}, 422, "wrong_dtype", "dataframe_records[3].co2"),
        ({"inputs": [[[1.0, 2.0, 3.0]]]}, 422, "wrong_shape", "inputs"),
        ({"instances": [[[1.0, 2.0, 3.0], [1.0, "x", 3.0]]]}, 422, "wrong_dtype", "instances[0][1][1]"),
        ({"inputs": {"x": WINDOWS.tolist()}}, 422, "wrong_shape", "inputs"),
        ({**_split(), "params": [1]}, 422, "bad_request", "params"),
        ({**_split(), "request_ids": ["a"]}, 422, "bad_request_ids", "request_ids"),
    ],
)  # fmt: skip
def test_bad_bodies_get_one_4xx_naming_the_field(payload, status, code, field):
    err = _error(payload)

    assert (err.status, err.code, err.field) == (status, code, field)
    assert err.message
    assert err.body()["error"]["code"] == code


def test_nan_is_rejected_by_default_with_its_row_and_column():
    body = json.dumps(_split(rows=[*ROWS[:3], [1.0, float("nan"), 2.0]])).encode()

    err = _error(body)
    allowed = _parse(body, nan_policy="allow")

    assert (err.status, err.code, err.field) == (422, "non_finite", "dataframe_split.data[3][1]")
    assert "co2" in err.message
    assert "nan_policy" in err.message
    assert np.isnan(allowed.inputs[1, 1, 1])


def test_nan_in_a_tensor_form_names_that_form():
    body = b'{"instances": [[[1, 2, 3], [1, NaN, 3]]]}'

    assert _error(body).field == "instances[0][1][1]"


def test_dataframe_forms_need_the_models_feature_names():
    err = _error(_split(), features=None)

    assert (err.status, err.code, err.field) == (422, "unsupported_format", "dataframe_split")
    assert "inputs" in err.message  # says which form still works
    assert np.array_equal(_parse({"inputs": WINDOWS.tolist()}, features=None).inputs, WINDOWS)


def _target(features=FEATURES) -> ModelTarget:
    classes = ("0", "1")
    return ModelTarget(
        "m", "1", "file:///x", None, "sqlite://", SIGNATURE, classes, "classification", features
    )


def test_a_replica_parses_each_route_in_its_own_format():
    version = _Version(_target(), None)
    split = json.dumps(_split()).encode()

    assert np.array_equal(version.parse("/invocations", split, "reject").inputs, WINDOWS)
    with pytest.raises(RequestError) as caught:
        version.parse("/predict", split, "reject")  # /predict keeps its one format
    assert caught.value.field == "dataframe_split"


def test_a_classifier_answers_string_labels_as_the_readme_shows():
    target = _target()

    labels, _ = _answer(target, np.array([[0.1, 2.0]], dtype=np.float32))

    assert labels == ["1"]
    assert target.metadata()["features"] == list(FEATURES)


def test_example_body_is_the_first_logged_window_in_the_inputs_form():
    serving_example = {"inputs": WINDOWS.tolist()}  # MLflow's serving_input_example.json

    body = example_body(serving_example)
    plain = example_body(WINDOWS.tolist())  # MLflow's input_example.json: the array itself

    assert body == plain == {"inputs": [WINDOWS[0].tolist()]}
    assert np.array_equal(parse_predict(json.dumps(body).encode(), SPEC).inputs, WINDOWS[:1])
    assert np.array_equal(_parse(body).inputs, WINDOWS[:1])  # /invocations takes it too


@pytest.mark.parametrize("example", [None, {}, {"dataframe_split": {}}, [], [[1.0, 2.0]], "x"])
def test_example_body_is_none_without_a_window_to_show(example):
    assert example_body(example) is None


def test_write_example_puts_it_in_the_apps_serve_dir(tmp_path):
    path = write_example(tmp_path, "my-app", {"inputs": [WINDOWS[0].tolist()]})

    assert path == tmp_path / "serve" / "my-app" / "example.json"
    assert json.loads(path.read_text()) == {"inputs": [WINDOWS[0].tolist()]}


def test_the_curl_line_posts_the_file_and_reads_the_token_from_the_shell():
    plain = curl_command("http://127.0.0.1:8000/", Path(".engage/serve/a/example.json"))
    token = curl_command("http://h:8000/x", Path("/tmp/my dir/example.json"), "ENGAGE_SERVE_TOKEN")

    assert plain == (
        "curl -s -X POST http://127.0.0.1:8000/predict -H 'Content-Type: application/json' "
        "-d @.engage/serve/a/example.json"
    )
    assert '-H "Authorization: Bearer $ENGAGE_SERVE_TOKEN"' in token
    assert token.endswith("-d '@/tmp/my dir/example.json'")


def test_engage_deploy_writes_the_example_and_prints_its_curl_line(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from engage.cli import serve as cli_serve
    from engage.serve import model

    asked = []
    monkeypatch.setattr(
        model, "logged_example", lambda *a: asked.append(a) or {"inputs": WINDOWS.tolist()}
    )
    result = SimpleNamespace(
        model="m", version="3", app="m-app", url="http://127.0.0.1:8000", token_env=None
    )

    cli_serve._print_example(result, tmp_path, "sqlite:///db")

    path = tmp_path / "serve" / "m-app" / "example.json"
    printed = capsys.readouterr().out
    assert asked == [("sqlite:///db", "m", "3")]
    assert json.loads(path.read_text()) == {"inputs": [WINDOWS[0].tolist()]}
    assert f"request body: {path}" in printed
    assert f"-d @{path}" in printed


def test_engage_deploy_without_a_logged_example_points_to_metadata(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from engage.cli import serve as cli_serve
    from engage.serve import model

    monkeypatch.setattr(model, "logged_example", lambda *a: None)
    result = SimpleNamespace(model="m", version="3", app="a", url="http://h:1", token_env=None)

    cli_serve._print_example(result, tmp_path, "sqlite:///db")

    assert "http://h:1/metadata" in capsys.readouterr().out
    assert not (tmp_path / "serve").exists()
