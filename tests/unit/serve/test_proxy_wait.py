"""Serve's fixed 60 s proxy time-out is retried within engage's budget, and only it."""

from __future__ import annotations

import pytest

from engage.errors import DeployError
from engage.serve.proxy_wait import is_proxy_timeout, until_proxies_ready

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
