"""The quickstart as a new user runs it: one command, a registered model at the end.

The command runs once per session (``quickstart_session`` in tests/e2e/conftest.py), beside
other CPU-bound work, as on a user's busy machine (issue 13); the fixture also asks the served
endpoint for the prediction this test checks, then stops the deployment.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _quickstart import QuickstartSession
from mlflow import MlflowClient

pytestmark = pytest.mark.e2e


def test_quickstart_trains_tracks_registers_and_serves(
    quickstart_session: QuickstartSession,
) -> None:
    result = quickstart_session
    serving_port, home = result.port, result.home

    assert result.returncode == 0, result.stdout + result.stderr
    # ...with other CPU-bound work beside it all along, which really got its share of the CPU
    assert result.other_cpu_seconds > 0.3 * result.wall_seconds, (
        result.other_cpu_seconds,
        result.wall_seconds,
    )
    out = result.stdout
    run_id = re.search(r"run id: ([0-9a-f]{32})", out).group(1)
    assert "registered model smart-home-occupancy version 1 (alias @candidate)" in out
    assert "mlflow ui --backend-store-uri sqlite:///" in out
    assert "epoch 5/5" in out
    assert "Traceback" not in out + result.stderr

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    # Parameters: the resolved spec, flattened.
    assert run.data.params["train.epochs"] == "5"
    assert run.data.params["model.name"] == "mlp"
    assert run.data.params["data.source.type"] == "synthetic"
    # Per-epoch metrics, one point per epoch.
    history = client.get_metric_history(run_id, "val_accuracy")
    assert [m.step for m in history] == [1, 2, 3, 4, 5]
    assert all(0.0 <= m.value <= 1.0 for m in history)
    for key in ("train_loss", "samples_per_second", "epoch_seconds", "test_accuracy", "test_f1"):
        assert key in run.data.metrics
    # Lineage: dataset input with our fingerprint, spec file as an artifact.
    (dataset_input,) = run.inputs.dataset_inputs
    assert dataset_input.dataset.name == "synthetic-smart-living"
    assert run.data.tags["engage.dataset.digest"].startswith(dataset_input.dataset.digest[:8])
    artifacts = {a.path for a in client.list_artifacts(run_id, "spec")}
    assert artifacts == {"spec/quickstart.yaml", "spec/resolved.json"}
    # The model: logged with a signature and registered behind the gate.
    (version,) = client.search_model_versions("name='smart-home-occupancy'")
    assert version.run_id == run_id
    assert (
        str(client.get_model_version_by_alias("smart-home-occupancy", "candidate").version) == "1"
    )
    assert "gate passed: val_accuracy" in version.tags["engage.gate"]
    (output,) = run.outputs.model_outputs
    logged = client.get_logged_model(output.model_id)
    assert logged.source_run_id == run_id
    assert version.source == logged.artifact_location
    assert (Path(logged.artifact_location.removeprefix("file://")) / "MLmodel").read_text().count(
        "signature:"
    ) == 1

    # Served: one prediction printed with its curl command, and the endpoint answers.
    url = f"http://127.0.0.1:{serving_port}/predict"
    assert f"serving smart-home-occupancy version 1 at {url}" in out
    assert "one prediction from the served model:" in out
    assert re.search(r"-d @(\S+example\.json)", out) is not None
    body = result.answer  # the endpoint's answer to that example, asked before it was stopped
    assert body is not None, result.answer_failure
    assert body["model"] == {"name": "smart-home-occupancy", "version": "1"}
    assert len(body["predictions"]) == 1
    # Drift caught: a shifted batch raises the alert naming the features that moved.
    moved = re.search(
        r"alert EngageDriftDetected .* features that moved: (.+)", out.replace("\n", " ")
    )
    assert moved is not None, out
    assert {"temperature", "co2"} & {f.strip() for f in re.split(r"[, ]+", moved.group(1)[:60])}
