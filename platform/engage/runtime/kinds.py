"""The job kinds' registry: which :class:`~engage.runtime.job.Job` subclass runs a spec.

runtime picks a kind from the spec (the one kind section the spec sets, else
``"pipeline"``) and imports the module that registers it by name, here and only here, so
runtime never imports a kind's package (no import circle with ``engage.federated``).

How a later kind plugs in (a tuning, adaptive-sampling or profiling job):

1. a folder, say ``engage/tuning/``, with a ``job.py`` holding one subclass of
   :class:`~engage.runtime.job.Job` that overrides the hooks it needs (``prepare``,
   ``train``, ``evaluate``, and optionally ``register`` or ``deploy``), decorated with
   ``@JOB_KINDS.register()`` and with ``name = "tuning"``;
2. a spec section (``tuning:``) in :mod:`engage.spec.models`;
3. one row each in :data:`KIND_MODULES` (``"tuning": "engage.tuning.job"``) and
   :data:`engage.spec.checks.SECTION_KINDS` (``("tuning", "tuning")``), which the spec
   checks read to refuse a spec with two kind sections.

``engage run`` then runs every spec with that section as the new kind, with the same
run, Ray session, monitor, sinks, stage timings and end status as every other kind.
"""

from __future__ import annotations

import importlib

from engage.errors import EngageError
from engage.registry import Registry
from engage.runtime.job import Job, Observer, PipelineResult
from engage.runtime.options import RunOptions
from engage.spec import LoadedSpec, PipelineSpec
from engage.spec.checks import SECTION_KINDS  # (spec section, kind), one per spec

#: Every job kind, by name; a kind's module adds its class with ``@JOB_KINDS.register()``.
JOB_KINDS: Registry[type[Job]] = Registry("job kind", EngageError)

#: The module that registers each kind, imported by name on first use.
KIND_MODULES: dict[str, str] = {
    "pipeline": "engage.runtime.pipeline",
    "federated": "engage.federated.job",
    "tuning": "engage.train.tuning.job",
    "adaptive": "engage.train.adaptive.job",
}

DEFAULT_KIND = "pipeline"


def kind_of(spec: PipelineSpec) -> str:
    """The job kind that runs ``spec``: the kind section it sets (a loaded spec sets one at
    most), else ``"pipeline"``."""
    for section, kind in SECTION_KINDS:
        if getattr(spec, section, None) is not None:
            return kind
    return DEFAULT_KIND


def job_class(kind: str) -> type[Job]:
    """The class registered as ``kind``, importing its module on first use.

    Raises
    ------
    EngageError
        No kind of that name; the message lists the registered ones.
    """
    if kind not in JOB_KINDS and kind in KIND_MODULES:
        importlib.import_module(KIND_MODULES[kind])
    if kind not in JOB_KINDS:
        for module in KIND_MODULES.values():  # so the error lists every known kind
            importlib.import_module(module)
    return JOB_KINDS.get(kind)


def run_job(
    loaded: LoadedSpec, options: RunOptions, observer: Observer | None = None
) -> PipelineResult:
    """Run ``loaded`` as the job kind its spec asks for.

    Raises
    ------
    EngageError
        A subclass for bad input or a failed stage (see :meth:`Job.run`).
    """
    return job_class(kind_of(loaded.spec))(loaded, options, observer).run()
