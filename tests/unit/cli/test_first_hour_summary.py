"""`engage run` prints the run's summary before its deploy, and keeps it when the deploy fails.

The pipeline is replaced by a fake that does what the job template does: it shows the
result to the display once registered, then deploys (issue 13 item 3: a failed deploy
used to hide the run id, the registered version and the ``mlflow ui`` line, exit 4).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer

from engage.cli import console
from engage.cli.run import run_file
from engage.errors import DeployError
from engage.runtime import pipeline
from engage.runtime.job import PipelineResult

SPEC = Path(__file__).resolve().parents[3] / "pipelines" / "quickstart.yaml"
RUN_ID = "0123456789abcdef0123456789abcdef"


def _result(deployment: Any = None) -> PipelineResult:
    registration = SimpleNamespace(name="smart-home-occupancy", version="1", alias="candidate")
    return PipelineResult(
        RUN_ID, "local-1", "1", "quickstart", "sqlite:////tmp/home/mlflow.db",
        {"test_accuracy": 0.9}, None, registration, "models:/m-1", {"train": 3.0}, {}, 0,
        deployment=deployment,
    )  # fmt: skip


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch):
    """``console.guarded`` without touching the test process's SIGTERM handler."""
    monkeypatch.setattr(console.signal, "signal", lambda *args: None)
    return console.guarded


def _run(guarded, tmp_path: Path) -> int:
    with pytest.raises(typer.Exit) as caught:
        guarded(lambda: run_file(SPEC, ["train.epochs=1"], None, None, tmp_path, False))
    return caught.value.exit_code


def test_a_failed_deploy_still_prints_the_run_summary_and_exits_11(
    guarded, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    def run_pipeline(loaded: Any, options: Any, display: Any) -> Any:
        result = _result()
        display.concluded(result)
        display.stage("deploy", "serving smart-home-occupancy version 1")
        raise DeployError("could not start a local Ray head", hint="h", run_result=result)

    monkeypatch.setattr(pipeline, "run_pipeline", run_pipeline)

    code = _run(guarded, tmp_path)

    captured = capsys.readouterr()
    assert code == 11
    assert f"run id: {RUN_ID}" in captured.out
    assert "registered model smart-home-occupancy version 1 (alias @candidate)" in captured.out
    assert "mlflow ui --backend-store-uri sqlite:///" in captured.out
    assert captured.out.index("run id:") < captured.out.index("deploy:")  # before the deploy
    assert "error: serving failed" in captured.err
    assert "could not start a local Ray head" in captured.err


def test_a_successful_deploy_prints_the_summary_once_then_the_serving_lines(
    guarded, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    served = SimpleNamespace(
        model="smart-home-occupancy", version="1", url="http://127.0.0.1:8000", seconds=1.0
    )
    deployment = SimpleNamespace(
        result=served, response={"predictions": [1]}, example_file=tmp_path / "example.json"
    )

    def run_pipeline(loaded: Any, options: Any, display: Any) -> Any:
        display.concluded(_result())
        display.stage("deploy", "serving smart-home-occupancy version 1")
        return _result(deployment)

    monkeypatch.setattr(pipeline, "run_pipeline", run_pipeline)

    code = _run(guarded, tmp_path)

    out = capsys.readouterr().out
    assert code == 0
    assert out.count("run id:") == 1
    assert out.count("mlflow ui") == 1
    assert "serving smart-home-occupancy version 1 at http://127.0.0.1:8000/predict" in out
    assert out.index("run id:") < out.index("deploy:") < out.index("serving smart-home")


def test_a_run_without_a_display_callback_still_gets_its_summary(
    guarded, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    # A job kind that never shows its result early (no concluded call): printed at the end.
    monkeypatch.setattr(pipeline, "run_pipeline", lambda loaded, options, display: _result())

    assert _run(guarded, tmp_path) == 0

    assert capsys.readouterr().out.count(f"run id: {RUN_ID}") == 1
