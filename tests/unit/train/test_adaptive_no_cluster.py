"""The adaptive kind trains in this process and submits no Ray work, so its job enters no
Ray session: the template skips ``enter_ray`` for a kind that declares it needs no cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import engage.runtime.job as job_module
from engage.events import FanOut
from engage.runtime.context import JobContext, JobSinks, NullObserver, StageTimer
from engage.runtime.options import RunOptions
from engage.runtime.pipeline import PipelineJob
from engage.spec import parse_spec
from engage.train.adaptive.job import AdaptiveJob

SPEC = """\
name: adaptive
data:
  source: {type: synthetic}
  features: [temperature, co2, motion]
  target: occupied
  task: classification
  window: 20
model: {name: mlp, params: {hidden: 8, layers: 1}}
train: {epochs: 1, batch_size: 64}
ADAPTIVE
"""


class _Session:
    """What ``enter_ray`` hands back, recording that it was left."""

    info = None
    closed = False

    def close(self) -> None:
        self.closed = True


def _in_ray(job: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[dict, list]:
    """Run the template's Ray part of ``job`` with Ray entry, monitor and stages faked."""
    entered: list[_Session] = []

    def enter(options: RunOptions, serve_after: Any = None) -> _Session:
        entered.append(_Session())
        return entered[-1]

    monkeypatch.setattr(job_module, "enter_ray", enter)
    monkeypatch.setattr(job_module, "start_monitor", lambda *a, **k: (None, None))
    monkeypatch.setattr(job, "train", lambda ctx: "trained")
    monkeypatch.setattr(job, "evaluate", lambda ctx, trained: {"test_accuracy": 1.0})
    ctx = JobContext(job.loaded, job.options, None, None, FanOut([]), StageTimer(), None)
    ctx.run = None
    ctx.sinks = JobSinks(NullObserver(), NullObserver(), NullObserver())
    metrics = job._in_ray(ctx)
    return {"metrics": metrics, "stages": set(ctx.timer.seconds), "session": ctx.session}, entered


def test_an_adaptive_job_enters_no_ray_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded = parse_spec(SPEC.replace("ADAPTIVE", "adaptive: {rounds: 1}"))
    job = AdaptiveJob(loaded, RunOptions(home=tmp_path))

    seen, entered = _in_ray(job, monkeypatch, tmp_path)

    assert AdaptiveJob.needs_cluster is False
    assert entered == []
    assert seen["session"] is None
    assert seen["stages"] == {"train", "evaluate"}
    assert seen["metrics"] == {"test_accuracy": 1.0}


def test_a_pipeline_job_still_enters_ray_and_leaves_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    job = PipelineJob(parse_spec(SPEC.replace("ADAPTIVE", "")), RunOptions(home=tmp_path))

    seen, entered = _in_ray(job, monkeypatch, tmp_path)

    assert PipelineJob.needs_cluster is True
    assert len(entered) == 1
    assert entered[0].closed
    assert seen["stages"] == {"ray", "train", "evaluate"}


def test_an_address_given_to_an_adaptive_job_is_said_to_be_unused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded = parse_spec(SPEC.replace("ADAPTIVE", "adaptive: {rounds: 1}"))
    job = AdaptiveJob(loaded, RunOptions(home=tmp_path, address="127.0.0.1:6379"))
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(JobContext, "message", lambda self, name, text: said.append((name, text)))

    _, entered = _in_ray(job, monkeypatch, tmp_path)

    assert entered == []
    assert said == [("note", "adaptive jobs train in this process; 127.0.0.1:6379 is not used")]
