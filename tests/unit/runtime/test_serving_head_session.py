"""A job that serves afterwards trains on engage's managed serving head: one Ray cluster."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from engage.errors import ClusterError
from engage.runtime import stages
from engage.runtime.options import RunOptions
from engage.runtime.session import SessionInfo
from engage.serve import cluster as cluster_module
from engage.serve import deploy_process
from engage.spec.models import DeploySpec


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Fakes for the managed head and Ray: what enter_ray asked of them."""
    seen: dict[str, list] = {
        "ensure": [],
        "connect": [],
        "stop": [],
        "session": [],
        "early": [],
        "cancel": [],
    }
    head = SimpleNamespace(address="127.0.0.1:6390", env=lambda: {"RAY_AUTH_MODE": "token"})

    def ensure(home: Path, num_cpus=None, secret_vars=()):
        seen["ensure"].append((home, num_cpus, tuple(secret_vars)))
        return head, True

    @contextmanager
    def session(address, num_cpus=None, verbose=False):
        seen["session"].append(address)
        yield SessionInfo(address, {"CPU": 2.0}, 0.0, None)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(cluster_module, "ensure_cluster", ensure)
    monkeypatch.setattr(cluster_module, "connect", lambda *a: seen["connect"].append(a))
    monkeypatch.setattr(cluster_module, "stop_managed", lambda home: seen["stop"].append(home))
    monkeypatch.setattr(stages, "ray_session", session)
    monkeypatch.setattr(stages, "_joined", lambda: False)
    # The deploy's process, started early (it would start Serve on the head): recorded.
    monkeypatch.setattr(
        deploy_process, "start_early", lambda spec, home: seen["early"].append((spec, home))
    )
    monkeypatch.setattr(deploy_process, "cancel_early", lambda: seen["cancel"].append(True))
    return seen


def test_a_serving_job_joins_the_managed_head_and_keeps_the_token_out(calls, tmp_path) -> None:
    options = RunOptions(home=tmp_path, num_cpus=2)

    deploy = DeploySpec(token_env="MY_TOKEN")
    session = stages.enter_ray(options, deploy)

    assert calls["ensure"] == [(tmp_path, 2, ("MY_TOKEN",))]
    assert calls["connect"][0][:2] == ("127.0.0.1:6390", tmp_path)
    assert calls["session"] == ["127.0.0.1:6390"]
    session.close()
    assert calls["stop"] == []  # leaving Ray leaves the head for the deploy
    session.release_head()
    session.release_head()  # once is enough: the second call does nothing
    assert calls["stop"] == [tmp_path]


def test_a_serving_job_starts_its_deploy_early_and_a_release_ends_it(calls, tmp_path) -> None:
    # Serve's controller and proxies start on the head while the job trains; a job that
    # ends without serving stops that process before the head.
    deploy = DeploySpec(port=8123)
    session = stages.enter_ray(RunOptions(home=tmp_path), deploy)

    assert calls["early"] == [(deploy, tmp_path)]
    session.close()
    assert calls["cancel"] == []
    session.release_head()
    assert calls["cancel"] == [True]


def test_other_jobs_and_address_runs_do_not_touch_the_head(calls, tmp_path) -> None:
    stages.enter_ray(RunOptions(home=tmp_path)).close()
    stages.enter_ray(RunOptions(home=tmp_path, address="10.0.0.5:6379"), DeploySpec()).close()

    assert calls["ensure"] == []
    assert calls["early"] == []
    assert calls["session"] == [None, "10.0.0.5:6379"]


def test_a_head_that_refuses_the_driver_is_stopped(calls, monkeypatch, tmp_path) -> None:
    def refuse(*args) -> None:
        raise ClusterError("could not join the Ray cluster at 127.0.0.1:6390: token")

    monkeypatch.setattr(cluster_module, "connect", refuse)

    with pytest.raises(ClusterError):
        stages.enter_ray(RunOptions(home=tmp_path), DeploySpec())
    assert calls["stop"] == [tmp_path]
