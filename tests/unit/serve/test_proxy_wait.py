"""Serve's fixed 60 s proxy time-out is retried within engage's budget, and only it."""

from __future__ import annotations

import pytest

from engage.errors import DeployError
from engage.serve.proxy_wait import is_proxy_restart, is_proxy_timeout, until_proxies_ready

PROXY_TIMEOUT = TimeoutError("HTTP proxies not available after 60s.")


class _Clock:
    """Each reading is 60 s after the last, like a call that waited out Serve's time-out."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 60.0
        return self.now


def _failing(times: int, error: BaseException):
    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "client"

    return call, calls


def test_a_proxy_that_comes_up_late_is_waited_for() -> None:
    call, calls = _failing(2, PROXY_TIMEOUT)
    waited = []

    assert until_proxies_ready(call, budget_s=300, clock=_Clock(), on_retry=waited.append) == (
        "client"
    )
    assert len(calls) == 3
    assert waited == [60.0, 120.0]


def test_the_budget_ends_the_wait_with_a_deploy_error() -> None:
    call, calls = _failing(100, PROXY_TIMEOUT)

    with pytest.raises(DeployError) as caught:
        until_proxies_ready(call, budget_s=200, clock=_Clock())

    assert "proxy was not ready after 240 s" in str(caught.value)
    assert caught.value.exit_code == 11
    assert len(calls) == 4  # the calls at 60, 120, 180 s were retried; 240 s is past 200


@pytest.mark.parametrize("error", [TimeoutError("GCS did not answer"), ValueError("bad")])
def test_other_errors_are_not_retried(error: BaseException) -> None:
    call, calls = _failing(1, error)

    with pytest.raises(type(error)):
        until_proxies_ready(call, clock=_Clock())
    assert len(calls) == 1


def test_both_of_serves_messages_are_recognised() -> None:
    assert is_proxy_timeout(TimeoutError("Proxies not available after 60s."))
    assert is_proxy_timeout(PROXY_TIMEOUT)
    assert not is_proxy_timeout(RuntimeError("HTTP proxies not available after 60s."))


def _actor_died(class_name: str, name: str) -> BaseException:
    """Ray's ActorDiedError as a driver gets it for an actor Serve's controller killed."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError

    return ActorDiedError(
        ActorDiedErrorContext(
            class_name=class_name, actor_id=bytes(16), name=name, ray_namespace="serve",
            error_message="The actor is dead because it was killed by `ray.kill`.",
            never_started=True,
        )
    )  # fmt: skip


# Beside two CPU hogs the proxy did not answer Serve's 5 s readiness check three times in
# a row; the controller killed it and started another, and `serve.start` in the deploy
# stage failed with this error (exit 11 after 707.5 s in docs/BENCHMARKS.md).
PROXY_KILLED = _actor_died("HAProxyManager", "SERVE_PROXY_ACTOR-73b1efc46943cf4a9a6aa75b62")


def test_a_proxy_the_controller_restarted_is_waited_for() -> None:
    call, calls = _failing(2, PROXY_KILLED)

    paused = []

    assert until_proxies_ready(call, budget_s=300, clock=_Clock(), sleep=paused.append) == (
        "client"
    )
    assert len(calls) == 3
    assert len(paused) == 2


def test_a_restarted_proxy_is_waited_for_only_within_the_budget() -> None:
    call, _ = _failing(100, PROXY_KILLED)

    with pytest.raises(DeployError) as caught:
        until_proxies_ready(call, budget_s=200, clock=_Clock(), sleep=lambda s: None)
    assert caught.value.exit_code == 11


def test_another_actor_s_death_is_not_retried() -> None:
    error = _actor_died("ServeReplica:app:Ingress", "SERVE_REPLICA::app#Ingress#abc")
    call, calls = _failing(1, error)

    with pytest.raises(type(error)):
        until_proxies_ready(call, clock=_Clock())
    assert len(calls) == 1
    assert not is_proxy_restart(error)
    assert is_proxy_restart(PROXY_KILLED)
