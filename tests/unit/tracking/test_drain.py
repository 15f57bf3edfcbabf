"""The drainer against a real MLflow SQLite store: order, idempotence, ops, outages."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from engage.tracking.drain import Drainer
from engage.tracking.run import model_requirements
from engage.tracking.spool import Spool


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def spool_path(tmp_path: Path) -> Path:
    return tmp_path / "spool.db"


def _drain(spool_path: Path, **kwargs) -> Drainer:
    drainer = Drainer(spool_path, **kwargs)
    drainer.drain_once()
    return drainer


def test_points_land_once_with_original_step_and_timestamp(
    store_uri: str, spool_path: Path
) -> None:
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-order", "r", {"k": "v"})
    spool.append_points(run, [("metric", "loss", float(i), i, 1_000 + i) for i in range(2_500)])
    spool.append_points(run, [("param", "lr", "0.1", None, 5), ("tag", "t", "x", None, 5)])
    spool.end_run(run, "FINISHED")

    drainer = _drain(spool_path)

    server_id = spool.run(run).server_id
    client = MlflowClient(store_uri)
    history = client.get_metric_history(server_id, "loss")
    assert [(m.step, m.timestamp, m.value) for m in history] == [
        (i, 1_000 + i, float(i)) for i in range(2_500)
    ]
    got = client.get_run(server_id)
    assert got.data.params == {"lr": "0.1"}
    assert got.data.tags["k"] == "v"
    assert got.data.tags["engage.local_run_id"] == run
    assert got.info.status == "FINISHED"
    assert drainer.is_drained()
    drainer.stop()


def test_resending_after_a_crash_creates_no_duplicates(store_uri: str, spool_path: Path) -> None:
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-resend", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 10 + i) for i in range(100)])
    _drain(spool_path).stop()
    # A crash between sending and marking: the same entries are pending again.
    spool._db.execute("UPDATE outbox SET sent = 0")
    spool._db.execute("UPDATE runs SET server_id = NULL")

    _drain(spool_path).stop()

    client = MlflowClient(store_uri)
    (found,) = client.search_runs(
        [client.get_experiment_by_name("drain-resend").experiment_id]
    )  # the run was found by its local id, not created twice
    assert len(client.get_metric_history(found.info.run_id, "m")) == 100


def test_child_runs_point_at_their_parent(store_uri: str, spool_path: Path) -> None:
    spool = Spool(spool_path)
    parent = spool.create_run(store_uri, "drain-nested", "parent", {})
    child = spool.create_run(store_uri, "drain-nested", "round-1", {}, parent_local_id=parent)

    _drain(spool_path).stop()

    client = MlflowClient(store_uri)
    got = client.get_run(spool.run(child).server_id)
    assert got.data.tags["mlflow.parentRunId"] == spool.run(parent).server_id


def test_ops_log_text_model_and_register(store_uri: str, spool_path: Path, tmp_path: Path) -> None:
    import mlflow.pytorch
    import numpy as np
    import torch

    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-ops", "r", {})
    spool.append_op(run, "text", {"text": "hello", "artifact_file": "notes/a.txt"})
    model_dir = tmp_path / "model"
    mlflow.pytorch.save_model(
        torch.nn.Linear(2, 1),
        model_dir,
        input_example=np.zeros((3, 2), dtype=np.float32),
        pip_requirements=model_requirements(),  # MLflow infers them in a subprocess otherwise
    )
    model_seq = spool.append_op(run, "model", {"name": "model", "local_dir": str(model_dir)})
    reg_seq = spool.append_op(
        run, "register", {"model_name": "drain-m", "model_seq": model_seq, "tags": {"g": "1"}}
    )

    _drain(spool_path).stop()

    client = MlflowClient(store_uri)
    server_id = spool.run(run).server_id
    assert client.download_artifacts(server_id, "notes/a.txt", str(tmp_path)).endswith("a.txt")
    model = json.loads(spool.result(model_seq))
    assert client.get_logged_model(model["model_id"]).source_run_id == server_id
    registration = json.loads(spool.result(reg_seq))
    version = client.get_model_version_by_alias("drain-m", "candidate")
    assert str(version.version) == registration["version"] == "1"
    assert version.tags["g"] == "1"


def test_a_rejected_entry_is_set_aside_and_the_rest_still_land(
    store_uri: str, spool_path: Path
) -> None:
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-reject", "r", {})
    spool.append_points(run, [("param", "p", "1", None, 1)])
    spool.append_points(run, [("param", "p", "2", None, 2), ("metric", "m", 1.0, 0, 3)])
    warnings: list[str] = []

    drainer = _drain(spool_path, warn=warnings.append)

    client = MlflowClient(store_uri)
    got = client.get_run(spool.run(run).server_id)
    assert got.data.params == {"p": "1"}
    assert got.data.metrics == {"m": 1.0}
    assert drainer.status.failed_permanently == 1
    assert any("rejected param p" in w for w in warnings)
    assert spool.stats().depth == 0


def test_unreachable_server_keeps_everything_and_warns_once(spool_path: Path) -> None:
    spool = Spool(spool_path)
    run = spool.create_run("http://127.0.0.1:9", "down", "r", {})
    spool.append_points(run, [("metric", "m", 1.0, 0, 1)])
    warnings: list[str] = []

    drainer = _drain(spool_path, warn=warnings.append)
    drainer.drain_once()

    assert drainer.status.error is not None
    assert len(warnings) == 1
    assert "keeps every point in the spool" in warnings[0]
    assert spool.stats().depth == 1
    assert spool.run(run).server_id is None
    drainer.stop()


def test_only_one_drainer_holds_the_spool(store_uri: str, spool_path: Path) -> None:
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-lock", "r", {})
    first = Drainer(spool_path)
    assert first._acquire()
    second = Drainer(spool_path)

    second.drain_once()

    assert spool.run(run).server_id is None  # the second one sent nothing
    first.drain_once()
    assert spool.run(run).server_id is not None
    first.stop()
    second.stop()


def test_non_finite_metrics_reach_mlflow_as_recorded(store_uri: str, spool_path: Path) -> None:
    import math

    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-nan", "r", {})
    spool.append_points(run, [("metric", "loss", math.nan, 1, 10), ("metric", "loss", 0.5, 2, 11)])

    _drain(spool_path).stop()

    history = MlflowClient(store_uri).get_metric_history(spool.run(run).server_id, "loss")
    assert [m.step for m in history] == [1, 2]
    assert math.isnan(history[0].value)
    assert history[1].value == 0.5


def test_points_go_in_requests_within_log_batch_limits(store_uri: str, spool_path: Path) -> None:
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-limits", "r", {})
    spool.append_points(run, [("metric", "m", float(i), i, 1 + i) for i in range(2_500)])
    spool.append_points(run, [("param", f"p{i}", "v", None, 1) for i in range(250)])
    spool.append_points(run, [("param", f"big{i}", "x" * 5_000, None, 1) for i in range(200)])
    requests: list[tuple[int, int, int]] = []

    class Spy(MlflowClient):
        def log_batch(self, run_id, metrics=(), params=(), tags=(), **kwargs):
            size = sum(len(p.key) + len(p.value) for p in params)
            requests.append((len(metrics), len(params), size))
            return super().log_batch(run_id, metrics=metrics, params=params, tags=tags, **kwargs)

    drainer = _drain(spool_path, client_factory=Spy)

    assert sum(m for m, _, _ in requests) == 2_500
    assert sum(p for _, p, _ in requests) == 450
    assert all(m <= 1_000 and p <= 100 and size < 1_000_000 for m, p, size in requests)
    assert len(MlflowClient(store_uri).get_run(spool.run(run).server_id).data.params) == 450
    drainer.stop()


class _SlowCreate:
    """A real client whose run lookup takes a while: the window two passes could share."""

    def __init__(self, uri: str) -> None:
        self._client = MlflowClient(uri)

    def search_runs(self, *args, **kwargs):
        time.sleep(0.3)
        return self._client.search_runs(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._client, name)


def test_two_threads_passing_at_once_send_the_run_once(store_uri: str, spool_path: Path) -> None:
    # engage profile/plan start an in-process drainer and flush at once: the flush's pass
    # and the thread's first pass both ran, each created the run (CI: the returned run was
    # FINISHED with no parameters, which the other copy got).
    MlflowClient(store_uri).create_experiment("drain-pass-race")  # the race is the run's
    spool = Spool(spool_path)
    run = spool.create_run(store_uri, "drain-pass-race", "r", {})
    spool.append_points(run, [("param", "p", "1", None, 5), ("metric", "m", 1.0, 0, 5)])
    spool.end_run(run, "FINISHED")
    drainer = Drainer(spool_path, client_factory=_SlowCreate)
    gate = threading.Barrier(2)

    def one_pass() -> None:
        gate.wait()
        drainer.drain_once()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert drainer.flush(run, timeout_s=30)
    drainer.stop()

    client = MlflowClient(store_uri)
    found = client.search_runs([client.get_experiment_by_name("drain-pass-race").experiment_id])
    assert len(found) == 1
    assert found[0].info.run_id == spool.run(run).server_id
    assert found[0].data.params == {"p": "1"}
    assert found[0].info.status == "FINISHED"
