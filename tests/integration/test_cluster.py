"""Pipeline runs through a real two-node Ray cluster on 127.0.0.1 (`engage run --address`):
one spans both nodes, one asks for a custom resource only the second node offers."""

from __future__ import annotations

import re
from pathlib import Path

import mlflow
import pytest

pytestmark = pytest.mark.integration


# State API expressions (each cluster.state call is a fresh interpreter: a few seconds).
_TRAIN_WORKERS = (  # {actor id: node id} of every Ray Train worker, dead ones included
    "{a.actor_id: a.node_id for a in state.list_actors(address=URL, detail=True, limit=1000,"
    " filters=[('class_name', '=', 'RayTrainWorker')], raise_on_missing_output=False)}"
)
_ALIVE_NODES = (  # {node id: how much node_b it offers}
    "{n.node_id: n.resources_total.get('node_b', 0) for n in state.list_nodes(address=URL)"
    " if n.state == 'ALIVE'}"
)


def test_pipeline_spans_both_loopback_nodes_and_a_custom_resource_pins_it_to_one(
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
    workers, nodes = cluster.state(f"[{_TRAIN_WORKERS}, {_ALIVE_NODES}]")
    assert len(workers) == 2, workers
    assert len(nodes) == 2
    assert set(workers.values()) == set(nodes)

    # Act (placement, on the same cluster): a second, one-epoch run whose two workers ask
    # for the custom resource node_b, which only the second node offers (node_b: 2). Half a
    # CPU each lets both fit there; `spread` would put them on two nodes if it could.
    placed = run_engage(
        "run",
        "pipelines/quickstart.yaml",
        "--address",
        cluster.address,
        "--set",
        "train.epochs=1",
        "--set",
        "train.resources_per_worker={CPU: 0.5, node_b: 1}",
        "--set",
        "train.placement=spread",
        "--set",
        "tracking.registration=null",
        "--set",
        "deploy.after_training=false",
        "--set",
        "export.formats=[]",
        env=cluster.env,
    )

    # Assert: the run recorded the request, and every training worker it started (the
    # actors the first run did not have) ran on the second node.
    assert placed.returncode == 0, placed.stdout[-3000:] + placed.stderr[-3000:]
    placed_id = re.search(r"run id: ([0-9a-f]{32})", placed.stdout).group(1)
    params = client.get_run(placed_id).data.params
    assert params["train.resources_per_worker.node_b"] == "1.0"
    assert params["train.placement"] == "spread"
    second = [node for node, offered in nodes.items() if offered]
    now = cluster.state(_TRAIN_WORKERS)
    new = {actor: node for actor, node in now.items() if actor not in workers}
    assert len(second) == 1, nodes
    assert len(new) == 2, now
    assert set(new.values()) == set(second), (new, second)
