"""Patience with Serve's proxies on a busy machine.

Ray Serve waits a fixed 60 s (``HTTP_PROXY_TIMEOUT``, not configurable in Ray 2.60) for its
HTTP proxy actor, then raises ``TimeoutError("... not available after 60s.")`` from
``serve.start`` or ``serve.run``. The controller and the proxy actor keep starting after
that error: on a machine whose cores are taken by other work a proxy can need minutes.
So engage calls again, and the next call finds the controller already running, until the
proxy is up or engage's own budget is spent.

The controller also kills a proxy that does not answer its readiness check in time, and
starts another; the call waiting on the killed one gets Ray's ``ActorDiedError`` naming
the proxy actor. That is waited out the same way (the managed head gives proxies longer:
engage.serve.cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from engage.errors import DeployError

T = TypeVar("T")

#: How long engage waits in all for Serve's proxies (a deploy stage has 600 s in all).
PROXY_BUDGET_S = 300.0
_RESTART_PAUSE_S = 1.0


def is_proxy_timeout(exc: BaseException) -> bool:
    """True for Serve's "proxies not available" time-out, and for nothing else."""
    return isinstance(exc, TimeoutError) and "proxies not available" in str(exc).lower()


def is_proxy_restart(exc: BaseException) -> bool:
    """True when ``exc`` is Ray's ``ActorDiedError`` for one of Serve's proxy actors.

    Serve's controller kills a proxy that fails its readiness or health checks and starts a
    new one, so a caller waiting on the old one may call again. Other actors' deaths (a
    replica, the controller) are not a reason to wait.
    """
    died = any(c.__name__ == "ActorDiedError" for c in type(exc).__mro__)  # no Ray import
    return died and "SERVE_PROXY_ACTOR" in str(exc)


def until_proxies_ready(
    call: Callable[[], T],
    *,
    budget_s: float = PROXY_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
    on_retry: Callable[[float], None] = lambda waited: None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, called again after each Serve proxy time-out or proxy restart until
    ``budget_s`` is spent.

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
    sleep : callable
        Pauses before calling again after a proxy restart (tests pass a no-op).

    Raises
    ------
    DeployError
        The proxies were still not ready when the budget ran out (any other error of
        ``call`` is raised as it is).
    """
    started = clock()
    while True:
        try:
            return call()
        except Exception as exc:
            waited = clock() - started
            if not (is_proxy_timeout(exc) or is_proxy_restart(exc)):
                raise
            if waited >= budget_s:
                raise DeployError(
                    f"Ray Serve's HTTP proxy was not ready after {waited:.0f} s",
                    hint="the machine is too busy for Serve to start its proxy: deploy again "
                    "when the load is lower (`engage deploy MODEL@ALIAS`); the registered "
                    "model is unaffected",
                ) from None
            on_retry(waited)
            if is_proxy_restart(exc):  # the new proxy needs a moment to be created
                sleep(_RESTART_PAUSE_S)
