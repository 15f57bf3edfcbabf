"""Runtime: the job template that runs every job kind, the kinds' registry, the Ray session.

Users run a spec with :func:`run_pipeline` (any kind: the spec picks it) and extend
engage with a new kind by subclassing :class:`Job` (see :mod:`engage.runtime.kinds`).
The names below load on first use, so ``import engage.runtime`` (for the session alone)
stays light; :func:`prepare_data` pulls in the data stack, the job names the tracking one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from engage.runtime.options import RunOptions
from engage.runtime.session import SessionInfo, ray_session

if TYPE_CHECKING:
    from engage.runtime.context import JobContext, JobSinks, Observer
    from engage.runtime.job import Job, PipelineResult
    from engage.runtime.kinds import JOB_KINDS, kind_of, run_job
    from engage.runtime.pipeline import PipelineJob, run_pipeline
    from engage.runtime.stages import prepare_data

_LAZY = {
    "JOB_KINDS": "engage.runtime.kinds",
    "Job": "engage.runtime.job",
    "JobContext": "engage.runtime.context",
    "JobSinks": "engage.runtime.context",
    "Observer": "engage.runtime.context",
    "PipelineJob": "engage.runtime.pipeline",
    "PipelineResult": "engage.runtime.job",
    "kind_of": "engage.runtime.kinds",
    "prepare_data": "engage.runtime.stages",
    "run_job": "engage.runtime.kinds",
    "run_pipeline": "engage.runtime.pipeline",
}

__all__ = [
    "JOB_KINDS",
    "Job",
    "JobContext",
    "JobSinks",
    "Observer",
    "PipelineJob",
    "PipelineResult",
    "RunOptions",
    "SessionInfo",
    "kind_of",
    "prepare_data",
    "ray_session",
    "run_job",
    "run_pipeline",
]


def __getattr__(name: str) -> Any:
    """Import a lazily exported name from its module on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engage.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
