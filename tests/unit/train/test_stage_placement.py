"""A stage's resource request (data stage, evaluation, serving replicas): the Ray options
that reserve it, and the up-front refusal of one no node can hold (no Ray: fake nodes)."""

from __future__ import annotations

import pytest

from engage.errors import ClusterError
from engage.runtime.stage_tasks import check_stage_requests
from engage.spec import parse_spec
from engage.train.placement import check_stage_fits, ray_options, stage_request
from tests.unit.spec.specs import MINIMAL

# The two loopback nodes of the cluster test, as ``ray.nodes()`` lists them: the second
# was started with --resources '{"node_b": 2}'.
HEAD = {"CPU": 1.0, "memory": 4e9, "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
SECOND = {"CPU": 1.0, "memory": 4e9, "node:127.0.0.1": 1.0, "node_b": 2.0}


def test_ray_options_name_the_builtin_resources_by_keyword() -> None:
    asked = {"CPU": 0.5, "GPU": 1.0, "memory": 2e9, "node_b": 1.0, "accelerator_type:A100": 0.1}

    assert ray_options(asked) == {
        "num_cpus": 0.5,
        "num_gpus": 1.0,
        "memory": 2e9,
        "resources": {"node_b": 1.0, "accelerator_type:A100": 0.1},
    }
    assert ray_options({"CPU": 2.0}) == {"num_cpus": 2.0}  # no empty custom mapping


def test_a_task_reserves_one_cpu_unless_it_names_its_own() -> None:
    assert stage_request({"node_b": 1.0}) == {"CPU": 1.0, "node_b": 1.0}
    assert stage_request({"CPU": 0.25}) == {"CPU": 0.25}


def test_a_stage_fits_on_the_node_that_offers_its_label() -> None:
    check_stage_fits("the data stage", "data.resources", {"CPU": 0.5, "node_b": 1}, [HEAD, SECOND])


def test_a_stage_asking_a_label_no_node_offers_is_refused() -> None:
    # Act
    with pytest.raises(ClusterError) as refused:
        check_stage_fits("the evaluation", "evaluate.resources", {"node_c": 1}, [HEAD, SECOND])

    # Assert: the field, what it asked, what the cluster has; exit 4.
    message = refused.value.message
    assert message.startswith("evaluate.resources asks for node_c ({'node_c': 1})")
    assert "node_b: 2" in message
    assert "remove it from evaluate.resources" in refused.value.hint
    assert refused.value.exit_code == 4


def test_a_stage_larger_than_every_node_is_refused_though_the_totals_fit() -> None:
    # Act: 2 CPUs in the cluster, but a task runs on one node and no node has 2.
    with pytest.raises(ClusterError) as refused:
        check_stage_fits("the data stage", "data.resources", {"CPU": 2.0}, [HEAD, SECOND])

    # Assert: the stage, what it asked, what each node has.
    message = refused.value.message
    assert "the data stage asks for {'CPU': 2.0} (data.resources)" in message
    assert "can hold 0 of that at most" in message
    assert "node 1: CPU 1; node 2: CPU 1" in message
    assert "memory" not in message
    assert refused.value.exit_code == 4


def test_replicas_are_counted_node_by_node() -> None:
    one_b = {"CPU": 0.5, "node_b": 1.0}
    check_stage_fits("serving", "deploy.resources_per_replica", one_b, [HEAD, SECOND], 2)
    with pytest.raises(ClusterError, match=r"serving asks for 3 x .*can hold 2 of that"):
        check_stage_fits("serving", "deploy.resources_per_replica", one_b, [HEAD, SECOND], 3)


def _spec(*overrides: str):
    return parse_spec(MINIMAL, overrides=overrides).spec


@pytest.mark.parametrize(
    ("override", "stage"),
    [
        ("data.resources={node_b: 3}", "the data stage"),
        ("evaluate.resources={CPU: 1.5}", "the evaluation"),
    ],
)
def test_the_job_checks_every_stage_before_any_runs(override: str, stage: str) -> None:
    with pytest.raises(ClusterError, match=f"^{stage} asks for"):
        check_stage_requests(_spec(override), [HEAD, SECOND])


def test_the_job_checks_its_replicas_only_when_it_serves_after_training() -> None:
    big = "deploy.resources_per_replica={node_b: 3}"
    check_stage_requests(_spec(big), [HEAD, SECOND])  # `engage deploy` checks it later
    with pytest.raises(ClusterError, match=r"^serving asks for"):
        check_stage_requests(_spec(big, "deploy.after_training=true"), [HEAD, SECOND])
    check_stage_requests(_spec("data.resources={CPU: 0.5, node_b: 1}"), [HEAD, SECOND])
