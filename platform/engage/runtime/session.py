"""The Ray session a pipeline runs in: an embedded local cluster or an existing one."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engage import env_vars
from engage.errors import ClusterError

_CONNECT_TIMEOUT_S = 5.0
LOOPBACK = "127.0.0.1"
LOOPBACK_ENV_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # see loopback_nodes


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
    The embedded local cluster listens on loopback only (:func:`loopback_nodes`).

    Raises
    ------
    ClusterError
        The cluster did not answer, refused the driver, or (embedded) did not start.
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
        init_kwargs = {
            "address": "local",
            "num_cpus": num_cpus,
            "include_dashboard": env_vars.ray_dashboard(),
            "dashboard_host": LOOPBACK,
            "_node_ip_address": LOOPBACK,
        }
    with loopback_nodes(enabled=not address):
        ctx = _init(ray, address, init_kwargs, log_to_driver)
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


def _init(ray: Any, address: str | None, init_kwargs: dict[str, Any], log_to_driver: bool) -> Any:
    """``ray.init``, with every start-up failure turned into a ClusterError (exit 4).

    Ray raises ConnectionError, TimeoutError, RuntimeError, and under load a bare
    ``Exception("The current node timed out during startup")``: all of them are the
    cluster's fault, never engage's. An interrupt is not caught.
    """
    try:
        return ray.init(
            **init_kwargs,
            log_to_driver=log_to_driver,
            logging_level="WARNING",
            configure_logging=True,
        )
    except Exception as exc:
        # A half-started embedded node (GCS up, raylet timed out) would outlive the command.
        with contextlib.suppress(Exception):
            ray.shutdown()
        if address:
            raise ClusterError(
                f"could not join the Ray cluster at {address}: {exc}", hint=auth_hint()
            ) from None
        raise ClusterError(
            f"could not start a local Ray cluster: {exc}", hint=_START_HINT
        ) from None


_START_HINT = (
    "Ray's processes did not come up in time, most often because the machine is busy: "
    "run again when the load is lower, or start a cluster yourself with "
    "`ray start --head --node-ip-address=127.0.0.1` and pass --address 127.0.0.1:6379"
)


@contextmanager
def loopback_nodes(enabled: bool = True) -> Iterator[None]:
    """Ray nodes started inside the block keep 127.0.0.1 as their IP, so they bind loopback.

    Ray 2.60 turns ``_node_ip_address="127.0.0.1"`` into the machine's reachable IP unless
    multi-node clusters are off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read by Ray at
    import and by every process it starts). The embedded cluster is one node by design
    (a cluster of several nodes is joined with --address), so it turns them off while it
    runs; the process's own setting comes back afterwards, so a later --address session
    in the same process reports its real IP.
    """
    if not enabled:
        yield
        return
    from ray._private import ray_constants

    before_env = os.environ.get(LOOPBACK_ENV_VAR)
    before_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(LOOPBACK_ENV_VAR, None)
        else:
            os.environ[LOOPBACK_ENV_VAR] = before_env
