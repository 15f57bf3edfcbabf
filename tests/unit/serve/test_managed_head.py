"""The managed serving head's start command, environment and stop, without starting Ray.

``ray start`` is replaced by a recorder: what matters is what engage hands it (issue 11
item 6): no serving token in the environment of the head's processes, the Ray token by its
0600 file, every listener Ray lets engage choose on loopback; and ``stop_managed`` finds the
Ray client server, which names neither the temp dir nor the head as its parent.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from engage.serve import cluster

TOKEN = "serving-token-0123456789abcdef"


@pytest.fixture
def started(tmp_path, monkeypatch):
    """ensure_cluster with `ray start` recorded instead of run."""
    calls = []

    def fake_run(args, env, **kwargs):
        calls.append((args, env))
        return subprocess.CompletedProcess(args, 0)

    monkeypatch.setattr(cluster.subprocess, "run", fake_run)
    monkeypatch.setattr(cluster, "_haproxy_env", lambda folder, temp: {})
    monkeypatch.setenv("ENGAGE_SERVE_TOKEN", TOKEN)
    monkeypatch.setenv("MY_APP_TOKEN", TOKEN)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "another-clusters-token")
    home = tmp_path / ".engage"
    managed, fresh = cluster.ensure_cluster(home, 1, secret_vars=("MY_APP_TOKEN",))
    assert fresh
    (args, env), *_ = calls
    return home, managed, args, env


def test_no_serving_token_reaches_the_head_s_environment(started):
    _, _, _, env = started

    assert "ENGAGE_SERVE_TOKEN" not in env
    assert "MY_APP_TOKEN" not in env  # the spec's token_env
    assert TOKEN not in json.dumps(env)


def test_the_ray_token_goes_by_a_0600_file(started):
    _, managed, _, env = started

    assert "RAY_AUTH_TOKEN" not in env
    assert env["RAY_AUTH_TOKEN_PATH"] == managed.token_path
    assert stat.S_IMODE(os.stat(managed.token_path).st_mode) == 0o600


def test_every_listener_engage_chooses_is_on_loopback(started):
    _, managed, args, env = started

    assert "--node-ip-address=127.0.0.1" in args
    assert "--dashboard-host=127.0.0.1" in args
    for flag in (
        "--ray-client-server-port",
        "--dashboard-agent-listen-port",
        "--metrics-export-port",
    ):
        assert any(a.startswith(f"{flag}=") for a in args), flag
    # Without it Ray 2.60 replaces --node-ip-address=127.0.0.1 by the machine's address.
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert managed.address.startswith("127.0.0.1:")


def test_stop_finds_the_client_server_by_the_gcs_port(tmp_path):
    """A process shaped like Ray's client server, outside the temp dir and the head's tree."""
    home = tmp_path / ".engage"
    (home / "serve").mkdir(parents=True)
    port = cluster.free_port()
    managed = cluster.ManagedCluster(
        f"127.0.0.1:{port}", "http://127.0.0.1:1", str(tmp_path / "no-such-temp"), "t", 1, ()
    )
    cluster.state_file(home).write_text(json.dumps(cluster.asdict(managed)))
    # `python -c CODE ray.util.client.server --address=...`: argv names the module and the port.
    fake = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "ray.util.client.server",
         f"--address=127.0.0.1:{port}", "--mode=proxy"]
    )  # fmt: skip
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "ray.util.client.server",
         f"--address=127.0.0.1:{port + 1}", "--mode=proxy"]
    )  # fmt: skip
    try:
        time.sleep(0.3)
        assert cluster.stop_managed(home, grace_s=5) == []
        assert fake.wait(timeout=10) is not None
        assert other.poll() is None  # another cluster's client server is left alone
    finally:
        for p in (fake, other):
            p.kill()
            p.wait()


def test_serve_waits_for_a_slow_proxy_instead_of_killing_it(started):
    # Serve's controller gives a starting proxy 5 s to answer its readiness check, three
    # times, then kills it; beside two CPU hogs no proxy made it and the deploy failed.
    _, _, _, env = started

    assert float(env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"]) >= 60
    assert float(env["RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"]) >= 30


@pytest.mark.parametrize(("value", "flag"), [(None, "true"), ("0", "false")])
def test_the_head_runs_ray_s_dashboard_unless_told_not_to(tmp_path, monkeypatch, value, flag):
    calls = []
    monkeypatch.setattr(
        cluster.subprocess,
        "run",
        lambda a, env, **k: calls.append(a) or subprocess.CompletedProcess(a, 0),
    )
    monkeypatch.setattr(cluster, "_haproxy_env", lambda folder, temp: {})
    if value is None:
        monkeypatch.delenv("ENGAGE_RAY_DASHBOARD", raising=False)
    else:
        monkeypatch.setenv("ENGAGE_RAY_DASHBOARD", value)

    managed, _ = cluster.ensure_cluster(tmp_path / ".engage", 1)

    assert f"--include-dashboard={flag}" in calls[0]
    assert bool(managed.dashboard_url) is (flag == "true")
