"""Custom Ray resources and placement for the training workers: the spec accepts them, the
trainer passes them to Ray Train, and ``check_fits`` refuses one no node offers (no Ray)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engage.errors import ClusterError
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob
from engage.train.trainer import check_fits, scaling_config

# What ray.cluster_resources() says for a two-node loopback cluster whose second node was
# started with --resources '{"node_b": 2}'.
TWO_NODES = {
    "CPU": 2.0,
    "memory": 8e9,
    "object_store_memory": 2e9,
    "node:127.0.0.1": 2.0,
    "node:__internal_head__": 1.0,
    "node_b": 2.0,
}


def _job(streamed: int | None = None, **train: object) -> TrainJob:
    spec = TrainSpec(**{"batch_size": 8, **train})
    shape = ModelShape(4, 2, 1)
    return TrainJob(
        spec, ModelSpec(name="mlp"), "regression", shape, None, None, "", streamed=streamed
    )


def test_spec_accepts_custom_resources_and_placement() -> None:
    # Act
    spec = TrainSpec(
        resources_per_worker={"CPU": 1, "node_b": 1, "accelerator_type:A100": 0.1},
        placement="spread",
    )

    # Assert
    assert spec.resources_per_worker == {"CPU": 1.0, "node_b": 1.0, "accelerator_type:A100": 0.1}
    assert spec.placement == "spread"
    assert TrainSpec().placement == "pack"  # Ray Train's own default


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"placement": "scatter"}, "placement"),
        ({"resources_per_worker": {" ": 1}}, "resource names must not be empty"),
        ({"resources_per_worker": {"node_b": 0}}, "resource amounts must be > 0"),
    ],
)
def test_spec_refuses_a_bad_placement_or_resource(fields: dict, needle: str) -> None:
    # Act / Assert
    with pytest.raises(ValidationError, match=needle):
        TrainSpec(**fields)


@pytest.mark.parametrize(("placement", "strategy"), [("pack", "PACK"), ("spread", "SPREAD")])
def test_scaling_config_carries_custom_resources_and_placement(
    placement: str, strategy: str
) -> None:
    # Act
    scaling = scaling_config(
        _job(resources_per_worker={"CPU": 0.5, "node_b": 1}, placement=placement)
    )

    # Assert
    assert scaling.resources_per_worker == {"CPU": 0.5, "node_b": 1.0}
    assert scaling.placement_strategy == strategy


def test_check_fits_refuses_a_custom_resource_no_node_offers() -> None:
    # Arrange
    job = _job(num_workers=1, resources_per_worker={"CPU": 1, "accelerator_type:H100": 1})

    # Act
    with pytest.raises(ClusterError) as caught:
        check_fits(job, TWO_NODES)

    # Assert: the message names what was asked and what the cluster has, without the byte
    # counts; the exit code is the cluster error's, as for any job that does not fit.
    message = caught.value.message
    assert "asks for accelerator_type:H100" in message
    assert "{'CPU': 1.0, 'accelerator_type:H100': 1.0}" in message
    assert "the cluster has CPU: 2, node:127.0.0.1: 2, node:__internal_head__: 1, node_b: 2" in (
        message
    )
    assert "memory" not in message
    assert "ray start --resources" in caught.value.hint
    assert caught.value.exit_code == ClusterError.exit_code == 4


def test_check_fits_accepts_a_custom_resource_the_cluster_offers() -> None:
    # Act / Assert: two workers x node_b 1 fit the second node's node_b 2.
    check_fits(_job(num_workers=2, resources_per_worker={"CPU": 0.5, "node_b": 1}), TWO_NODES)


def test_check_fits_still_refuses_too_much_of_an_offered_resource() -> None:
    # Arrange: node_b exists, but three workers need 3 of its 2.
    job = _job(num_workers=3, resources_per_worker={"CPU": 0.5, "node_b": 1})

    # Act / Assert
    with pytest.raises(ClusterError, match="node_b: needs 3, cluster has 2"):
        check_fits(job, TWO_NODES)


# The two loopback nodes of TWO_NODES, one by one, as ``ray.nodes()`` lists them.
HEAD = {"CPU": 1.0, "memory": 4e9, "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
SECOND = {"CPU": 1.0, "memory": 4e9, "node:127.0.0.1": 1.0, "node_b": 2.0}


def test_a_worker_larger_than_every_node_is_refused_though_the_totals_fit() -> None:
    # Arrange: 2 CPUs in the cluster, but no node has 2: a worker cannot span nodes.
    job = _job(num_workers=1, resources_per_worker={"CPU": 2})

    # Act
    with pytest.raises(ClusterError) as caught:
        check_fits(job, TWO_NODES, [HEAD, SECOND])

    # Assert: what one worker needs, what each node has, how many workers could be placed.
    message = caught.value.message
    assert "1 workers x {'CPU': 2.0} do not fit the nodes" in message
    assert "at most 0 of them can be placed" in message
    assert "node 1: CPU 1" in message
    assert "node 2: CPU 1" in message
    assert "memory" not in message
    assert "a worker runs on one node" in caught.value.hint
    assert caught.value.exit_code == 4


def test_workers_are_counted_node_by_node() -> None:
    # Two workers of 0.75 CPU fit the totals (1.5 of 2) and one node each: accepted.
    check_fits(_job(num_workers=2, resources_per_worker={"CPU": 0.75}), TWO_NODES, [HEAD, SECOND])
    # Three fit the totals (2.25 > 2 does not; take 0.6: 1.8 of 2) but only one per node.
    with pytest.raises(ClusterError, match="at most 2 of them can be placed"):
        check_fits(
            _job(num_workers=3, resources_per_worker={"CPU": 0.6}), TWO_NODES, [HEAD, SECOND]
        )
    # A custom resource only the second node offers caps the count at what that node holds.
    check_fits(
        _job(num_workers=2, resources_per_worker={"CPU": 0.5, "node_b": 1}),
        TWO_NODES,
        [HEAD, SECOND],
    )


def test_min_workers_makes_the_worker_count_an_elastic_range() -> None:
    assert scaling_config(_job(num_workers=4, min_workers=2)).num_workers == (2, 4)
    assert scaling_config(_job(num_workers=4, min_workers=4)).num_workers == 4  # no range
    assert scaling_config(_job(num_workers=4)).num_workers == 4


def test_an_elastic_job_needs_only_its_minimum_to_fit() -> None:
    # Three 1-CPU workers never fit 2 CPUs; an elastic job that can run on 2 does.
    with pytest.raises(ClusterError, match="3 workers"):
        check_fits(_job(num_workers=3), TWO_NODES, [HEAD, SECOND])
    check_fits(_job(num_workers=3, min_workers=2), TWO_NODES, [HEAD, SECOND])
    with pytest.raises(ClusterError, match="3 workers"):
        check_fits(_job(num_workers=4, min_workers=3), TWO_NODES, [HEAD, SECOND])


def test_a_streamed_job_leaves_ray_data_a_cpu_for_its_readers() -> None:
    # Ray Data reads a streamed split in tasks that need a CPU beside the workers: two
    # 1-CPU workers on 2 CPUs never saw a batch (a run waited 6 minutes for its first step).
    with pytest.raises(ClusterError, match="Ray Data") as refused:
        check_fits(_job(num_workers=2, streamed=1000), TWO_NODES, [HEAD, SECOND])
    assert "train.num_workers" in refused.value.hint
    check_fits(_job(num_workers=1, streamed=1000), TWO_NODES, [HEAD, SECOND])
    check_fits(_job(num_workers=2, streamed=1000, resources_per_worker={"CPU": 0.5}), TWO_NODES)
    with pytest.raises(ClusterError, match="Ray Data"):  # an elastic job grows to fill the CPUs
        check_fits(_job(num_workers=2, min_workers=1, streamed=1000), TWO_NODES, [HEAD, SECOND])
    check_fits(_job(num_workers=2), TWO_NODES, [HEAD, SECOND])  # in memory: every CPU can train


def test_min_workers_above_num_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="min_workers 3 is larger than num_workers 2"):
        TrainSpec(num_workers=2, min_workers=3)
