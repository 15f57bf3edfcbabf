"""A tuning job on real Ray Tune: trials as MLflow child runs and monitored jobs, the best
configuration retrained by Ray Train and registered behind the gate.

Kept tiny (3 trials of 2 epochs on two households' days): the search itself is what is
checked here; ASHA's saving is measured by benchmarks/tuning_asha.py. It runs in this
process on the shared ``ray_local`` session, like tests/integration/test_determinism.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from engage.monitor import EventStore
from engage.runtime.pipeline import RunOptions, run_pipeline
from engage.spec import parse_spec

pytestmark = pytest.mark.integration

SPEC = """
name: tuned
data:
  source: {type: synthetic, households: 2, days: 3, seed: 5}
  features: [temperature, humidity, co2, motion, power]
  target: occupied
  task: classification
  window: 20
  stride: 10
model: {name: mlp, params: {hidden: 16, layers: 1}}
train: {epochs: 2, batch_size: 64, num_workers: 1, seed: 1}
tune:
  space:
    train.learning_rate: {type: loguniform, low: 0.0005, high: 0.02}
    model.params.hidden: {type: choice, values: [8, 32]}
  num_samples: 3
  metric: val_accuracy
  searcher: tpe                 # Optuna through Ray Tune; random is what the CLI run uses
  max_concurrent: 2
  grace_period: 1
export: {formats: []}
tracking:
  registration:
    model_name: tuned-occupancy
    gate: {metric: val_accuracy, threshold: 0.5, direction: maximize}
"""


def test_a_tuning_job_tracks_trials_and_registers_the_retrained_best(ray_local, tmp_path) -> None:
    home = tmp_path / ".engage"
    uri = f"sqlite:///{home}/mlflow.db"

    result = run_pipeline(parse_spec(SPEC), RunOptions(tracking_uri=uri, home=home))

    assert result.registration is not None
    assert result.metrics["tune_trials"] == 3.0
    assert "test_accuracy" in result.metrics
    assert {"tune", "retrain", "train"} <= set(result.stage_seconds)
    client = mlflow.MlflowClient(tracking_uri=uri)
    parent = client.get_run(result.run_id)
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result.run_id}'"
    )
    assert len(children) == 3
    assert all(c.info.status == "FINISHED" for c in children)
    for child in children:
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        assert 1 <= len(history) <= 2  # ASHA may stop a trial after its grace epoch
        assert "train.learning_rate" in child.data.params
    best_file = client.download_artifacts(result.run_id, "tune/best.json", str(tmp_path))
    best = json.loads(Path(best_file).read_text())
    winner = next(c for c in children if c.data.tags["engage.tune.trial"] == str(best["trial"]))
    assert parent.data.tags["engage.tune.best_overrides"] == winner.data.tags["engage.overrides"]
    jobs = {j.job: j for j in EventStore.open(home).jobs()}
    trials = [j for name, j in jobs.items() if name.startswith("tuned/trial-")]
    assert len(trials) == 3
    assert all(j.state == "finished" for j in trials)
