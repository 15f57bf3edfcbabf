"""A replica's request path without Ray: the answer, routing, the hooks' queue, the shim."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from engage.serve.app import _answer, _Served, _Version
from engage.serve.haproxy_shim import loopback
from engage.serve.hooks import HookSettings, ServingHooks
from engage.serve.model import ModelTarget
from engage.serve.routes import Route, RouteTable
from engage.serve.sampling import read_samples

SIGNATURE = {
    "inputs": [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 4, 3]}}],
    "outputs": [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 2]}}],
}


def _target(version: str = "1", classes=("away", "home")) -> ModelTarget:
    task = "classification" if classes else "regression"
    return ModelTarget("m", version, "file:///x", None, "sqlite://", SIGNATURE, classes, task)


def test_answer_gives_labels_and_probabilities():
    out = np.array([[0.0, 2.0], [3.0, -1.0]], dtype=np.float32)

    labels, extra = _answer(_target(), out)

    assert labels == ["home", "away"]
    assert extra["classes"] == ["away", "home"]
    assert np.allclose(np.sum(extra["probabilities"], axis=1), 1.0, atol=1e-5)
    json.dumps(extra)  # plain floats


def test_answer_turns_non_finite_rows_into_nulls():
    out = np.array([[np.nan, 1.0], [0.0, 1.0]], dtype=np.float32)

    labels, extra = _answer(_target(), out)

    assert labels == [None, "home"]
    assert extra["probabilities"][0] == [None, None]
    assert extra["probabilities"][1][1] == pytest.approx(0.731059, abs=1e-6)


def test_regression_answers_values():
    labels, extra = _answer(_target(classes=None), np.array([[1.5], [np.inf]], dtype=np.float32))

    assert (labels, extra) == ([1.5, None], {})


def test_a_canary_split_picks_by_the_first_request_id_every_time():
    v1, v2 = _Version(_target("1"), None), _Version(_target("2"), None)
    table = RouteTable(3, (Route(v1.target, 0.5, "primary"), Route(v2.target, 0.5, "canary")))
    served = _Served(table, (v1, v2))

    def pick(rid: str) -> str:
        body = json.dumps({"inputs": [], "request_ids": [rid]}).encode()
        return served.pick(body).target.version

    first = {f"u{i}": pick(f"u{i}") for i in range(40)}

    assert set(first.values()) == {"1", "2"}
    assert {rid: pick(rid) for rid in first} == first
    assert first == {rid: table.pick(rid).target.version for rid in first}


def test_the_hooks_report_queued_requests_through_the_one_path(tmp_path):
    settings = HookSettings("app", str(tmp_path), None, "run-1", 1.0, 100, ("sqlite",), 30.0)
    hooks = ServingHooks(settings, "r1")
    target = _target()
    x = np.ones((2, 4, 3), dtype=np.float32)
    out = np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    try:
        started = time.perf_counter()
        hooks.batched(2)
        hooks.request("/predict", 200, 0.002)
        hooks.predicted(target, ["a", "b"], x, out, ["home", "away"])
        hooks.request("/predict", 422, 0.001)
        on_path = time.perf_counter() - started
        hooks.drain()
        value = hooks.registry.get_sample_value
        labels = {"job": "app", "run_id": "run-1", "replica": "r1"}

        assert on_path < 0.01  # queued, not reported, on the request path
        assert value("engage_requests_total", {**labels, "route": "/predict", "status": "200"}) == 1
        assert value("engage_requests_total", {**labels, "route": "/predict", "status": "422"}) == 1
        assert value("engage_predictions_total", {**labels, "version": "1", "class": "home"}) == 1
        assert value("engage_batch_size_sum", labels) == 2
        assert value("engage_batch_size_count", labels) == 1
    finally:
        hooks.close()
    rows = read_samples(tmp_path / "serve" / "app" / "samples.sqlite")
    assert {r["request_id"] for r in rows} == {"a", "b"}


def test_the_shim_moves_only_the_side_listeners_to_loopback():
    config = """frontend prometheus
    bind :9101
frontend http_frontend
    bind *:8000
listen stats
  bind *:8404
"""

    out = loopback(config, ["9101", "8404"])

    assert "bind 127.0.0.1:9101" in out
    assert "bind 127.0.0.1:8404" in out
    assert "bind *:8000" in out  # the HTTP entry binds where the deploy asked
