"""A pipeline run through a real two-node Ray cluster on 127.0.0.1 (`engage run --address`)."""

from __future__ import annotations

import re
from pathlib import Path

import mlflow
import pytest

pytestmark = pytest.mark.integration


def test_pipeline_runs_on_both_nodes_of_a_loopback_cluster(
    loopback_cluster, run_engage, tmp_path: Path
) -> None:
    # Arrange: the cluster fixture has 2 alive nodes with 1 CPU each; the spec's 2 workers
    # need 1 CPU each, so the job only fits if it spans both.
    cluster = loopback_cluster

    # Act
    done = run_engage(
        "run",
        "pipelines/quickstart.yaml",
        "--address",
        cluster.address,
        "--set",
        "train.epochs=2",
        "--set",
        "deploy.after_training=false",
        "--set",
        "export.formats=[]",  # the export stage runs in the driver, not on the cluster
        "--set",
        "train.comm.compression=fp16",  # gradients cross the two nodes fp16-compressed
        env=cluster.env,
    )

    # Assert: the CLI joined the cluster and reports the run and the registered version.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"joining {cluster.address}" in done.stdout
    run_id = re.search(r"run id: ([0-9a-f]{32})", done.stdout).group(1)
    version = re.search(r"registered model smart-home-occupancy version (\d+)", done.stdout).group(
        1
    )

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / '.engage'}/mlflow.db")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run_id, "val_accuracy")
    assert sorted(m.step for m in history) == [1, 2]
    assert "test_accuracy" in run.data.metrics
    # The compression hook ran on the DDP model, timed through the one report path.
    assert run.data.params["train.comm.compression"] == "fp16"
    assert run.data.metrics["allreduce_seconds"] > 0
    assert run.data.metrics["allreduce_buckets"] >= 1
    candidate = client.get_model_version_by_alias("smart-home-occupancy", "candidate")
    assert (str(candidate.version), candidate.run_id) == (version, run_id)

    # Assert: the two training workers ran in this cluster, one on each node.
    workers = cluster.state(
        "[a.node_id for a in state.list_actors(address=URL, detail=True, limit=1000,"
        " filters=[('class_name', '=', 'RayTrainWorker')], raise_on_missing_output=False)]"
    )
    nodes = cluster.state(
        "[n.node_id for n in state.list_nodes(address=URL) if n.state == 'ALIVE']"
    )
    assert len(workers) == 2, workers
    assert len(nodes) == 2
    assert set(workers) == set(nodes)
