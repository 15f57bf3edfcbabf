"""Whether the port a model is to be served on is free, checked before anything starts.

Serve binds its HTTP port only once its head is up, so a port another server holds used to
fail late (after training, or after the serving head started) with HAProxy's traceback.
Here the port is tested by binding it; a port this home's own serving head already holds
is not busy, since a redeploy reuses the listener Serve has.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
from pathlib import Path

from engage.errors import DeployError
from engage.serve import cluster


def check_serving_port(home: Path, host: str, port: int, hint: str) -> None:
    """Fail before anything starts when another process listens on the serving port.

    Serve binds ``host:port`` only once its head is up; a port someone else holds then
    fails late (after the head started, with HAProxy's traceback). The port is tested by
    binding it here. A port held by the serving head of ``home`` itself is not busy: a
    redeploy reuses the listener Serve already has.

    Parameters
    ----------
    home:
        The engage home whose managed serving head may already hold the port.
    host, port:
        Where Serve is asked to listen.
    hint:
        What the user can do instead (the command's own flag, e.g. ``--port N``).

    Raises
    ------
    DeployError
        The port is in use by a process that is not this home's serving head.
    """
    if not _in_use(host, port):
        return
    found = cluster.read_cluster(home)
    if found is not None and cluster.is_alive(found):
        held = _head_listeners(found)
        # Our Serve holds the port, or Serve already runs on this head elsewhere and keeps
        # that listener (a redeploy does not move it): either way nothing new binds ``port``.
        if held is None or port in held or held & _recorded_listeners(home):
            return
    raise DeployError(
        f"port {port} on {host} is already in use by another process, so the model cannot be "
        "served there; nothing was started",
        hint=hint,
    )


def _in_use(host: str, port: int) -> bool:
    """True when binding ``host:port`` fails because someone listens there.

    SO_REUSEADDR as a server sets it: a closed connection's TIME_WAIT is not "in use".
    Any other failure (an address not on this machine) is left for Serve to report.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _head_listeners(found: cluster.ManagedCluster) -> set[int] | None:
    """The TCP ports processes of the managed head listen on (None: the platform hides it)."""
    import psutil

    try:
        connections = psutil.net_connections("tcp")
    except psutil.Error:
        return None
    gcs_port = found.address.rpartition(":")[2]
    head = {p.pid for p in cluster._head_processes(Path(found.temp_dir), gcs_port, found.pids)}
    return {
        c.laddr.port
        for c in connections
        if c.status == psutil.CONN_LISTEN and c.laddr and c.pid in head
    }


def _recorded_listeners(home: Path) -> set[int]:
    """The ports Serve's HTTP entry listened on, as this home's deployments recorded them."""
    ports = set()
    for path in (home / "serve").glob("*/deployment.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            listener = json.loads(path.read_text()).get("listener", "")
            ports.add(int(listener.rpartition(":")[2]))
    return ports
