"""A busy serving port is found before anything starts (issue 13 item 3).

``engage deploy`` with port 8000 held by another server took 101 s to fail with a HAProxy
traceback (exit 70) and left a Ray head running; the quickstart spec's own deploy failed
the same way after training. The port is now checked by binding it, before the serving
head (``engage deploy``) or before the run and Ray (``engage run`` with a deploy section).
A port held by this home's own serving head is not busy: a redeploy reuses it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from engage.errors import DeployError
from engage.runtime.options import RunOptions
from engage.runtime.pipeline import PipelineJob
from engage.serve import cluster, ports
from engage.spec.models import DeploySpec


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another server listens on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_held_by_another_server_is_refused_before_anything_starts(
    tmp_path, held_port: int
) -> None:
    with pytest.raises(DeployError) as caught:
        ports.check_serving_port(tmp_path, "127.0.0.1", held_port, hint="use --port N")

    error = caught.value
    assert error.exit_code == 11
    assert f"port {held_port}" in error.message
    assert "in use" in error.message
    assert error.hint == "use --port N"
    assert not cluster.state_file(tmp_path).exists()  # no serving head was started


def test_a_free_port_passes(tmp_path) -> None:
    ports.check_serving_port(tmp_path, "127.0.0.1", _free_port(), hint="")


@pytest.fixture
def alive_head(tmp_path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """This home's serving head is alive; the test fills in the ports its processes hold."""
    held: list[int] = []
    head = SimpleNamespace(address="127.0.0.1:1", temp_dir=str(tmp_path), pids=())
    monkeypatch.setattr(cluster, "read_cluster", lambda home: head)
    monkeypatch.setattr(cluster, "is_alive", lambda found: True)
    monkeypatch.setattr(ports, "_head_listeners", lambda found: set(held))
    return held


def _record_listener(home, port: int) -> None:
    state = home / "serve" / "app" / "deployment.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"listener": f"127.0.0.1:{port}"}))


def test_a_port_held_by_this_home_s_own_serving_head_is_not_busy(
    tmp_path, held_port: int, alive_head: list[int]
) -> None:
    alive_head.append(held_port)  # a redeploy: our Serve (HAProxy) listens there

    ports.check_serving_port(tmp_path, "127.0.0.1", held_port, hint="")


def test_a_busy_port_is_ignored_when_serve_already_runs_on_our_head_elsewhere(
    tmp_path, held_port: int, alive_head: list[int]
) -> None:
    # Serve keeps the listener of its first start: this deploy will not bind held_port.
    alive_head.append(18123)
    _record_listener(tmp_path, 18123)

    ports.check_serving_port(tmp_path, "127.0.0.1", held_port, hint="")


def test_a_port_held_by_someone_else_while_our_head_has_no_serve_is_busy(
    tmp_path, held_port: int, alive_head: list[int]
) -> None:
    alive_head.append(6379)  # the head's own Ray ports, but no Serve listener

    with pytest.raises(DeployError):
        ports.check_serving_port(tmp_path, "127.0.0.1", held_port, hint="")


def _pipeline_job(tmp_path, port: int, after_training: bool = True, address: str | None = None):
    deploy = DeploySpec(after_training=after_training, port=port)
    loaded = SimpleNamespace(spec=SimpleNamespace(deploy=deploy))
    return PipelineJob(loaded, RunOptions(address=address, home=tmp_path))


def test_engage_run_with_a_deploy_section_checks_its_port_in_preflight(
    tmp_path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    with pytest.raises(DeployError) as caught:
        _pipeline_job(tmp_path, held_port).preflight()

    assert f"port {held_port}" in caught.value.message
    assert "--set deploy.port=" in (caught.value.hint or "")


def test_engage_run_without_deploying_does_not_check_the_port(
    tmp_path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    _pipeline_job(tmp_path, held_port, after_training=False).preflight()


def test_a_deploy_onto_a_cluster_of_your_own_is_not_checked_here(tmp_path, held_port: int) -> None:
    # Serve listens on that cluster's head node, which need not be this machine.
    _pipeline_job(tmp_path, held_port, address="10.0.0.1:6379").preflight()


def test_the_head_s_listeners_are_read_from_its_processes_sockets(
    tmp_path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    head = SimpleNamespace(address="127.0.0.1:1", temp_dir=str(tmp_path), pids=())
    monkeypatch.setattr(
        cluster, "_head_processes", lambda temp, gcs_port, pids=(): [psutil.Process()]
    )

    assert held_port in ports._head_listeners(head)
