"""The deploy subprocess started early gets the model later; one process does both.

A job that trains on the serving head starts its deploy's process when it joins the head
(:func:`engage.serve.deploy_process.start_early`): it starts Serve while the job trains, and the
deploy stage then sends it the registered version. Here the process is a small stand-in
that records the lines it read (no engage import, no Ray); ``deploy_job.main`` is tested
in-process with its two steps replaced.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engage.runtime import deploy as deploy_stage
from engage.serve import DeployResult, deploy_job, deploy_process
from engage.spec.models import DeploySpec

# Reads one line, then (without "model" in it) a second one, and answers with a
# DeployResult that records both lines: what deploy_job's protocol would see.
STAND_IN = r"""
import json, sys
first = json.loads(sys.stdin.readline())
lines = [first]
if "model" not in first:
    line = sys.stdin.readline()
    if not line.strip():
        sys.exit(0)
    lines.append(json.loads(line))
print(json.dumps({"app": "a", "url": json.dumps(lines), "model": "m", "version": "1",
                  "canary": None, "canary_weight": 0.0, "replaced": [], "cluster": "c",
                  "started_cluster": False, "run_id": None, "seconds": 0.1}))
"""


@pytest.fixture
def spawned(monkeypatch) -> list:
    """The stand-in for ``python -m engage.serve.deploy_job``; every process started."""
    started: list = []
    real_popen = subprocess.Popen

    def popen(args, **kwargs):
        process = real_popen([sys.executable, "-c", STAND_IN], **kwargs)
        started.append(process)
        return process

    def run(args, input, timeout, **kwargs):  # noqa: A002 - subprocess.run's name
        started.append(args)
        process = real_popen(
            [sys.executable, "-c", STAND_IN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        out, err = process.communicate(input, timeout)
        return subprocess.CompletedProcess(args, process.returncode, out, err)

    monkeypatch.setattr(deploy_process.subprocess, "Popen", popen)
    monkeypatch.setattr(deploy_process.subprocess, "run", run)
    yield started
    deploy_process.cancel_early()


def _options(home: Path) -> dict:
    return {"model": "m/1", "spec": DeploySpec().model_dump(mode="json"), "home": str(home)}


def test_the_deploy_hands_the_model_to_the_process_started_early(spawned, tmp_path) -> None:
    deploy_process.start_early(DeploySpec(port=8123), tmp_path)

    result = deploy_stage._deploy_in_subprocess(_options(tmp_path))

    assert len(spawned) == 1  # no second process
    prepare, model = json.loads(result.url)
    assert prepare["spec"]["port"] == 8123
    assert "model" not in prepare
    assert model["model"] == "m/1"


def test_without_an_early_start_one_process_gets_everything(spawned, tmp_path) -> None:
    result = deploy_stage._deploy_in_subprocess(_options(tmp_path))

    assert len(spawned) == 1
    (only,) = json.loads(result.url)
    assert only["model"] == "m/1"


def test_a_cancelled_early_start_ends_its_process(spawned, tmp_path) -> None:
    deploy_process.start_early(DeploySpec(), tmp_path)

    deploy_process.cancel_early()

    (process,) = spawned
    assert process.wait(timeout=5) == 0  # it read the end of its input and left
    assert deploy_process._EARLY == {}
    deploy_stage._deploy_in_subprocess(_options(tmp_path))
    assert len(spawned) == 2  # the deploy started a new one


def test_deploy_job_prepares_then_deploys_what_the_second_line_names(monkeypatch, capsys) -> None:
    seen = []
    result = DeployResult("a", "u", "m", "1", None, 0.0, (), "c", False, None, 0.1)

    def deploy(options):
        seen.append(("deploy", options.model))
        return result

    monkeypatch.setattr(deploy_job, "_prepare", lambda raw: seen.append(("prepare", dict(raw))))
    monkeypatch.setattr("engage.serve.deploy_model", deploy)
    first = {"spec": {}, "home": "/tmp/h", "address": None}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(first) + "\n"))

    assert deploy_job.main() == 0  # end of input: nothing to deploy
    assert seen == [("prepare", first)]

    seen.clear()
    second = json.dumps({**first, "model": "m/1"})
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(first) + "\n" + second + "\n"))
    assert deploy_job.main() == 0
    assert seen == [("prepare", first), ("deploy", "m/1")]
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["app"] == "a"
