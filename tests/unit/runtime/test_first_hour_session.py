"""Ray start-up in ``ray_session``: every failure is a ClusterError, the embedded cluster on loopback.

``ray.init`` is replaced by a recorder that raises, so no Ray cluster starts (issue 13
item 3: Ray's bare ``Exception("The current node timed out during startup")`` ended in
exit 70 with a traceback; issue 11: the embedded cluster's listeners on loopback).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import ray

from engage.errors import ClusterError
from engage.runtime import session

TIMED_OUT = "The current node timed out during startup. This could happen because ..."


@pytest.fixture
def init_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``ray.init`` recording its keyword arguments, then failing as Ray does under load."""
    calls: list[dict[str, Any]] = []

    def fake_init(**kwargs: Any) -> Any:
        calls.append({**kwargs, "_env": os.environ.get(session.LOOPBACK_ENV_VAR)})
        raise Exception(TIMED_OUT)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    monkeypatch.delenv(session.LOOPBACK_ENV_VAR, raising=False)
    return calls


def test_a_bare_ray_start_up_exception_is_a_cluster_error(init_calls) -> None:
    with pytest.raises(ClusterError) as caught, session.ray_session(None, num_cpus=1):
        pass

    error = caught.value
    assert error.exit_code == 4
    assert "could not start a local Ray cluster" in error.message
    assert "timed out during startup" in error.message
    assert "busy" in (error.hint or "")
    assert init_calls[-1] == {"shutdown": True}  # whatever half-started is stopped


def test_joining_an_address_that_fails_with_a_bare_exception_is_a_cluster_error(
    init_calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "_check_reachable", lambda address: None)

    with pytest.raises(ClusterError) as caught, session.ray_session("10.0.0.1:6379"):
        pass

    assert "could not join the Ray cluster at 10.0.0.1:6379" in caught.value.message

    assert "_node_ip_address" not in init_calls[0]  # a real cluster keeps its own node IP


def test_an_interrupt_during_start_up_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(**kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", interrupted)
    monkeypatch.setattr(ray, "shutdown", lambda: None)

    with pytest.raises(KeyboardInterrupt), session.ray_session(None):
        pass


def test_the_embedded_cluster_binds_to_loopback(init_calls) -> None:
    with pytest.raises(ClusterError), session.ray_session(None, num_cpus=1):
        pass

    kwargs = init_calls[0]
    assert kwargs["address"] == "local"
    assert kwargs["_node_ip_address"] == "127.0.0.1"
    assert kwargs["dashboard_host"] == "127.0.0.1"
    # Ray 2.60 turns 127.0.0.1 into the machine's IP unless multi-node clusters are off
    # for the processes it starts: the variable is set while ray.init runs ...
    assert kwargs["_env"] == "0"
    # ... and the process's own setting is back once the session ended.
    assert os.environ.get(session.LOOPBACK_ENV_VAR) is None


@pytest.mark.parametrize(("value", "dashboard"), [(None, True), ("1", True), ("0", False)])
def test_the_embedded_cluster_runs_ray_s_dashboard_unless_told_not_to(
    init_calls, monkeypatch: pytest.MonkeyPatch, value: str | None, dashboard: bool
) -> None:
    if value is None:
        monkeypatch.delenv("ENGAGE_RAY_DASHBOARD", raising=False)
    else:
        monkeypatch.setenv("ENGAGE_RAY_DASHBOARD", value)

    with pytest.raises(ClusterError), session.ray_session(None, num_cpus=1):
        pass

    assert init_calls[0]["include_dashboard"] is dashboard
