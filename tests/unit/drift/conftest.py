"""Small shared fixtures: one scenario population and fitted built-in detectors per session,
and a registered model in a file-based MLflow store per module (``store``).

The store (a SQLite one costs seconds of schema migrations; the CLI reads the registry the
same way through either): a run that logged a reference under ``reference/`` as training
does and a ``test_accuracy`` of 0.9, registered as ``sensors`` with the alias
``champion``, and a second version whose run logged neither (alias ``unmonitored``). No
training: the reference is the shared Gaussian one, and the versions point at their runs
without a model file (the batch paths read only the run's metrics and ``reference/``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engage.drift import capture_reference, make_detector
from engage.drift.reference import ARTIFACT_PATH
from engage.drift.scenarios import population
from engage.tracking.store import ensure_experiment, open_client

FEATURES = ("a", "b", "c")
MODEL = "sensors"
BASELINE_ACCURACY = 0.9


@pytest.fixture(scope="session")
def pop():
    return population(households=4, days=2, seed=0)


@pytest.fixture(scope="session")
def gaussian_reference():
    rng = np.random.default_rng(0)
    windows = rng.normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(600, 8, 3))
    outputs = rng.normal(size=(600, 2))
    return capture_reference(windows, outputs, FEATURES, max_rows=500)


@pytest.fixture(scope="session")
def cusum(pop):
    return make_detector("cusum", ert=2000, n_sims=100, sim_length=1000).fit(pop.reference)


@pytest.fixture(scope="session")
def quality(pop):
    return make_detector("quality", window=10).fit(pop.reference)


@pytest.fixture(scope="module")
def store(tmp_path_factory, gaussian_reference) -> Iterator[str]:
    root = tmp_path_factory.mktemp("drift-registry")
    uri = (root / "mlruns").as_uri()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores otherwise
        mp.chdir(root)  # MLflow 3 may create its default ./mlflow.db: keep it out of the repo
        _register(open_client(uri), gaussian_reference.save(root / "reference"))
        yield uri


def _register(client, folder: Path) -> None:
    experiment = ensure_experiment(client, "drift-cli")
    with_ref = client.create_run(experiment).info
    client.log_artifacts(with_ref.run_id, str(folder), ARTIFACT_PATH)
    client.log_metric(with_ref.run_id, "test_accuracy", BASELINE_ACCURACY)
    without_ref = client.create_run(experiment).info
    client.create_registered_model(MODEL)
    for run in (with_ref, without_ref):
        client.create_model_version(MODEL, f"{run.artifact_uri}/model", run.run_id)
    client.set_registered_model_alias(MODEL, "champion", "1")
    client.set_registered_model_alias(MODEL, "unmonitored", "2")
