"""``engage profile`` logs its profile as an MLflow run, through the same helper as
``engage plan``: the knobs as parameters, throughputs and predicted speedups as metrics,
profile.json and profile.svg as artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage.cli.profile import PROFILE_EXPERIMENT, log_profile
from engage.profiler import ProfileReport, StageTimes, classify, remedies
from engage.spec import parse_spec
from engage.tracking import open_client

SPEC = """\
name: tiny
data:
  source: {type: synthetic, households: 1, days: 2}
  features: [temperature, co2]
  target: occupied
  task: classification
  window: 30
model: {name: mlp}
"""


def _report() -> ProfileReport:
    times = StageTimes(
        batch=64,
        storage=0.020,
        read=0.0,
        cache=0.002,
        preprocess=0.008,
        preprocess_gpu=None,
        compute=0.004,
        compute_large=0.007,
        cores=2,
    )
    return ProfileReport("tiny", times, classify(times), remedies(times))


def test_a_profile_is_one_mlflow_run_with_knobs_throughputs_speedups_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file store: a SQLite store's schema takes seconds to create; the run is the same.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    loaded = parse_spec(SPEC, base_dir=tmp_path)
    report = _report()
    folder = tmp_path / "profile-tiny"
    report.save(folder)
    uri = (tmp_path / "mlruns").as_uri()

    run_id = log_profile(loaded, report, folder, {"steps": 3, "bandwidth": None}, uri, tmp_path)

    client = open_client(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == PROFILE_EXPERIMENT
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["pipeline"] == "tiny"
    assert params["steps"] == "3"
    assert params["batch"] == "64"
    assert tags["engage.kind"] == "profile"
    assert tags["engage.profile.verdict"] == "storage-bound"
    assert metrics["profile_storage_samples_per_s"] == 64 / 0.020
    assert metrics["profile_compute_samples_per_s"] == 64 / 0.004
    assert metrics["profile_stall_ratio"] == report.times.stall_ratio
    speedups = {r.key: r.speedup for r in report.remedies if r.speedup is not None}
    assert {"cache", "loader_workers", "double_batch"} <= set(speedups)
    for key, value in speedups.items():
        assert metrics[f"profile_speedup_{key}"] == value
    files = {a.path for a in client.list_artifacts(run_id, "profile")}
    assert files == {"profile/profile.json", "profile/profile.svg"}
