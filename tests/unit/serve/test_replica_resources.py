"""Each replica reserves ``deploy.cpus_per_replica`` and ``deploy.resources_per_replica``:
the Serve deployment engage builds carries them as its ``ray_actor_options`` (no server)."""

from __future__ import annotations

import pytest
from ray import serve

from engage.serve.app import Ingress
from engage.serve.build import deployment_options
from engage.spec.models import DeploySpec


def _actor_options(**fields: object) -> dict:
    # Serve validates the options here, as `engage deploy` and a RayService config do.
    return (
        serve.deployment(Ingress)
        .options(**deployment_options(DeploySpec(**fields)))
        .ray_actor_options
    )


def test_a_replica_reserves_cpus_per_replica_by_default() -> None:
    assert _actor_options() == {"num_cpus": 0.5}
    assert _actor_options(cpus_per_replica=2) == {"num_cpus": 2.0}


def test_a_replica_reserves_gpus_memory_and_custom_resources() -> None:
    options = _actor_options(
        resources_per_replica={"GPU": 1, "memory": 2e9, "node_b": 1, "accelerator_type:A100": 0.1}
    )

    assert options == {
        "num_cpus": 0.5,
        "num_gpus": 1.0,
        "memory": 2e9,
        "resources": {"node_b": 1.0, "accelerator_type:A100": 0.1},
    }


def test_a_cpu_in_resources_per_replica_replaces_the_default() -> None:
    assert _actor_options(resources_per_replica={"CPU": 2, "node_b": 1}) == {
        "num_cpus": 2.0,
        "resources": {"node_b": 1.0},
    }


def test_both_cpu_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="keep one of the two"):
        DeploySpec(cpus_per_replica=1, resources_per_replica={"CPU": 1})
