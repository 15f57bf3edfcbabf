"""Canary routing: deterministic per request id, shares follow the weights."""

from __future__ import annotations

from engage.serve.model import ModelTarget
from engage.serve.routes import Route, RouteTable


def _route(version: str, weight: float) -> Route:
    target = ModelTarget(
        "m", version, "file:///x", None, "sqlite://", {}, ("a", "b"), "classification"
    )
    return Route(target, weight, "primary")


def test_same_request_id_same_version():
    table = RouteTable(1, (_route("1", 0.5), _route("2", 0.5)))

    assert all(table.pick(f"id-{i}") == table.pick(f"id-{i}") for i in range(100))


def test_shares_follow_weights():
    table = RouteTable(1, (_route("1", 0.9), _route("2", 0.1)))

    picks = [table.pick(f"req-{i}").target.version for i in range(5000)]

    assert 0.07 < picks.count("2") / len(picks) < 0.13


def test_single_route_takes_everything():
    table = RouteTable(1, (_route("1", 1.0),))

    assert {table.pick(str(i)).target.version for i in range(50)} == {"1"}
