"""A project made by ``engage init`` trains as scaffolded (issue 13 item 2).

The scaffold is written by the same function ``engage init DIR`` calls, then its own spec
(its CSV, its ``model.module`` builder) runs through ``run_pipeline`` on the session's shared
Ray cluster: the CLI path around it (argument checks, the printed next steps) is covered by
tests/unit/cli/test_init.py, and a CLI run would start a Ray cluster of its own.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from engage.cli.init import SPEC_FILE, scaffold
from engage.runtime.pipeline import RunOptions, run_pipeline
from engage.spec import load_spec

pytestmark = pytest.mark.integration


def test_a_scaffolded_project_trains_its_own_builder_on_its_own_csv(
    ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "my-project"
    scaffold(project)
    monkeypatch.chdir(project)  # where the scaffold's README says to run it from
    home = tmp_path / ".engage"
    uri = f"sqlite:///{home}/mlflow.db"

    loaded = load_spec(project / SPEC_FILE, ["train.epochs=1", "export.formats=[]"])
    result = run_pipeline(loaded, RunOptions(tracking_uri=uri, home=home))

    run = mlflow.MlflowClient(tracking_uri=uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.name"] == "my-model"  # the project's builder, not a built-in
    assert 0.0 <= run.data.metrics["test_accuracy"] <= 1.0
    assert "baseline_test_accuracy" in run.data.metrics
    assert result.pending == 0
