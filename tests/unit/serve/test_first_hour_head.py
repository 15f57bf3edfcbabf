"""The managed serving head's start-up failures: exit 4 with a message, nothing left running.

``ray start`` and ``ray.init`` are replaced by fakes, so no Ray starts (issue 13 item 3:
a node start that timed out under load ended as an untyped error or left a head behind).
"""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest
import ray

from engage.errors import ClusterError
from engage.serve import cluster


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What the failed start asked to stop: (temp dir, GCS port) pairs."""
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(cluster, "_haproxy_env", lambda folder, temp: {})

    def record(temp: Any, gcs_port: str, pids: Any = (), grace_s: float = 10.0) -> list[int]:
        calls.append((str(temp), gcs_port))
        return []

    monkeypatch.setattr(cluster, "_stop_head", record)
    return calls


def test_a_ray_start_that_times_out_is_a_cluster_error_and_is_cleaned_up(
    tmp_path, monkeypatch: pytest.MonkeyPatch, stopped
) -> None:
    def too_slow(args: list[str], **kwargs: Any) -> Any:
        raise subprocess.TimeoutExpired(args, kwargs.get("timeout", 1))

    monkeypatch.setattr(cluster.subprocess, "run", too_slow)

    with pytest.raises(ClusterError) as caught:
        cluster.ensure_cluster(tmp_path / ".engage", 1)

    assert caught.value.exit_code == 4
    assert "did not start within" in caught.value.message
    assert "ray-start.log" in (caught.value.hint or "")
    assert len(stopped) == 1  # the half-started head's processes are stopped
    assert not cluster.state_file(tmp_path / ".engage").exists()


def test_a_failed_ray_start_names_its_last_log_line_and_is_cleaned_up(
    tmp_path, monkeypatch: pytest.MonkeyPatch, stopped
) -> None:
    def fails(args: list[str], stdout: Any, **kwargs: Any) -> Any:
        stdout.write("starting...\nException: The current node timed out during startup.\n")
        return subprocess.CompletedProcess(args, 1)

    monkeypatch.setattr(cluster.subprocess, "run", fails)

    with pytest.raises(ClusterError) as caught:
        cluster.ensure_cluster(tmp_path / ".engage", 1)

    assert "could not start a local Ray head for serving (exit 1)" in caught.value.message
    assert "The current node timed out during startup" in caught.value.message
    assert len(stopped) == 1


def test_joining_the_head_with_a_bare_exception_is_a_cluster_error(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(**kwargs: Any) -> Any:
        raise Exception("The current node timed out during startup")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refused)

    with pytest.raises(ClusterError) as caught:
        cluster.connect("127.0.0.1:1", tmp_path)

    assert caught.value.exit_code == 4
    assert "timed out during startup" in caught.value.message


def test_engage_deploy_checks_its_port_before_starting_a_head(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engage.errors import DeployError
    from engage.serve import controller
    from engage.spec.models import DeploySpec

    started: list[object] = []
    monkeypatch.setattr(cluster, "ensure_cluster", lambda *args, **kwargs: started.append(args))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        options = controller.DeployOptions("m/1", DeploySpec(port=port), tmp_path)

        with pytest.raises(DeployError) as caught:
            controller._connect(options)

    assert f"port {port}" in caught.value.message
    assert "--port N" in (caught.value.hint or "")
    assert started == []  # no serving head was started
