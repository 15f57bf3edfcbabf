"""The Ray session a pipeline runs in: an embedded local cluster or an existing one."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engage import env_vars
from engage.errors import ClusterError

_CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SessionInfo:
    """What the runner reports about the cluster it got."""

    address: str | None  # None: an embedded local cluster
    resources: dict[str, float]
    startup_seconds: float
    dashboard_url: str | None


def resolve_address(flag: str | None) -> str | None:
    """The cluster address: --address flag > RAY_ADDRESS > embedded (None)."""
    return flag or env_vars.RAY_ADDRESS.get()


def preflight(address: str | None) -> None:
    """Fail before any work when an explicit cluster address does not answer."""
    if address:
        _check_reachable(address)


def _check_reachable(address: str) -> None:
    """Fail fast on a host:port nobody listens on, before Ray's long retry loop."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterError(
            f"cluster address {address!r} is not host:port",
            hint="use the address `ray start --head` printed, e.g. 127.0.0.1:6379, or 'auto'",
        )
    try:
        with socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ClusterError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc})",
            hint="start one with `ray start --head --port=PORT`, or drop --address / RAY_ADDRESS "
            "to run on an embedded local cluster",
        ) from None


def auth_hint() -> str:
    """What to check when joining a Ray cluster failed: its token auth, then its health."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return (
            "Ray 2.60 clusters use token authentication: export RAY_AUTH_MODE=token and the "
            "cluster's token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) before connecting"
        )
    return "check that the token matches the cluster's and that the head node is healthy"


@contextmanager
def ray_session(
    address: str | None = None, *, num_cpus: int | None = None, verbose: bool = False
) -> Iterator[SessionInfo]:
    """Connect to ``address`` (or start a local cluster) for the duration of the block.

    A session that was already initialised (tests share one) is reused and left running.
    """
    import ray

    if ray.is_initialized():
        yield SessionInfo(None, dict(ray.cluster_resources()), 0.0, None)
        return
    log_to_driver = verbose or env_vars.ENGAGE_RAY_LOGS.get() == "1"
    started = time.perf_counter()
    if address:
        _check_reachable(address)
        init_kwargs = {"address": address}
    else:
        init_kwargs = {"address": "local", "num_cpus": num_cpus, "include_dashboard": True}
    try:
        ctx = ray.init(
            **init_kwargs,
            log_to_driver=log_to_driver,
            logging_level="WARNING",
            configure_logging=True,
        )
    except (ConnectionError, TimeoutError, RuntimeError) as exc:
        raise ClusterError(
            f"could not join the Ray cluster at {address}: {exc}", hint=auth_hint()
        ) from None
    try:
        url = getattr(ctx, "dashboard_url", None)
        yield SessionInfo(
            address,
            dict(ray.cluster_resources()),
            time.perf_counter() - started,
            f"http://{url}" if url else None,
        )
    finally:
        ray.shutdown()
