"""Patience with Serve's proxies on a busy machine.

Ray Serve waits a fixed 60 s (``HTTP_PROXY_TIMEOUT``, not configurable in Ray 2.60) for its
HTTP proxy actor, then raises ``TimeoutError("... not available after 60s.")`` from
``serve.start`` or ``serve.run``. The controller and the proxy actor keep starting after
that error: on a machine whose cores are taken by other work a proxy can need minutes.
So engage calls again, and the next call finds the controller already running, until the
proxy is up or engage's own budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from engage.errors import DeployError

T = TypeVar("T")

#: How long engage waits in all for Serve's proxies (a deploy stage has 600 s in all).
PROXY_BUDGET_S = 300.0


def is_proxy_timeout(exc: BaseException) -> bool:
    """True for Serve's "proxies not available" time-out, and for nothing else."""
    return isinstance(exc, TimeoutError) and "proxies not available" in str(exc).lower()


def until_proxies_ready(
    call: Callable[[], T],
    *,
    budget_s: float = PROXY_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
    on_retry: Callable[[float], None] = lambda waited: None,
) -> T:
    """``call()``, called again after each Serve proxy time-out until ``budget_s`` is spent.

    Parameters
    ----------
    call : callable
        ``serve.start`` or ``serve.run`` with its arguments bound.
    budget_s : float
        Seconds from the first call after which a proxy time-out is final.
    clock : callable
        Monotonic seconds (tests pass a fake one).
    on_retry : callable
        Told the seconds waited so far before each further call (the CLI says so).

    Raises
    ------
    DeployError
        The proxies were still not ready when the budget ran out.
    """
    started = clock()
    while True:
        try:
            return call()
        except TimeoutError as exc:
            waited = clock() - started
            if not is_proxy_timeout(exc):
                raise
            if waited >= budget_s:
                raise DeployError(
                    f"Ray Serve's HTTP proxy was not ready after {waited:.0f} s",
                    hint="the machine is too busy for Serve to start its proxy: deploy again "
                    "when the load is lower (`engage deploy MODEL@ALIAS`); the registered "
                    "model is unaffected",
                ) from None
            on_retry(waited)
