"""Auth per listener, on one engage-managed head, checked with real sockets (issue 11).

Serve keeps the ``http_options`` of its first start. The bypass this test reproduces: an app
deployed with a token on ``--host 0.0.0.0``, then a second app deployed without a token
(asking for the default 127.0.0.1) answered 200 without auth on the 0.0.0.0 listener. Now
the second deploy is refused with the real listening address, and an app deployed with the
token on that listener answers 401 without it. The same head shows the rest of the serving
hardening: no serving token in any head process's environment, every Ray listener on
loopback, and ``engage serve stop`` leaving nothing running, Ray's client server included.

The listener is on 0.0.0.0 (that is the case under test) only while this test runs, and
every app on it requires the token.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import requests
from _tiny_model import FEATURES, MODEL, WINDOW

from engage.serve.cluster import read_cluster

pytestmark = pytest.mark.integration

ENGAGE = Path(sys.executable).with_name("engage")
TOKEN = "listener-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _head_processes(cluster) -> list[psutil.Process]:
    """Every live process of the managed head: by its temp dir, its client server, children."""
    gcs_port = cluster.address.rpartition(":")[2]
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        client = "ray.util.client.server" in cmdline and any(
            a.startswith("--address=") and a.endswith(f":{gcs_port}") for a in cmdline
        )
        if client or any(cluster.temp_dir in part for part in cmdline):
            found[p.pid] = p
            for child in p.children(recursive=True):
                found[child.pid] = child
    return list(found.values())


def _listeners(procs: list[psutil.Process]) -> dict[str, list[str]]:
    """``ip:port`` of each TCP socket the processes listen on, by process name."""
    out: dict[str, list[str]] = {}
    for p in procs:
        try:
            conns = p.net_connections("tcp")
            name = p.name()
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                out.setdefault(name, []).append(f"{c.laddr.ip}:{c.laddr.port}")
    return out


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _post(url: str, token: str | None = None) -> requests.Response:
    body = {"inputs": np.zeros((1, WINDOW, FEATURES)).tolist()}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{url}/predict", json=body, headers=headers, timeout=10)


def test_auth_is_decided_by_the_listener_not_by_the_spec(tmp_path: Path, tiny_home) -> None:
    home = tiny_home(tmp_path)
    port = _free_port()
    specs = {}
    for prefix in ("open", "guarded"):
        specs[prefix] = tmp_path / f"{prefix}.yaml"
        specs[prefix].write_text(
            f"name: {prefix}\ndata: {{source: {{type: synthetic}}, features: [co2], "
            f"target: occupied, task: classification}}\nmodel: {{name: mlp}}\n"
            f"deploy: {{port: {port}, route_prefix: /{prefix}}}\n"
        )
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    base |= {"ENGAGE_HOME": str(home), "COLUMNS": "200"}
    base.pop("ENGAGE_SERVE_TOKEN", None)
    with_token = base | {"ENGAGE_SERVE_TOKEN": TOKEN}

    def engage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(ENGAGE), *args], env=env, capture_output=True, text=True, timeout=400
        )
        # The console wraps long lines: compare text with its whitespace collapsed.
        done.stdout, done.stderr = (" ".join(t.split()) for t in (done.stdout, done.stderr))
        return done

    try:
        first = engage(
            "deploy", f"{MODEL}@candidate", "--host", "0.0.0.0", "--port", str(port),
            "--app", "first", env=with_token,
        )  # fmt: skip
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"listening on 0.0.0.0:{port} (bearer token from $ENGAGE_SERVE_TOKEN required)" in (
            first.stdout
        )
        cluster = read_cluster(home)
        assert cluster is not None

        # The bypass: no token, the spec asks for 127.0.0.1, Serve listens on 0.0.0.0.
        open_ = engage(
            "deploy", f"{MODEL}@candidate", "--spec", str(specs["open"]), "--app", "open",
            env=base,
        )  # fmt: skip
        assert open_.returncode == 1, open_.stdout + open_.stderr
        assert f"Serve on this cluster listens on 0.0.0.0:{port}" in open_.stderr
        assert "requested host 127.0.0.1 cannot change it" in open_.stderr
        assert _post(f"http://127.0.0.1:{port}/open").status_code == 404  # never served

        guarded = engage(
            "deploy", f"{MODEL}@candidate", "--spec", str(specs["guarded"]), "--app", "guarded",
            env=with_token,
        )  # fmt: skip
        assert guarded.returncode == 0, guarded.stdout + guarded.stderr
        assert f"at http://0.0.0.0:{port}/guarded/predict" in guarded.stdout
        assert f"already listened on 0.0.0.0:{port}" in guarded.stdout
        url = f"http://127.0.0.1:{port}/guarded"
        assert _post(url).status_code == 401
        assert _post(url, TOKEN).status_code == 200

        procs = _head_processes(cluster)
        assert procs
        for p in procs:
            try:
                environ = p.environ()
            except psutil.Error:
                continue
            assert "ENGAGE_SERVE_TOKEN" not in environ, p.name()
            assert TOKEN not in "\0".join(environ.values()), p.name()
        listening = _listeners(procs)
        assert "gcs_server" in listening, listening
        assert "raylet" in listening, listening
        exposed = {
            name: [a for a in addresses if not _is_loopback(a.rpartition(":")[0])]
            for name, addresses in listening.items()
        }
        # Only the serving listener (HAProxy and the replicas' own ports, token-checked) is
        # where the user asked; every Ray port is on loopback.
        ray_exposed = {
            name: addresses
            for name, addresses in exposed.items()
            if addresses
            and not name.startswith(("haproxy", "ray::ServeReplica", "ray::ProxyActor"))
        }
        assert ray_exposed == {}, listening
    finally:
        stopped = engage("serve", "stop", env=base)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped:" in stopped.stdout
    # Nothing of the head survives the stop: Ray's client server was the one left behind.
    assert [p.pid for p in _head_processes(cluster) if p.is_running()] == []
