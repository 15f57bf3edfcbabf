"""The job kinds' registry: the spec picks the kind, runtime loads it by name only."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from engage.errors import EngageError
from engage.runtime.job import Job
from engage.runtime.kinds import JOB_KINDS, KIND_MODULES, job_class, kind_of


def test_a_spec_with_a_federated_section_is_a_federated_job() -> None:
    assert kind_of(SimpleNamespace(federated=object())) == "federated"
    assert kind_of(SimpleNamespace(federated=None)) == "pipeline"


@pytest.mark.parametrize("kind", sorted(KIND_MODULES))
def test_every_listed_kind_loads_as_a_job_subclass_of_that_name(kind: str) -> None:
    cls = job_class(kind)

    assert issubclass(cls, Job)
    assert cls.name == kind
    assert cls.__doc__


def test_an_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(EngageError) as caught:
        job_class("no-such-kind")

    assert "unknown job kind 'no-such-kind'" in caught.value.message
    assert "federated" in caught.value.hint
    assert "pipeline" in caught.value.hint
    assert "tuning" in caught.value.hint


def test_runtime_does_not_import_federated_until_a_federated_spec_asks() -> None:
    code = (
        "import sys; from engage.runtime.pipeline import run_pipeline; "
        "from engage.runtime.kinds import job_class; job_class('pipeline'); "
        "assert 'engage.federated' not in sys.modules, 'runtime imported federated'; "
        "job_class('federated'); assert 'engage.federated.job' in sys.modules"
    )

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    assert done.returncode == 0, done.stderr


def test_importing_the_federated_job_registers_its_kind() -> None:
    import engage.federated.job

    assert JOB_KINDS.get("federated") is engage.federated.job.FederatedJob
