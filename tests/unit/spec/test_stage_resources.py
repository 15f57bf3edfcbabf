"""Per-stage resource requests in the spec: ``data.resources``, ``evaluate.resources`` and
``deploy.resources_per_replica`` validate as ``train.resources_per_worker`` does, are refused
where the job cannot honour them, and land in the run's parameters."""

from __future__ import annotations

import pytest

from engage.errors import SpecError
from engage.spec import parse_spec
from engage.spec.models import DeploySpec
from engage.tracking.lineage import flatten
from tests.unit.spec.specs import MINIMAL

TUNE = "tune={space: {train.learning_rate: {type: choice, values: [0.001, 0.01]}}}"
FIELDS = ["data.resources", "evaluate.resources", "deploy.resources_per_replica"]


def _load(*overrides: str):
    return parse_spec(MINIMAL, origin="spec.yaml", overrides=overrides)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("{node_b: 0}", "resource amounts must be > 0, got {'node_b': 0.0}"),
        ('{" ": 1}', "resource names must not be empty"),
        ("{object_store_memory: 1000}", "object_store_memory cannot be reserved"),
        ("{}", "at least 1 item"),
    ],
)
def test_a_bad_stage_request_is_refused_at_its_field(field: str, value: str, needle: str) -> None:
    # Act
    with pytest.raises(SpecError) as refused:
        _load(f"{field}={value}")

    # Assert: one message naming the field and what is wrong with it.
    assert f"{field}: " in refused.value.message
    assert needle in refused.value.message


def test_stage_requests_land_in_the_run_params_like_the_workers() -> None:
    # Arrange
    loaded = _load(
        "data.resources={CPU: 0.5, node_b: 1}",
        "evaluate.resources={node_b: 1}",
        "deploy.resources_per_replica={GPU: 1, accelerator_type:A100: 0.1}",
    )

    # Act
    params = flatten(loaded.resolved())

    # Assert
    assert params["data.resources.CPU"] == "0.5"
    assert params["data.resources.node_b"] == "1.0"
    assert params["evaluate.resources.node_b"] == "1.0"
    assert params["deploy.resources_per_replica.GPU"] == "1.0"
    assert params["deploy.resources_per_replica.accelerator_type:A100"] == "0.1"
    assert params["train.resources_per_worker.CPU"] == "1.0"


def test_unset_stage_requests_run_in_the_driver() -> None:
    spec = _load().spec

    assert spec.data.resources is None
    assert spec.evaluate.resources is None
    assert spec.deploy.resources_per_replica is None


def test_a_replica_takes_cpus_per_replica_unless_its_resources_name_a_cpu() -> None:
    assert DeploySpec().replica_resources == {"CPU": 0.5}
    assert DeploySpec(resources_per_replica={"GPU": 1}).replica_resources == {
        "CPU": 0.5,
        "GPU": 1.0,
    }
    assert DeploySpec(cpus_per_replica=2).replica_resources == {"CPU": 2.0}
    assert DeploySpec(resources_per_replica={"CPU": 2, "node_b": 1}).replica_resources == {
        "CPU": 2.0,
        "node_b": 1.0,
    }


def test_a_replica_cpu_set_twice_is_refused() -> None:
    with pytest.raises(SpecError, match="both set a replica's CPUs; keep one of the two"):
        _load("deploy.cpus_per_replica=1", "deploy.resources_per_replica={CPU: 2}")


def test_a_streamed_split_refuses_a_data_stage_request() -> None:
    # A streamed training split is read by Ray Data tasks, not by the one data-stage task.
    with pytest.raises(SpecError) as refused:
        parse_spec(
            MINIMAL.replace("{type: synthetic}", "{type: csv, path: rows.csv}"),
            origin="spec.yaml",
            overrides=["data.streaming=true", "data.resources={node_b: 1}"],
        )

    assert "data.resources: got data.streaming: true" in refused.value.message
    assert "set data.streaming: false" in refused.value.message


@pytest.mark.parametrize(
    ("section", "field", "refused"),
    [
        ("federated={rounds: 1}", "data.resources", True),
        ("federated={rounds: 1}", "evaluate.resources", True),
        ("adaptive={rounds: 1}", "data.resources", True),
        ("adaptive={rounds: 1}", "evaluate.resources", True),
        (TUNE, "data.resources", True),
        (TUNE, "evaluate.resources", False),
    ],
)
def test_a_kind_that_cannot_place_a_stage_refuses_its_request(
    section: str, field: str, refused: bool
) -> None:
    overrides = (section, f"{field}={{node_b: 1}}")
    if not refused:  # the tuning kind evaluates its retrained model as the pipeline does
        assert getattr(_load(*overrides).spec, field.split(".")[0]).resources == {"node_b": 1.0}
        return
    with pytest.raises(SpecError) as caught:
        _load(*overrides)
    assert f"{field}: a " in caught.value.message
    assert "does not run this stage as one Ray task" in caught.value.message
