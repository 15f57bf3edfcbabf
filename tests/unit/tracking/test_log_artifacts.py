"""PipelineRun.log_artifacts: files copied into the spool, sent once, resent harmlessly."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from engage.tracking import PipelineRun, Spool
from engage.tracking.drain import Drainer


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def test_a_folder_lands_under_its_artifact_path_even_after_the_caller_deletes_it(
    store_uri: str, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool.db")
    run = PipelineRun(spool, spool.create_run(store_uri, "artifacts", "r", {}), store_uri, "a")
    source = tmp_path / "out"
    (source / "sub").mkdir(parents=True)
    (source / "model.onnx").write_bytes(b"\x08\x01")
    (source / "sub" / "note.txt").write_text("hi")

    run.log_artifacts(source, "export")
    (source / "model.onnx").unlink()  # the spool holds its own copy
    drainer = Drainer(spool.path)
    drainer.drain_once()

    client = MlflowClient(store_uri)
    server_id = spool.run(run.local_id).server_id
    assert {a.path for a in client.list_artifacts(server_id, "export")} == {
        "export/model.onnx",
        "export/sub",
    }
    assert drainer.is_drained()
    drainer.stop()


def test_sending_twice_after_a_crash_leaves_one_copy(store_uri: str, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    run = PipelineRun(spool, spool.create_run(store_uri, "artifacts2", "r", {}), store_uri, "a")
    source = tmp_path / "out"
    source.mkdir()
    (source / "a.txt").write_text("1")
    run.log_artifacts(source, "export")
    first = Drainer(spool.path)
    first.drain_once()
    first.stop()
    spool._db.execute("UPDATE outbox SET sent = 0")  # a crash between sending and marking

    drainer = Drainer(spool.path)
    drainer.drain_once()

    client = MlflowClient(store_uri)
    server_id = spool.run(run.local_id).server_id
    assert [a.path for a in client.list_artifacts(server_id, "export")] == ["export/a.txt"]
    drainer.stop()
