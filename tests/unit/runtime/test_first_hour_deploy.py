"""A deploy failure keeps the run's results (issue 13 item 3).

The quickstart trained and registered its model, then the deploy stage failed and the
command printed no run id, no registered version and no ``mlflow ui`` line, and exited 4.
Now the job hands its result to the display as soon as registration is done (before the
deploy starts), and a failed deploy is a DeployError (exit 11) that carries the result.
The job template runs with the fakes of tests/unit/runtime/test_job.py (no Ray, no MLflow).
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from engage.errors import ClusterError, DeployError
from engage.runtime import deploy as deploy_stage
from engage.runtime.stages import Logged
from tests.unit.runtime.test_job import DemoJob, Recorder, world  # noqa: F401 - world: a fixture


class Concluding(Recorder):
    """An observer that is also told the run's result, as the CLI's display is."""

    def __init__(self, log: list[str]) -> None:
        super().__init__("observer", log)
        self.results: list[Any] = []

    def concluded(self, result: Any) -> None:
        self.log.append("concluded")
        self.results.append(result)


class StepLogJob(DemoJob):
    """A DemoJob whose stage steps also go to the shared log, to order them against it."""

    def _step(self, name: str) -> None:
        self.log.append(name)
        super()._step(name)


def _job(world, observer, **kwargs: Any) -> StepLogJob:  # noqa: F811 - the fixture's value
    job = StepLogJob(world.loaded, world.options, observer, **kwargs)
    job.log = world.log
    return job


def test_the_result_is_shown_once_registered_before_the_deploy_starts(world) -> None:  # noqa: F811
    observer = Concluding(world.log)

    result = _job(world, observer).run()

    assert world.log.index("concluded") < world.log.index("deploy")
    (shown,) = observer.results
    assert shown.run_id == "mlflow-1"
    assert shown.registration.version == 4
    assert shown.deployment is None  # not deployed yet when it is shown
    assert result.deployment == "deployed"
    assert "deploy" in result.stage_seconds


def test_a_failed_deploy_is_a_deploy_error_that_keeps_the_run(world) -> None:  # noqa: F811
    observer = Concluding(world.log)
    cause = ClusterError("could not start a local Ray head for serving (exit 1)", hint="see log")
    job = _job(world, observer, fail="deploy", error=cause)

    with pytest.raises(DeployError) as caught:
        job.run()

    error = caught.value
    assert error.exit_code == 11
    assert "could not start a local Ray head for serving" in error.message
    assert "run mlflow-1" in error.message
    assert "version 4" in error.message
    assert "engage deploy m/4 --port N" in (error.hint or "")
    assert "see log" in (error.hint or "")
    assert error.run_result is observer.results[0]  # the CLI can still print it
    assert world.run.status == "FINISHED"  # the run ended before the deploy: it stays so


def test_a_job_that_registers_nothing_is_shown_and_not_deployed(world) -> None:  # noqa: F811
    observer = Concluding(world.log)
    job = _job(world, observer)
    job.register = lambda ctx, metrics: Logged()  # no registration: nothing to deploy

    result = job.run()

    assert observer.results == [result]
    assert "deploy" not in world.log


def test_a_deploy_subprocess_that_fails_says_what_failed_and_keeps_its_output(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failed(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        out = '{"error": "RuntimeError: HAProxy failed to start", "type": "RuntimeError"}\n'
        return subprocess.CompletedProcess(args, 70, out, "Traceback (most recent call last):\n")

    monkeypatch.setattr(subprocess, "run", failed)

    with pytest.raises(DeployError) as caught:
        deploy_stage._deploy_in_subprocess({"home": str(tmp_path), "model": "m/1"})

    log = tmp_path / "serve" / "deploy-stage.log"
    assert "HAProxy failed to start" in caught.value.message
    assert str(log) in (caught.value.hint or "")
    assert "Traceback" in log.read_text()


def test_a_deploy_subprocess_that_hangs_is_a_deploy_error(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hangs(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    monkeypatch.setattr(subprocess, "run", hangs)

    with pytest.raises(DeployError, match="did not finish within"):
        deploy_stage._deploy_in_subprocess({"home": str(tmp_path), "model": "m/1"})
